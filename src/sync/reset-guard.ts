/**
 * The reset guard: when a peer's first exchange of a kind after it
 * (re)connects would delete most of what this side holds of it for that
 * peer (a zone restarted on an empty store, a global whose data was lost),
 * those deletions are held: the copies stay (and are still served onwards),
 * the hold is reported (log, status, metrics), and the deletions are applied
 * only when an operator accepts them ({@link ResetGuard.accept}) or, when
 * configured, after `holdForMs`. Deletions below the threshold, and every
 * write, flow as usual.
 *
 * One guard watches one session: the first response of each kind decides
 * (a kind is "armed" until then). While a kind's reset is held, every
 * deletion of that kind in the session is held with it (a reset split over
 * several responses stays one reset); a held resource the peer sends again
 * leaves the hold. A hold ends with its session: the next session's first
 * exchange decides again (the peer still lacks what it lacked, so it asks
 * for the same deletions).
 *
 * @module
 */
import type { Any } from "@bufbuild/protobuf/wkt";
import type { ReceivedResource, ResourceSink, SinkResult } from "../discovery/types.ts";
import { KdsError } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import type { HeldKind, HeldReset } from "../observe/zone-status.ts";
import type { Clock } from "../util/clock.ts";
import { definedOnly } from "../util/defined.ts";

/** Options of the reset guard. */
export interface ResetGuardOptions {
  /** Hold when a first exchange would delete MORE than this share of a kind's resources held for the peer. Default 0.5. */
  readonly threshold?: number;
  /** ... and at least this many of them. Default 10. */
  readonly minimum?: number;
  /** Apply held deletions by themselves after this many ms. Default: never (only when accepted). */
  readonly holdForMs?: number;
}

/** {@link ResetGuardOptions} with defaults. */
export interface ResolvedResetGuardOptions {
  /** See {@link ResetGuardOptions.threshold}. */
  readonly threshold: number;
  /** See {@link ResetGuardOptions.minimum}. */
  readonly minimum: number;
  /** See {@link ResetGuardOptions.holdForMs}; undefined: never. */
  readonly holdForMs: number | undefined;
}

/** The defaults of {@link ResetGuardOptions}. */
export const DEFAULT_RESET_GUARD: ResolvedResetGuardOptions = Object.freeze({
  threshold: 0.5,
  minimum: 10,
  holdForMs: undefined,
});

/** Checks and completes `options`; throws `invalid_argument` naming the bad option. */
export function resolveResetGuard(options: ResetGuardOptions = {}): ResolvedResetGuardOptions {
  const r = { ...DEFAULT_RESET_GUARD, ...definedOnly(options) };
  if (!(r.threshold >= 0 && r.threshold < 1))
    throw new KdsError(
      "invalid_argument",
      `resetGuard.threshold must be a share from 0 up to (not including) 1, got ${String(options.threshold)}`,
    );
  if (!Number.isInteger(r.minimum) || r.minimum < 1)
    throw new KdsError(
      "invalid_argument",
      `resetGuard.minimum must be a positive integer, got ${String(options.minimum)}`,
    );
  if (r.holdForMs !== undefined && !(r.holdForMs > 0))
    throw new KdsError(
      "invalid_argument",
      `resetGuard.holdForMs must be a positive number of milliseconds (leave it out to hold until accepted), got ${String(options.holdForMs)}`,
    );
  return r;
}

/** Whether deleting `deleting` of `total` resources is a reset to hold under `options`. */
export function isReset(
  deleting: number,
  total: number,
  options: Pick<ResolvedResetGuardOptions, "threshold" | "minimum">,
): boolean {
  return deleting >= options.minimum && deleting > options.threshold * total;
}

/**
 * What a store sink asks before it deletes: which of the deletions a response
 * asks for it must keep. Implemented by {@link ResetGuard}.
 */
