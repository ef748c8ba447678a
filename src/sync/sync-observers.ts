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
  /** The kind's metrics label (looked up once per type and stream, not per event). */
  readonly kind: string;
  /** Key -> when its first unsent change was reported. */
  readonly pending: Map<string, number>;
  /**
   * The responses in flight that carried running clocks, oldest first: a
   * list, not a map by nonce, as a stream has a few responses of a type in
   * flight at most, and a map written and emptied with every change of every
   * zone reallocated its table with each (a response's clocks live until its
   * ACK, long enough to be promoted to the old generation, then die there).
   */
  readonly inflight: InFlightClocks[];
}

/** The clocks one response carried: its nonce, and `[key, since, key, since, ...]`. */
interface InFlightClocks {
  readonly nonce: string;
  readonly carried: Array<string | number>;
}

/**
 * Most responses per type whose clocks are kept: beyond it the oldest are
 * dropped (a response neither ACKed, NACKed nor reported stalled, as a
 * response in flight when its stream started over is, would otherwise stay).
 */
const MAX_TRACKED_RESPONSES = 64;

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
      c = { kind: kindOf(typeUrl), pending: new Map(), inflight: [] };
      types.set(typeUrl, c);
    }
    return c;
  };
  const start = (c: TypeClocks, key: string, since: number): void => {
    const pending = c.pending;
    const earlier = pending.get(key);
    if (earlier !== undefined) {
      if (earlier <= since) return;
      pending.delete(key);
    }
    pending.set(key, since);
    if (pending.size > MAX_TRACKED_KEYS) pending.delete(pending.keys().next().value as string);
  };
  /** Takes the clocks of the response sent with `nonce` out of flight (undefined: it carried none). */
  const takeInFlight = (c: TypeClocks, nonce: string): InFlightClocks | undefined => {
    const inflight = c.inflight;
    for (let i = 0; i < inflight.length; i++) {
      const entry = inflight[i] as InFlightClocks;
      if (entry.nonce !== nonce) continue;
      for (let j = i + 1; j < inflight.length; j++) inflight[j - 1] = inflight[j] as InFlightClocks;
      inflight.length--;
      return entry;
    }
    return undefined;
  };
  const putBack = (typeUrl: string, nonce: string): void => {
    const c = clocks(typeUrl);
    const entry = takeInFlight(c, nonce);
    if (entry === undefined) return;
    const carried = entry.carried;
    for (let i = 0; i < carried.length; i += 2)
      start(c, carried[i] as string, carried[i + 1] as number);
  };
  return {
    server: {
      sent: (typeUrl, info) => {
        const c = clocks(typeUrl);
        metrics.discovery("response", peer, c.kind);
        const pending = c.pending;
        // Nothing pending (a response after a NACK, or one carrying what changed before the stream began): no clocks to carry.
        if (pending.size === 0) return;
        const carried: Array<string | number> = [];
        const keys = info.keys;
        if (keys === undefined) {
          for (const [key, since] of pending) carried.push(key, since);
          pending.clear();
        } else {
          for (const key of keys) {
            const since = pending.get(key);
            if (since === undefined) continue;
            carried.push(key, since);
            pending.delete(key);
          }
        }
        if (carried.length === 0) return;
        const inflight = c.inflight;
        if (inflight.length >= MAX_TRACKED_RESPONSES) inflight.shift();
        inflight.push({ nonce: info.nonce, carried });
      },
      acked: (typeUrl, _version, nonce) => {
        const c = clocks(typeUrl);
        const kind = c.kind;
        metrics.discovery("ack", peer, kind);
        const entry = takeInFlight(c, nonce);
        if (entry === undefined) return;
        const t = now();
        const carried = entry.carried;
        for (let i = 1; i < carried.length; i += 2)
          metrics.syncLag(peer, kind, t - (carried[i] as number));
      },
      nacked: (typeUrl, _version, _error, nonce) => {
        metrics.discovery("nack", peer, clocks(typeUrl).kind);
        putBack(typeUrl, nonce);
      },
      stalled: (typeUrl, nonce) => putBack(typeUrl, nonce),
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
