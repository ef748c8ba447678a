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
 *
 * @module
 */
import type { ClientObserver, ServerObserver, SnapshotSource } from "../discovery/types.ts";
import type { Metrics } from "../metrics.ts";

/** Most keys per type whose clock runs at once; the oldest is dropped beyond it (bounds memory for changes never sent). */
const MAX_TRACKED_KEYS = 10_000;

/** The observers of one stream, ready to hand to a discovery server and client. */
export interface StreamObservers {
  /** For the stream's discovery server (this side's responses). */
  readonly server: ServerObserver;
  /** For the stream's discovery client (the peer's responses). */
  readonly client: ClientObserver;
  /** Wraps the server's source so the lag clock starts at each change it reports. */
  source(source: SnapshotSource): SnapshotSource;
}

interface TypeClocks {
  /** Key -> when its first unsent change was reported. */
  readonly pending: Map<string, number>;
  /** Nonce -> the keys (and their start times) that response carried. */
  readonly inflight: Map<string, [key: string, since: number][]>;
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
  const types = new Map<string, TypeClocks>();
  const clocks = (typeUrl: string): TypeClocks => {
    let c = types.get(typeUrl);
    if (c === undefined) {
      c = { pending: new Map(), inflight: new Map() };
      types.set(typeUrl, c);
    }
    return c;
  };
  const start = (c: TypeClocks, key: string, since: number): void => {
    const earlier = c.pending.get(key);
    if (earlier !== undefined && earlier <= since) return;
    c.pending.delete(key);
    c.pending.set(key, since);
    if (c.pending.size > MAX_TRACKED_KEYS)
      c.pending.delete(c.pending.keys().next().value as string);
  };
  const putBack = (typeUrl: string, nonce: string): void => {
    const c = clocks(typeUrl);
    for (const [key, since] of c.inflight.get(nonce) ?? []) start(c, key, since);
    c.inflight.delete(nonce);
  };
  return {
    server: {
      sent: (typeUrl, info) => {
        metrics.discovery("response", peer, kindOf(typeUrl));
        const c = clocks(typeUrl);
        const carried: [string, number][] = [];
        if (info.keys === undefined) {
          for (const entry of c.pending) carried.push(entry);
          c.pending.clear();
        } else {
          for (const key of info.keys) {
            const since = c.pending.get(key);
            if (since === undefined) continue;
            carried.push([key, since]);
            c.pending.delete(key);
          }
        }
        c.inflight.set(info.nonce, carried);
      },
      acked: (typeUrl, _version, nonce) => {
        const kind = kindOf(typeUrl);
        metrics.discovery("ack", peer, kind);
        const c = clocks(typeUrl);
        const t = now();
        for (const [, since] of c.inflight.get(nonce) ?? []) metrics.syncLag(peer, kind, t - since);
        c.inflight.delete(nonce);
      },
      nacked: (typeUrl, _version, _error, nonce) => {
        metrics.discovery("nack", peer, kindOf(typeUrl));
        putBack(typeUrl, nonce);
      },
      stalled: (typeUrl, nonce) => putBack(typeUrl, nonce),
      resourceErrors: (typeUrl, errors) => {
        if (errors.length > 0) metrics.discovery("partial_ack", peer, kindOf(typeUrl));
      },
    },
    client: {
      accepted: (typeUrl) => metrics.discovery("accepted", peer, kindOf(typeUrl)),
      rejected: (typeUrl) => metrics.discovery("rejected", peer, kindOf(typeUrl)),
    },
    source: (source) => ({
      typeUrls: source.typeUrls,
      snapshot: (typeUrl, signal) => source.snapshot(typeUrl, signal),
      onChange: (listener, signal) =>
        source.onChange((typeUrl, key) => {
          if (key !== undefined) start(clocks(typeUrl), key, now());
          listener(typeUrl, key);
        }, signal),
    }),
  };
}

/** One server observer calling each of `observers` in order. */
export function combineServerObservers(...observers: ServerObserver[]): ServerObserver {
  return {
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