export interface DeletionGate {
  /** At subscription: how many resources of `typeUrl` the sink holds for the peer. */
  resumed(typeUrl: string, held: number): void;
  /**
   * A response of `typeUrl` asks to delete the local copies of `keys`
   * (`held`: how many the sink holds of the type, when it knows); returns
   * those to keep. `written`: the keys the same response writes.
   */
  keep(
    typeUrl: string,
    keys: readonly string[],
    held: number | undefined,
    written: readonly string[],
  ): ReadonlySet<string>;
}

/** One kind's state in one session: a tagged union, changed only by {@link nextKindState}. */
export type KindGuardState =
  /** Before the first response of the kind: it decides. `total`: what the sink held at subscription (delta), if told. */
  | { readonly phase: "armed"; readonly total: number | undefined }
  /** Deletions flow. */
  | { readonly phase: "open" }
  /** A reset is held: `keys` are kept; `of` is what the sink held when it was held. */
  | { readonly phase: "holding"; readonly of: number; readonly keys: ReadonlySet<string> };

/** What happens to a kind's guard. */
export type KindGuardEvent =
  /** The sink told what it holds at subscription. */
  | { readonly type: "resumed"; readonly total: number }
  /** A response asks to delete `keys` and writes `written`; `total` when the sink knows it. */
  | {
      readonly type: "response";
      readonly keys: readonly string[];
      readonly written: readonly string[];
      readonly total: number | undefined;
    }
  /** The held deletions were accepted (or their time passed). */
  | { readonly type: "released" };

/** The one transition function of a kind's guard. */
export function nextKindState(
  state: KindGuardState,
  event: KindGuardEvent,
  options: Pick<ResolvedResetGuardOptions, "threshold" | "minimum">,
): KindGuardState {
  switch (event.type) {
    case "resumed":
      return state.phase === "armed" ? { phase: "armed", total: event.total } : state;
    case "released":
      return { phase: "open" };
    case "response": {
      if (state.phase === "open") return state;
      if (state.phase === "armed") {
        const total = event.total ?? state.total;
        if (total === undefined || !isReset(event.keys.length, total, options))
          return { phase: "open" };
        return { phase: "holding", of: total, keys: new Set(event.keys) };
      }
      const keys = new Set(state.keys);
      for (const k of event.written) keys.delete(k);
      for (const k of event.keys) keys.add(k);
      return keys.size === 0 ? { phase: "open" } : { phase: "holding", of: state.of, keys };
    }
  }
}

/** How a {@link ResetGuard} is created. */
export interface ResetGuardInit {
  /** Thresholds and delay. */
  readonly options: ResolvedResetGuardOptions;
  /** Whose deletions: `zone "a"` or `the global`, for messages. */
  readonly peer: string;
  /** The zone the session belongs to (metrics label). */
  readonly zone: string;
  /** The kind of a type URL. */
  readonly kindOf: (typeUrl: string) => string;
  /** How an operator accepts, for the log line (an API or a command). */
  readonly acceptHint: string;
  /** Timers of `holdForMs`. */
  readonly clock: Clock;
  /** Wall clock in ms. Default `Date.now`. */
  readonly now?: () => number;
  /** Where holds are logged. */
  readonly logger: Logger;
  /** Where held deletions are counted (a gauge per zone and kind). */
  readonly metrics?: Metrics;
  /** The session's signal: a release by `holdForMs` stops with it. */
  readonly signal: AbortSignal;
}

/** `work()`, a throw turned into a rejection. */
function startNow<T>(work: () => Promise<T>): Promise<T> {
  try {
    return work();
  } catch (error) {
    return Promise.reject(error);
  }
}

/** No state yet: what {@link ResetGuard} reads before its first step. */
const NO_STATES: ReadonlyMap<string, KindGuardState> = new Map();

/** What {@link ResetGuard.keep} returns when nothing is held (one set for every call: a caller only reads it). */
const KEEP_NONE: ReadonlySet<string> = new Set();

