/**
 * The observer of one session's discovery server and client in the sync
 * engine: the zone's status, the stream's metrics and lag clocks
 * (sync-observers.ts), the tracing spans, the catalog gate
 * (catalog-gate.ts), the refusals that end the session (kinds-exchange.ts),
 * and the log of what the peer rejects, called in that order.
 *
 * One object with its methods on its prototype, serving as the server's and
 * the client's observer both (their events have distinct names), rather
 * than a chain of observers wrapping observers: every idle zone's session
 * on the global holds it, and every ACK of every change goes through it.
 *
 * @module
 */
import type { ClientObserver, ResourceRejection, ServerObserver } from "../discovery/types.ts";
import type { Logger } from "../log.ts";
import type { Session } from "../mux/views.ts";
import type { CatalogGate } from "./catalog-gate.ts";
import { KIND_CATALOG_TYPE_URL } from "./kind-catalog.ts";
import { endOnCatalogRefusal, endOnUnknownType } from "./kinds-exchange.ts";
import type { StreamMetrics } from "./sync-observers.ts";

/** What a server observer is told of a response that left (`ServerObserver.sent`'s second argument). */
type SentResponse = Parameters<NonNullable<ServerObserver["sent"]>>[1];

/** What every session's observer of one engine shares (made once per engine). */
export interface StreamObserverContext {
  /** Where to log. */
  readonly logger: Logger;
  /** A type URL's kind, for log lines. */
  readonly kindOf: (typeUrl: string) => string;
  /** A resource too large to send (the engine logs these once per burst). */
  readonly oversized: (
    peer: string,
    kind: string,
    key: string,
    bytes: number,
    limit: number,
  ) => void;
  /** Every type this side serves, named when a peer requests another. */
  readonly served: readonly string[];
  /** Which side this is: the global names its peer by the zone, a zone names it "the global". */
  readonly role: "global" | "zone";
}

/** The parts of one session's observer; see the module comment. */
export interface StreamObserverInit {
  /** The engine's shared part. */
  readonly context: StreamObserverContext;
  /** The session. */
  readonly session: Session;
  /** The zone of the session. */
  readonly zone: string;
  /** The zone status record's server observer for this session. */
  readonly status: ServerObserver;
  /** The zone status record's client observer for this session. */
  readonly statusClient: ClientObserver;
  /** The stream's metrics; undefined without metrics. */
  readonly metrics?: StreamMetrics;
  /** The serving spans' observer; undefined without tracing. */
  readonly serving?: ServerObserver;
  /** The catalog gate (the global's sessions); told of every ACK until it settles. */
  readonly gate?: CatalogGate;
}

/** See the module comment. Make it with {@link streamObserver}. */
export class StreamObserver implements ServerObserver, ClientObserver {
  readonly #context: StreamObserverContext;
  readonly #session: Session;
  readonly #zone: string;
  readonly #status: ServerObserver;
  readonly #statusClient: ClientObserver;
  readonly #metrics: StreamMetrics | undefined;
  /** Protected: the traced subclass passes `caughtUp` on to it. */
  protected readonly serving: ServerObserver | undefined;
  /** Dropped once settled: from then on ACKs pass by it, and it can be collected. */
  #gate: CatalogGate | undefined;
  /** Per type, the resources the peer rejects, by key (made at the first rejection: nearly every session never has one). */
  #reported: Map<string, Map<string, string>> | undefined;
  /** Per type, how many more rejected resources the peer left unnamed (made with `#reported`). */
  #omittedBefore: Map<string, number> | undefined;

  /** @param init - see {@link StreamObserverInit} */
  constructor(init: StreamObserverInit) {
    this.#context = init.context;
    this.#session = init.session;
    this.#zone = init.zone;
    this.#status = init.status;
    this.#statusClient = init.statusClient;
    this.#metrics = init.metrics;
    this.serving = init.serving;
    this.#gate = init.gate;
  }

  /** A response left. */
  sent(typeUrl: string, info: SentResponse): void {
    this.#status.sent?.(typeUrl, info);
    this.#metrics?.sent(typeUrl, info);
    this.serving?.sent?.(typeUrl, info);
  }

  /** The peer ACKed; the catalog's ACK settles the gate. */
  acked(typeUrl: string, version: string, nonce: string): void {
    this.#status.acked?.(typeUrl, version, nonce);
    this.#metrics?.acked(typeUrl, version, nonce);
    this.serving?.acked?.(typeUrl, version, nonce);
    const gate = this.#gate;
    if (gate === undefined) return;
    gate.acked(typeUrl);
    if (gate.done) this.#gate = undefined;
  }

