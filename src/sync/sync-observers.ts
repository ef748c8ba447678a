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
import type {
  ClientObserver,
  ResourceRejection,
  ServerObserver,
  Snapshot,
  SnapshotSource,
} from "../discovery/types.ts";
import type { Metrics } from "../metrics.ts";
import { type LagReport, TypeLagClocks } from "./lag-clocks.ts";

/** The observers of one stream, ready to hand to a discovery server and client. */
export interface StreamObservers {
  /** For the stream's discovery server (this side's responses). */
  readonly server: ServerObserver;
  /** For the stream's discovery client (the peer's responses). */
  readonly client: ClientObserver;
  /** Wraps the server's source so the lag clock starts at each change it reports. */
  source(source: SnapshotSource): SnapshotSource;
}

/** `performance.now`, as one function for every stream (a default argument would make one per call). */
const performanceNow = (): number => performance.now();

/**
 * Observers for one stream with `peer`, reporting to `metrics`. `kindOf`
 * names a type URL's kind (the label metrics use).
 */
export function streamObservers(
  metrics: Metrics,
  peer: string,
  kindOf: (typeUrl: string) => string,
  now: () => number = performanceNow,
): StreamObservers {
  return new StreamMetrics(metrics, peer, kindOf, now);
}

/**
 * The observers of {@link streamObservers} as one object, its server and
 * client observer both: the methods sit on its prototype, not in closures,
 * since every idle zone's stream on the global holds one. The engine calls
 * it directly (sync/stream-observer.ts).
 */
export class StreamMetrics implements StreamObservers, ServerObserver, ClientObserver, LagReport {
  readonly #metrics: Metrics;
  readonly #peer: string;
  readonly #kindOf: (typeUrl: string) => string;
  readonly #now: () => number;
  /** Each type's clocks (with its kind), made at the type's first event. */
  readonly #types = new Map<string, TypeLagClocks>();

  /**
   * @param metrics - where the events and lags go
   * @param peer - the peer's metrics label
   * @param kindOf - a type URL's kind (asked once per type)
   * @param now - the lag clocks' time, in milliseconds
   */
  constructor(
    metrics: Metrics,
    peer: string,
    kindOf: (typeUrl: string) => string,
    now: () => number = performanceNow,
  ) {
    this.#metrics = metrics;
    this.#peer = peer;
    this.#kindOf = kindOf;
    this.#now = now;
  }

  /** This object, as the stream's server observer. */
  get server(): ServerObserver {
    return this;
  }

  /** This object, as the stream's client observer. */
  get client(): ClientObserver {
    return this;
  }

  /** `source`, starting the lag clock at each change it reports. */
  source(source: SnapshotSource): SnapshotSource {
    return source.snapshotNow === undefined
      ? new ObservedSource(source, this)
      : new ObservedSourceNow(source, this);
  }

  /** The clocks of `typeUrl` (made at its first event). */
  #clocks(typeUrl: string): TypeLagClocks {
    let c = this.#types.get(typeUrl);
    if (c === undefined) {
      c = new TypeLagClocks(this.#kindOf(typeUrl));
      this.#types.set(typeUrl, c);
    }
    return c;
  }

  /** The source reported a change of `key` of `typeUrl`: its clock starts unless it runs. */
  changed(typeUrl: string, key: string): void {
    this.#clocks(typeUrl).start(key, this.#now());
  }

  /** A response left: counted, and it takes the running clocks of what it carried in flight. */
  sent(typeUrl: string, info: { readonly nonce: string; readonly keys?: readonly string[] }): void {
    const c = this.#clocks(typeUrl);
    this.#metrics.discovery("response", this.#peer, c.kind);
    // Nothing running (a response after a NACK, or one carrying what changed before the stream began): no keys to look at.
    if (c.running) c.send(info.nonce, info.keys);
  }

  /** An ACK: counted, and the clocks its response carried stop. */
  acked(typeUrl: string, _version: string, nonce: string): void {
    const c = this.#clocks(typeUrl);
    this.#metrics.discovery("ack", this.#peer, c.kind);
    c.stop(nonce, this.#now, this);
  }

  /** A NACK: counted, and the clocks its response carried run again. */
  nacked(typeUrl: string, _version: string, _error: string, nonce: string): void {
    const c = this.#clocks(typeUrl);
    this.#metrics.discovery("nack", this.#peer, c.kind);
    c.putBack(nonce);
  }

  /** A response's ACK timed out: the clocks it carried run again. */
  stalled(typeUrl: string, nonce: string): void {
    this.#clocks(typeUrl).putBack(nonce);
  }

  /** An ACK that names rejected resources counts as a partial ACK. */
  resourceErrors(typeUrl: string, errors: readonly ResourceRejection[]): void {
    if (errors.length > 0)
      this.#metrics.discovery("partial_ack", this.#peer, this.#clocks(typeUrl).kind);
  }

  /** The peer's response was applied. */
  accepted(typeUrl: string): void {
    this.#metrics.discovery("accepted", this.#peer, this.#clocks(typeUrl).kind);
  }

  /** The peer's response was rejected. */
  rejected(typeUrl: string): void {
    this.#metrics.discovery("rejected", this.#peer, this.#clocks(typeUrl).kind);
  }

  /** A lag clock stopped (from {@link TypeLagClocks.stop}). */
  lag(kind: string, ms: number): void {
    this.#metrics.syncLag(this.#peer, kind, ms);
  }
}

/** A source whose changes start {@link StreamMetrics}' lag clocks (for a source without `snapshotNow`). */
class ObservedSource implements SnapshotSource {
  protected readonly inner: SnapshotSource;
  readonly #observed: StreamMetrics;

  /**
   * @param inner - the source observed
   * @param observed - whose clocks its changes start
   */
  constructor(inner: SnapshotSource, observed: StreamMetrics) {
    this.inner = inner;
    this.#observed = observed;
  }

  /** The inner source's types. */
  get typeUrls(): readonly string[] {
    return this.inner.typeUrls;
  }

  /** The inner source's set of `typeUrl`. */
  snapshot(typeUrl: string, signal: AbortSignal): Promise<Snapshot | undefined> {
    return this.inner.snapshot(typeUrl, signal);
  }

  /** Calls `listener` on the inner source's changes, each keyed one starting its lag clock first. */
  onChange(listener: (typeUrl: string, key?: string) => void, signal: AbortSignal): void {
    const observed = this.#observed;
    this.inner.onChange((typeUrl, key) => {
      if (key !== undefined) observed.changed(typeUrl, key);
      listener(typeUrl, key);
    }, signal);
  }
}

/** {@link ObservedSource} of a source with `snapshotNow`: a separate class, so only such a source's wrapper offers it. */
class ObservedSourceNow extends ObservedSource {
  /** The inner source's set of `typeUrl`, at once. */
  snapshotNow(typeUrl: string): Snapshot | undefined {
    return this.inner.snapshotNow?.(typeUrl);
  }
}

/** One server observer calling each of `observers` in order (the one itself when it is alone). */
export function combineServerObservers(...observers: ServerObserver[]): ServerObserver {
  // Nothing to combine: calling it directly saves a loop per event, and the closures below.
  if (observers.length === 1) return observers[0] as ServerObserver;
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

/** One client observer calling each of `observers` in order (the one itself when it is alone). */
export function combineClientObservers(...observers: ClientObserver[]): ClientObserver {
  // As combineServerObservers.
  if (observers.length === 1) return observers[0] as ClientObserver;
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