/** The reset guard of one session (see the module comment). */
export class ResetGuard implements DeletionGate {
  readonly #init: ResetGuardInit;
  /** Per type, its state once it left `armed`: made at the first step (most sessions hold nothing, and an idle one takes no step). */
  #states: Map<string, KindGuardState> | undefined;
  #sink: ResourceSink | undefined;
  /** Sink calls and releases, one at a time; undefined while none is queued (not a settled promise kept per session). */
  #queue: Promise<unknown> | undefined;
  /** Calls in the queue (waiting or running). */
  #running = 0;
  #since: number | undefined;
  #cancelTimer: (() => void) | undefined;
  #closed = false;

  /** @param init - options, names, clock */
  constructor(init: ResetGuardInit) {
    this.#init = init;
  }

  /** `sink` with every call serialized with releases; the sink must take this guard as its gate (`StoreSinkOptions.gate`). */
  wrap(sink: ResourceSink): ResourceSink {
    this.#sink = sink;
    return new ResetGuard.#Serialized(this, sink);
  }

  /**
   * The sink {@link ResetGuard.wrap} returns: a class with its methods on its
   * prototype, not an object of closures, since every zone's session holds
   * one. Declared in here to reach the guard's `#serial`.
   */
  static readonly #Serialized = class implements ResourceSink {
    readonly #guard: ResetGuard;
    readonly #sink: ResourceSink;

    constructor(guard: ResetGuard, sink: ResourceSink) {
      this.#guard = guard;
      this.#sink = sink;
    }

    versions(typeUrl: string, signal: AbortSignal): Promise<Map<string, string>> {
      return this.#sink.versions(typeUrl, signal);
    }

    replace(typeUrl: string, resources: readonly Any[], signal: AbortSignal): Promise<SinkResult> {
      const sink = this.#sink;
      return this.#guard.#serial(() => sink.replace(typeUrl, resources, signal));
    }