  /** The peer NACKed; a NACK of the catalog ends the session. */
  nacked(typeUrl: string, version: string, error: string, nonce: string): void {
    this.#status.nacked?.(typeUrl, version, error, nonce);
    this.#metrics?.nacked(typeUrl, version, error, nonce);
    this.serving?.nacked?.(typeUrl, version, error, nonce);
    if (typeUrl === KIND_CATALOG_TYPE_URL)
      endOnCatalogRefusal(this.#session, this.#zone, this.#context.logger, error);
  }

  /** A response's ACK timed out. */
  stalled(typeUrl: string, nonce: string, waitedMs: number): void {
    this.#status.stalled?.(typeUrl, nonce, waitedMs);
    this.#metrics?.stalled(typeUrl, nonce);
    this.serving?.stalled?.(typeUrl, nonce, waitedMs);
  }

  /** A resource too large to send: the engine logs it. */
  oversized(typeUrl: string, key: string, bytes: number, limit: number): void {
    this.#status.oversized?.(typeUrl, key, bytes, limit);
    this.serving?.oversized?.(typeUrl, key, bytes, limit);
    const context = this.#context;
    context.oversized(this.#peer(), context.kindOf(typeUrl), key, bytes, limit);
  }

  /** The resources the peer rejects, with an ACK: each it starts or stops rejecting is logged. */
  resourceErrors(typeUrl: string, errors: readonly ResourceRejection[], omitted: number): void {
    this.#status.resourceErrors?.(typeUrl, errors, omitted);
    this.#metrics?.resourceErrors(typeUrl, errors);
    this.serving?.resourceErrors?.(typeUrl, errors, omitted);
    this.#logResourceErrors(typeUrl, errors, omitted);
  }

  /** The peer requested a type this side does not serve: the session ends. */
  unknownType(typeUrl: string): void {
    this.#status.unknownType?.(typeUrl);
    this.serving?.unknownType?.(typeUrl);
    const context = this.#context;
    endOnUnknownType(this.#session, this.#zone, context.logger, context.served, typeUrl);
  }

  /** The peer's response was applied. */
  accepted(typeUrl: string, info: { version: string; resources: number; removed: number }): void {
    this.#statusClient.accepted?.(typeUrl, info);
    this.#metrics?.accepted(typeUrl);
  }

  /** The peer's response was rejected. */
  rejected(typeUrl: string, version: string, error: string): void {
    this.#statusClient.rejected?.(typeUrl, version, error);
    this.#metrics?.rejected(typeUrl);
  }

  /** A resource of the peer's accepted response was left out: logged. */
  resourceRejected(typeUrl: string, key: string, reason: string): void {
    this.#statusClient.resourceRejected?.(typeUrl, key, reason);
    this.#context.logger.warn(`a resource from ${this.#peer()} was left out: ${key}: ${reason}`, {
      zone: this.#zone,
      typeUrl,
      key,
    });
  }

  /** How the peer is named in log lines: made when a line needs it, not held by every session. */
  #peer(): string {
    return this.#context.role === "global" ? `zone "${this.#zone}"` : "the global";
  }

  /** Logs each resource the peer starts rejecting (with its reason) and each it stops rejecting. */
  #logResourceErrors(typeUrl: string, errors: readonly ResourceRejection[], omitted: number): void {
    // Nearly every ACK: nothing rejected now, nothing before. Nothing to log, nothing to keep.
    if (
      errors.length === 0 &&
      omitted === 0 &&
      this.#reported?.has(typeUrl) !== true &&
      this.#omittedBefore?.has(typeUrl) !== true
    )
      return;
    this.#reported ??= new Map();
    this.#omittedBefore ??= new Map();
    const reported = this.#reported;
    const omittedBefore = this.#omittedBefore;
    const { logger, kindOf } = this.#context;
    const zone = this.#zone;
    const peer = this.#peer();
    const before = reported.get(typeUrl) ?? new Map<string, string>();
    const now = new Map(errors.map((e) => [e.key, e.reason]));
    const kind = kindOf(typeUrl);
    for (const [key, reason] of now) {
      if (before.get(key) !== reason)
        logger.warn(`${peer} rejected ${kind} "${key}" and applied the rest: ${reason}`, {
          zone,
          typeUrl,
          key,
        });
    }
    for (const key of before.keys())
      if (!now.has(key))
        logger.info(`${peer} no longer rejects ${kind} "${key}"`, { zone, typeUrl, key });
    if (omitted > 0 && omittedBefore.get(typeUrl) !== omitted)
      logger.warn(`${peer} rejects ${omitted} more ${kind} resources than it named`, {
        zone,
        typeUrl,
      });
    if (omitted > 0) omittedBefore.set(typeUrl, omitted);
    else omittedBefore.delete(typeUrl);
    if (now.size > 0) reported.set(typeUrl, now);
    else reported.delete(typeUrl);
  }
}

/**
 * {@link StreamObserver} with `caughtUp`, for the spans: a subclass, so that
 * without tracing the server finds no `caughtUp` to call after nearly every
 * response.
 */
class TracedStreamObserver extends StreamObserver {
  /** The server has sent everything of `typeUrl` it was told changed. */
  caughtUp(typeUrl: string): void {
    this.serving?.caughtUp?.(typeUrl);
  }
}

/** The observer of one session (see the module comment). */
export function streamObserver(init: StreamObserverInit): StreamObserver {
  return init.serving?.caughtUp === undefined
    ? new StreamObserver(init)
    : new TracedStreamObserver(init);
}
