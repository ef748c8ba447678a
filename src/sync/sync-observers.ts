/**
 * Discovery observers that report one stream's events to {@link Metrics}:
 * responses, ACKs and NACKs per kind, and the sync lag, the time from a
 * store change reaching the serving side's change feed to the peer's ACK of
 * the response that carried it.
 *
 * The lag is measured per resource key: the first unsent change of a key
 * starts its clock, the response that carries the key (a delta response
 * naming it, or any state-of-the-world response of its type) takes it in
 * flight, and that response's ACK stops it. A NACK or an ACK timeout puts
 * the keys back, so their clocks keep running until a resend is ACKed.
 * The clocks of each type are kept by {@link TypeLagClocks} (lag-clocks.ts).
 *
 * @module
 */
import type { ClientObserver, ServerObserver, SnapshotSource } from "../discovery/types.ts";
import type { Metrics } from "../metrics.ts";
import { TypeLagClocks } from "./lag-clocks.ts";

/** The observers of one stream, ready to hand to a discovery server and client. */
export interface StreamObservers {
  /** For the stream's discovery server (this side's responses). */
  readonly server: ServerObserver;
  /** For the stream's discovery client (the peer's responses). */
  readonly client: ClientObserver;
  /** Wraps the server's source so the lag clock starts at each change it reports. */
  source(source: SnapshotSource): SnapshotSource;
}

/** One type's lag clocks on a stream, and how its lags are reported (made once per type). */
interface ObservedType {
  readonly clocks: TypeLagClocks;
  readonly report: (ms: number) => void;
}

/**
 * Observers for one stream with `peer`, reporting to `metrics`. `kindOf`
 * names a type URL's kind (the label metrics use).
 */
export function streamObservers(
  metrics: Metrics,
  peer: string,
  kindOf: (typeUrl: string) => string,
  now: () => number = () => performance.now(),
): StreamObservers {
  const types = new Map<string, ObservedType>();
  const typeOf = (typeUrl: string): ObservedType => {
    let t = types.get(typeUrl);
    if (t === undefined) {
      const kind = kindOf(typeUrl);
      t = { clocks: new TypeLagClocks(kind), report: (ms) => metrics.syncLag(peer, kind, ms) };
      types.set(typeUrl, t);
    }
    return t;
  };
  const clocks = (typeUrl: string): TypeLagClocks => typeOf(typeUrl).clocks;
  return {
    server: {
      sent: (typeUrl, info) => {
        const c = clocks(typeUrl);
        metrics.discovery("response", peer, c.kind);
        // Nothing running (a response after a NACK, or one carrying what changed before the stream began): no keys to look at.
        if (c.running) c.send(info.nonce, info.keys);
      },
      acked: (typeUrl, _version, nonce) => {
        const t = typeOf(typeUrl);
        metrics.discovery("ack", peer, t.clocks.kind);
        t.clocks.stop(nonce, now, t.report);
      },
      nacked: (typeUrl, _version, _error, nonce) => {
        const c = clocks(typeUrl);
        metrics.discovery("nack", peer, c.kind);
        c.putBack(nonce);
      },
      stalled: (typeUrl, nonce) => clocks(typeUrl).putBack(nonce),
      resourceErrors: (typeUrl, errors) => {
        if (errors.length > 0) metrics.discovery("partial_ack", peer, clocks(typeUrl).kind);
      },
    },
    client: {
      accepted: (typeUrl) => metrics.discovery("accepted", peer, clocks(typeUrl).kind),
      rejected: (typeUrl) => metrics.discovery("rejected", peer, clocks(typeUrl).kind),
    },
    source: (source) => ({
      typeUrls: source.typeUrls,
      snapshot: (typeUrl, signal) => source.snapshot(typeUrl, signal),
      ...(source.snapshotNow === undefined
        ? {}
        : { snapshotNow: (typeUrl: string) => source.snapshotNow?.(typeUrl) }),
      onChange: (listener, signal) =>
        source.onChange((typeUrl, key) => {
          if (key !== undefined) clocks(typeUrl).start(key, now());
          listener(typeUrl, key);
        }, signal),
    }),
  };
}

/** One server observer calling each of `observers` in order. */
export function combineServerObservers(...observers: ServerObserver[]): ServerObserver {
  const combined: ServerObserver = {
    sent: (typeUrl, info) => {
      for (const o of observers) o.sent?.(typeUrl, info);
    },
    acked: (typeUrl, version, nonce) => {
      for (const o of observers) o.acked?.(typeUrl, version, nonce);
    },
    nacked: (typeUrl, version, error, nonce) => {
      for (const o of observers) o.nacked?.(typeUrl, version, error, nonce);
    },
    stalled: (typeUrl, nonce, waitedMs) => {
      for (const o of observers) o.stalled?.(typeUrl, nonce, waitedMs);
    },
    oversized: (typeUrl, key, bytes, limit) => {
      for (const o of observers) o.oversized?.(typeUrl, key, bytes, limit);
    },
    resourceErrors: (typeUrl, errors, omitted) => {
      for (const o of observers) o.resourceErrors?.(typeUrl, errors, omitted);
    },
    unknownType: (typeUrl) => {
      for (const o of observers) o.unknownType?.(typeUrl);
    },
  };
  // Only where one of them listens (tracing): the server tells it after nearly every response.
  if (!observers.some((o) => o.caughtUp !== undefined)) return combined;
  return {
    ...combined,
    caughtUp: (typeUrl) => {
      for (const o of observers) o.caughtUp?.(typeUrl);
    },
  };
}

/** One client observer calling each of `observers` in order. */
export function combineClientObservers(...observers: ClientObserver[]): ClientObserver {
  return {
    accepted: (typeUrl, info) => {
      for (const o of observers) o.accepted?.(typeUrl, info);
    },
    rejected: (typeUrl, version, error) => {
      for (const o of observers) o.rejected?.(typeUrl, version, error);
    },
    resourceRejected: (typeUrl, key, reason) => {
      for (const o of observers) o.resourceRejected?.(typeUrl, key, reason);
    },
  };
}