    apply(
      typeUrl: string,
      resources: readonly ReceivedResource[],
      removed: readonly string[],
      signal: AbortSignal,
    ): Promise<SinkResult> {
      const sink = this.#sink;
      return this.#guard.#serial(() => sink.apply(typeUrl, resources, removed, signal));
    }
  };

  resumed(typeUrl: string, held: number): void {
    this.#step(typeUrl, { type: "resumed", total: held });
  }

  keep(
    typeUrl: string,
    keys: readonly string[],
    held: number | undefined,
    written: readonly string[],
  ): ReadonlySet<string> {
    const before = this.#state(typeUrl);
    const after = this.#step(typeUrl, { type: "response", keys, written, total: held });
    if (after.phase !== "holding") return KEEP_NONE;
    if (before.phase === "armed") this.#held(typeUrl, after);
    if (before.phase !== "holding" || before.keys.size !== after.keys.size) this.#report(typeUrl);
    return after.keys;
  }

  /** The held reset, or undefined when nothing is held. */
  snapshot(): HeldReset | undefined {
    const kinds: HeldKind[] = [];
    for (const [typeUrl, s] of this.#states ?? NO_STATES)
      if (s.phase === "holding")
        kinds.push({ kind: this.#init.kindOf(typeUrl), held: s.keys.size, of: s.of });
    if (kinds.length === 0 || this.#since === undefined) return undefined;
    const hold = this.#init.options.holdForMs;
    return {
      since: new Date(this.#since),
      releaseAt: hold === undefined ? undefined : new Date(this.#since + hold),
      kinds,
    };
  }

  /**
   * Applies every held deletion now (an operator accepted the reset);
   * resolves with how many were deleted (0 when nothing was held).
   */
  accept(signal: AbortSignal): Promise<number> {
    return this.#serial(async () => {
      const sink = this.#sink;
      let deleted = 0;
      for (const [typeUrl, s] of [...(this.#states ?? NO_STATES)]) {
        if (s.phase !== "holding") continue;
        this.#step(typeUrl, { type: "released" });
        try {
          if (sink !== undefined) await sink.apply(typeUrl, [], [...s.keys], signal);
        } catch (error) {
          // Nothing was deleted (the sink writes a call atomically): the kind stays held.
          if (!this.#closed) this.#statesMade().set(typeUrl, s);
          throw error;
        }
        deleted += s.keys.size;
        this.#report(typeUrl);
      }
      this.#cancelTimer?.();
      this.#cancelTimer = undefined;
      this.#since = undefined;
      if (deleted > 0)
        this.#init.logger.warn(
          `applied the ${deleted} deletions held for ${this.#init.peer}; the deleted resources leave this side and the zones it serves`,
          { zone: this.#init.zone, deleted },
        );
      return deleted;
    });
  }

  /** The session ended: the hold ends with it (the next session decides again); its gauges drop to 0. */
  close(): void {
    this.#closed = true;
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    const held = [...(this.#states ?? NO_STATES)].filter(([, s]) => s.phase === "holding");
    this.#states = undefined;
    for (const [typeUrl] of held) this.#report(typeUrl);
  }

  #state(typeUrl: string): KindGuardState {
    return this.#states?.get(typeUrl) ?? { phase: "armed", total: undefined };
  }

  /** `#states`, made if it was not yet (for a state to go in). */
  #statesMade(): Map<string, KindGuardState> {
    this.#states ??= new Map();
    return this.#states;
  }

  #step(typeUrl: string, event: KindGuardEvent): KindGuardState {
    const next = nextKindState(this.#state(typeUrl), event, this.#init.options);
    if (!this.#closed) this.#statesMade().set(typeUrl, next);
    return next;
  }

  #held(typeUrl: string, s: Extract<KindGuardState, { phase: "holding" }>): void {
    const { logger, options, peer, zone, acceptHint } = this.#init;
    const now = (this.#init.now ?? Date.now)();
    if (this.#since === undefined) {
      this.#since = now;
      if (options.holdForMs !== undefined)
        this.#cancelTimer = this.#init.clock.setTimer(() => {
          this.#cancelTimer = undefined;
          logger.warn(`the deletions held for ${peer} are applied: their hold time passed`, {
            zone,
          });
          this.accept(this.#init.signal).catch((error: unknown) =>
            logger.error(
              `applying the deletions held for ${peer} failed; they stay held (accept them again)`,
              { zone, error },
            ),
          );
        }, options.holdForMs);
    }
    const kind = this.#init.kindOf(typeUrl);
    const when =
      options.holdForMs === undefined
        ? `until an operator accepts the reset (${acceptHint})`
        : `until an operator accepts the reset (${acceptHint}) or for ${Math.round(options.holdForMs / 1000)} s`;
    logger.error(
      `RESET HELD: ${peer}'s first exchange after connecting would delete ${s.keys.size} of the ${s.of} ${kind} resources held for it here; those deletions are held and the old copies are still served, ${when}`,
      { zone, kind, held: s.keys.size, of: s.of },
    );
  }

  #report(typeUrl: string): void {
    const s = this.#states?.get(typeUrl);
    this.#init.metrics?.heldDeletions(
      this.#init.zone,
      this.#init.kindOf(typeUrl),
      s?.phase === "holding" ? s.keys.size : 0,
    );
  }

  #serial<T>(work: () => Promise<T>): Promise<T> {
    // Nothing queued or running (nearly every response): start now, not a promise turn later behind a settled queue.
    // (The queue is undefined exactly while no call is in it.)
    const queue = this.#queue;
    const run = queue === undefined ? startNow(work) : queue.then(work, work);
    this.#running++;
    // The queue only orders the calls: each caller gets (and handles) its own outcome.
    this.#queue = run.then(this.#settled, this.#settled);
    return run;
  }

  /** Counts a call of {@link ResetGuard.#serial} out. */
  readonly #settled = (): void => {
    // The last call out: drop the settled queue (the next call starts at once, without it).
    if (--this.#running === 0) this.#queue = undefined;
  };
}
