/**
 * The discovery server of one stream: answers a client's SotW and delta
 * subscriptions from a {@link SnapshotSource}, one event loop per stream.
 *
 * Rules it keeps (xDS v3): nonces per stream and type; an ACK or NACK whose
 * nonce is not one in flight is stale and ignored; a bounded number of
 * responses per type in flight (one for SotW, `maxDeltaInFlight` for delta);
 * an unchanged set is never resent; delta sends only changed resources and
 * `removed_resources`, starts from the client's `initial_resource_versions`,
 * and splits a large change into responses of about `deltaResponseBytes`
 * (never over `maxMessageBytes`, nor over `maxResponseResources` resources
 * plus removals), each going on where the last stopped; a SotW set over
 * either bound is reported as oversized (`*`) and not sent;
 * after a NACK the server waits (exponential backoff) before it sends that
 * type again; a response not ACKed in time is reported stalled, once, and
 * still waited for (never resent: the session loses no frame).
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { KdsError } from "../errors.ts";
import {
  DiscoveryResponseSchema,
  type DeltaDiscoveryRequest,
  type DeltaDiscoveryResponse,
  type DiscoveryRequest,
} from "../gen/kds/v1/discovery_pb.ts";
import type { Status } from "../gen/kds/v1/discovery_pb.ts";
import type { MuxRequest, MuxResponse } from "../mux/frames.ts";
import { utf8Length } from "../mux/frame-size.ts";
import type { ServerStreamView, ViewReceiver } from "../mux/views.ts";
import {
  ENTRY_OVERHEAD,
  giveBack,
  NO_SWEEP,
  nextPart,
  takeWork,
  type DeltaDiffState,
  type DiffOrder,
} from "./delta-diff.ts";
import { resourceErrorsOf } from "./resource-errors.ts";
import {
  IDLE,
  canSend,
  inFlightWith,
  nextPhase,
  type InFlight,
  type TypePhase,
} from "./server-state.ts";
import {
  assertMaxResponseResources,
  defaultDiscoveryOptions,
  type DiscoveryOptions,
  type ServerObserver,
  type Snapshot,
  type SnapshotSource,
  type WireResource,
} from "./types.ts";
import { backoffCeiling } from "../util/backoff.ts";
import { definedOnly } from "../util/defined.ts";
import { systemClock, type Clock } from "../util/clock.ts";
import { deferred, type Deferred } from "../util/deferred.ts";
import { Turns } from "../util/wake.ts";

/**
 * Bytes one string field of a response takes at most when it holds `text`:
 * its tag (1 byte), its length (a varint of up to 5 bytes) and its UTF-8 bytes.
 */
function stringFieldBytes(text: string): number {
  return 1 + 5 + utf8Length(text);
}

/**
 * Bytes kept free in a response of `typeUrl` at `version` for its envelope:
 * the type URL, version and nonce fields (the nonce at its longest, a
 * counter of up to 16 digits) as they encode, plus a 64-byte margin. Measured,
 * not a fixed reserve: a reserve larger than the envelope left a resource
 * that fits `maxMessageBytes` reported as oversized and never sent (with
 * small messages, the kind catalog itself, and nothing synced past it).
 */
function envelopeBytes(typeUrl: string, version: string): number {
  return stringFieldBytes(typeUrl) + stringFieldBytes(version) + NONCE_FIELD_BYTES + 64;
}

/** {@link stringFieldBytes} of the longest nonce, a counter of 16 digits. */
const NONCE_FIELD_BYTES = 1 + 5 + 16;

/**
 * The version `known` records for a key the client may or may not hold (it
 * was in a response in flight when the server started over). No resource has
 * it (store versions are never empty, and this one starts with a NUL), so the
 * diff sends the resource again, or its removal when it is gone.
 */
const IN_DOUBT = "\u0000in doubt";

/**
 * The state of one type on one stream, every field written out in one class
 * (the delta diff's among them): V8 keeps them all in the object. An object
 * literal with the diff's state spread into it kept those in a property
 * array besides, about 90 bytes more of every type of every stream.
 */
class TypeState implements DeltaDiffState {
  readonly typeUrl: string;
  readonly mode: "sotw" | "delta";
  phase: TypePhase = IDLE;
  /** The set may have changed since the last look. */
  dirty = true;
  /** Consecutive NACKs (drives the backoff). */
  nacks = 0;
  /** The nonce of the response in flight already reported stalled (it is waited for, not reported again). */
  stalledNonce: string | undefined = undefined;
  /** SotW: version of the last set sent (ACKed or in flight). */
  lastSentVersion: string | undefined = undefined;
  /** Delta: the set version {@link envelopeBytes} was last worked out for, and its result (every zone's response to a change has the same). */
  envelopeVersion: string | undefined = undefined;
  envelopeBytes = 0;
  /** The types this one depends on (see {@link DiscoveryServerInit.dependsOn}). */
  readonly deps: readonly string[];
  // The delta diff's state (DeltaDiffState): a new type's first diff is full, and its maps and sets are made when
  // first needed (most stay empty).
  known: Map<string, string> | undefined = undefined;
  names: Set<string> | undefined = undefined;
  oversized: Map<string, string> | undefined = undefined;
  full = true;
  changed: Set<string> | undefined = undefined;
  sweep: ReadonlyArray<WireResource | string> = NO_SWEEP;
  sweepAt = 0;
  sweepVersion: string | undefined = undefined;
  taken: Set<string> | undefined = undefined;
  held: Set<string> | undefined = undefined;
  heldUpserts = false;
  heldRemovals = false;

  constructor(typeUrl: string, mode: "sotw" | "delta", deps: readonly string[]) {
    this.typeUrl = typeUrl;
    this.mode = mode;
    this.deps = deps;
  }

  /** `known`, made if it was not yet (for an entry to go in). */
  knownMade(): Map<string, string> {
    this.known ??= new Map();
    return this.known;
  }
}

/** How a {@link DiscoveryServer} is created. */
export interface DiscoveryServerInit {
  /** The stream view it serves on. */
  readonly view: ServerStreamView;
  /** Where the resources come from. */
  readonly source: SnapshotSource;
  /** Tunables. */
  readonly options?: DiscoveryOptions;
  /** Status callbacks. */
  readonly observer?: ServerObserver;
  /**
   * Time for the ACK timeout and the NACK backoff: its `now` and its timers.
   * Default {@link systemClock}; tests step a manual one.
   */
  readonly clock?: Clock;
  /**
   * Types the client fetches once (the kind catalog): a response of one of
   * them whose ACK is late is not sent again. Such a client has moved on by
   * then, and answers a second response with a NACK the server would take
   * for a refusal. Default: none.
   */
  readonly fetchedOnce?: readonly string[];
  /**
   * The types whose resources a type's refer to (the kinds' `dependsOn`).
   * Among the types the client subscribed to, a delta response carries a
   * type's resources only once no type it depends on has resources left to
   * send, and its removals only once no type depending on it has removals
   * left to send; a state-of-the-world set waits for the types it depends
   * on. Default: no order between types.
   */
  readonly dependsOn?: (typeUrl: string) => readonly string[];
}

/** Serves one client on one stream. */
export class DiscoveryServer {
  readonly #view: ServerStreamView;
  readonly #source: SnapshotSource;
  readonly #options: Required<DiscoveryOptions>;
  readonly #observer: ServerObserver;
  readonly #clock: Clock;
  /** Checked only when an ACK is late; a list (most often of one type) costs a stream less than a set. */
  readonly #fetchedOnce: readonly string[];
  /**
   * The types subscribed, in the order they were: a few, searched by type
   * URL (see {@link #find}). One array of exactly their number (it is
   * replaced, not pushed to), not a Map beside an array: about 200 bytes of
   * every stream less. The loops that look at every type on every wake-up
   * and ACK walk it and allocate nothing.
   */
  #typeList: readonly TypeState[] = NO_TYPES;
  /** The source's type URLs (a few): an array the source already holds, searched, rather than a Set per stream. */
  readonly #served: readonly string[];
  #nonce = 0;
  /**
   * A response was handed to the view and is not yet accepted (it waits for
   * the peer's window): at most one at a time. The loop reads requests
   * meanwhile, so a peer whose ACKs fill its request window while it has not
   * yet consumed the responses cannot stall both sides.
   */
  #sending = false;
  /** What the response being sent carried, for the observer once it is accepted. */
  #sent: SentInfo | undefined;
  /** A type has something to send and waits for `#sending` to clear: its acceptance must wake the loop. */
  #blocked = false;
  /** The request read off the view and not yet handled (see `#read`). */
  #incoming: MuxRequest | undefined;
  /**
   * The loop's turns. While it is parked (between two turns, nothing in
   * hand) a request that arrives is handled where it arrives (see `#received`).
   */
  readonly #turns = new Turns(() => this.#turn());
  /** How `run` ends; undefined before it runs and once it ended (nothing turns then). */
  #ended: Deferred<void> | undefined;
  /** The signal `run` was given, for the reads `#received` starts. */
  #signal: AbortSignal | undefined;
  /** Why the stream cannot go on: a read or a send failed. */
  #failure: { readonly error: unknown } | undefined;
  /** The timer that wakes the loop at a deadline: when it fires, and how to cancel it. */
  #timer: { readonly at: number; readonly cancel: () => void } | undefined;
  readonly #dependsOn: (typeUrl: string) => readonly string[];
  /** A subscribed type depends on another: the order between types is kept (see {@link DiscoveryServerInit.dependsOn}). */
  #ordered = false;
  /**
   * With an order between types, changes of the source are let in until the
   * event loop turns before anything is sent (see {@link #settle}): true
   * while that turn is awaited.
   */
  #settling = false;

  /** @param init - view, source, options */
  constructor(init: DiscoveryServerInit) {
    this.#view = init.view;
    this.#source = init.source;
    this.#options = { ...defaultDiscoveryOptions, ...definedOnly(init.options ?? {}) };
    assertMaxResponseResources(this.#options.maxResponseResources);
    this.#observer = init.observer ?? {};
    this.#clock = init.clock ?? systemClock;
    this.#fetchedOnce = init.fetchedOnce ?? [];
    this.#served = init.source.typeUrls;
    this.#dependsOn = init.dependsOn ?? noDependencies;
  }

  /**
   * Serves until `signal` aborts or the stream ends; resolves then. Rejects
   * only on an unexpected failure (a bug or a failing source).
   *
   * The loop runs in turns ({@link #turn}), each looking at everything: a
   * change of the source, a request (taken by `#read`), a send accepted or
   * failed, and the deadline timer all wake it (`#turns`). Between turns
   * it waits holding nothing, not on a promise: a stream waits so from one
   * change to the next, and a promise per wait lived that long in every
   * zone's stream, long enough to be promoted to the old generation. A
   * request that arrives while the loop waits is handled at once instead,
   * and wakes the loop only when it leaves something to send.
   */
  run(signal: AbortSignal): Promise<void> {
    try {
      return this.#start(signal);
    } catch (error) {
      return Promise.reject(error); // a source or view that throws at once: a rejection, as from any failure
    }
  }

  #start(signal: AbortSignal): Promise<void> {
    this.#signal = signal;
    this.#source.onChange((typeUrl, key) => {
      const state = this.#find(typeUrl);
      if (state === undefined) return;
      state.dirty = true;
      if (key === undefined) state.full = true;
      else if (!state.full) {
        state.changed ??= new Set();
        state.changed.add(key);
      }
      if (this.#ordered) this.#settle();
      else this.#turns.wake();
    }, signal);
    const ended = deferred<void>();
    this.#ended = ended;
    this.#read(signal);
    this.#turn();
    return ended.promise;
  }

  /**
   * One turn of the loop, and more while wakes come during it; then it
   * parks, or waits for what the pump asked for (and turns again after it).
   */
  readonly #turn = (): void => {
    if (this.#ended === undefined) return; // a turn queued before the end
    const signal = this.#signal as AbortSignal;
    try {
      for (;;) {
        this.#throwIfFailed();
        const request = this.#incoming;
        if (request !== undefined) {
          this.#incoming = undefined;
          this.#onRequest(request);
          this.#read(signal);
        }
        // Most turns (an ACK) leave nothing to send, and most sends need nothing awaited.
        if (!this.#settling && this.#due()) {
          const wait = this.#pumpNow(signal);
          if (wait !== undefined) {
            wait.then(this.#turn, this.#pumpFailed);
            return;
          }
        }
        this.#throwIfFailed();
        this.#armDeadline();
        if (this.#turns.park()) return;
      }
    } catch (error) {
      this.#end(error);
    }
  };

  readonly #pumpFailed = (error: unknown): void => this.#end(error);

  /**
   * Wakes the loop once the event loop has turned, and keeps it from
   * sending until then. A store batch (one `apply`) reaches the source as a
   * run of changes without a turn between them: the order between types
   * then holds across the whole batch, not only across the changes seen
   * when the first of them woke the loop.
   */
  #settle(): void {
    if (this.#settling) return;
    this.#settling = true;
    setTimeout(() => {
      this.#settling = false;
      this.#turns.wake();
    }, 0);
  }

  /** Ends the loop: `run` resolves when the stream ended or was aborted, and rejects with any other error. */
  #end(error: unknown): void {
    const ended = this.#ended;
    if (ended === undefined) return;
    this.#ended = undefined;
    this.#turns.stop();
    // Also when the session ends: a pending timer would hold this server and its session until the deadline.
    this.#timer?.cancel();
    this.#timer = undefined;
    if (
      KdsError.is(error, "session_closed") ||
      KdsError.is(error, "aborted") ||
      this.#signal?.aborted === true
    )
      ended.resolve();
    else ended.reject(error);
  }

  /**
   * Takes the next request off the view into `#incoming` and wakes the loop;
   * the loop calls it again once it has handled that request, so at most one
   * request waits here (the rest wait in the mux, within its window). A
   * failure (the session ended, or `signal` aborted) is kept for the loop to
   * throw.
   */
  #read(signal: AbortSignal): void {
    const view = this.#view;
    if (view.recvTo !== undefined) view.recvTo(this.#receiver, signal);
    else view.recv(signal).then(this.#received, this.#readFailed);
  }

  /** `#read`'s handlers, made once per stream rather than per request (one request per ACK of every change). */
  readonly #received = (request: MuxRequest): void => {
    const signal = this.#signal;
    if (!this.#turns.parked || this.#failure !== undefined || signal === undefined) {
      this.#incoming = request;
      this.#turns.wake();
      return;
    }
    // The loop waits between turns, holding nothing: handle the request as it would, and wake it
    // only when there is something to send (an ACK, nearly every request, leaves nothing). Each zone
    // ACKs each change: this spares a wake and a turn of the loop per zone and change.
    try {
      this.#onRequest(request);
      this.#read(signal);
      if (this.#due()) this.#turns.wake();
      else this.#armDeadline();
    } catch (error) {
      this.#fail(error); // the loop throws it, as it would have thrown it handling the request itself
    }
  };
  readonly #readFailed = (error: unknown): void => this.#fail(error);
  /** `#read`'s handlers as the view's receiver (no promise per request where the view takes one). */
  readonly #receiver: ViewReceiver<MuxRequest> = { take: this.#received, fail: this.#readFailed };

  #throwIfFailed(): void {
    if (this.#failure !== undefined) throw this.#failure.error;
  }

  /** Keeps the first failure of a read or a send for the loop to throw, and wakes it. */
  #fail(error: unknown): void {
    this.#failure ??= { error };
    this.#turns.wake();
  }

  /**
   * Makes sure a timer wakes the loop by the earliest deadline (an ACK
   * timeout or the end of a NACK backoff). A timer already armed for that
   * time or earlier is kept: firing early only costs an iteration that finds
   * nothing due and arms the next one, while re-arming on every response
   * would cost a timer per response.
   */
  #armDeadline(): void {
    const deadline = this.#nextDeadline();
    const armed = this.#timer;
    if (!Number.isFinite(deadline) || (armed !== undefined && armed.at <= deadline)) return;
    armed?.cancel();
    const timer = {
      at: deadline,
      cancel: this.#clock.setTimer(() => {
        if (this.#timer === timer) this.#timer = undefined;
        this.#turns.wake();
      }, deadline - this.#now()),
    };
    this.#timer = timer;
  }

  #now(): number {
    return this.#clock.now();
  }

  #onRequest(request: MuxRequest): void {
    if (!this.#served.includes(request.typeUrl)) {
      this.#observer.unknownType?.(request.typeUrl);
      return;
    }
    if (request.$typeName === "kds.v1.DiscoveryRequest") this.#onSotw(request);
    else this.#onDelta(request);
  }

  /**
   * The state of `typeUrl` in `mode`, or undefined when the type has none yet
   * (or one in the other mode): a request then subscribes with {@link #subscribe}.
   * (Not one call returning both: every zone's ACK of every change comes here.)
   */
  #stateOf(typeUrl: string, mode: "sotw" | "delta"): TypeState | undefined {
    const existing = this.#find(typeUrl);
    return existing !== undefined && existing.mode === mode ? existing : undefined;
  }

  /** The state of `typeUrl`, if subscribed (a loop over a few: every zone's change and ACK comes here). */
  #find(typeUrl: string): TypeState | undefined {
    for (const state of this.#typeList) if (state.typeUrl === typeUrl) return state;
    return undefined;
  }

  /** A new state of `typeUrl` in `mode`, replacing one in the other mode if there was. */
  #subscribe(typeUrl: string, mode: "sotw" | "delta"): TypeState {
    const existing = this.#find(typeUrl);
    const state = new TypeState(typeUrl, mode, this.#dependsOn(typeUrl));
    if (state.deps.length > 0) this.#ordered = true;
    // concat and map make arrays of exactly the length (push would leave room for 16).
    this.#typeList =
      existing === undefined
        ? this.#typeList.concat([state])
        : this.#typeList.map((s) => (s === existing ? state : s));
    return state;
  }

  #onSotw(request: DiscoveryRequest): void {
    const state = this.#stateOf(request.typeUrl, "sotw");
    if (state === undefined) {
      this.#subscribe(request.typeUrl, "sotw"); // a first request subscribes; any nonce in it is from an older stream
      return;
    }
    if (request.responseNonce === "") {
      // A fresh subscription on the same stream: send the whole set again.
      state.lastSentVersion = undefined;
      state.dirty = true;
      return;
    }
    this.#answer(state, request.responseNonce, request.errorDetail);
  }

  #onDelta(request: DeltaDiscoveryRequest): void {
    const held = this.#stateOf(request.typeUrl, "delta");
    const created = held === undefined;
    const state = held ?? this.#subscribe(request.typeUrl, "delta");
    if (created) {
      // A resuming zone names every resource it holds (100,000 in the sync bench): for-in reads them without
      // Object.entries's pair per entry, in about half the time.
      const versions = request.initialResourceVersions;
      for (const key in versions)
        if (Object.hasOwn(versions, key)) state.knownMade().set(key, versions[key] as string);
    }
    // Subscription changes apply whatever the nonce.
    const subscribe = request.resourceNamesSubscribe;
    if (subscribe.length > 0 || request.resourceNamesUnsubscribe.length > 0) {
      // An empty first subscription, or "*", means every resource of the type.
      if (subscribe.includes("*")) state.names = undefined;
      else if (created) state.names = new Set(subscribe);
      else for (const name of subscribe) state.names?.add(name);
      for (const name of request.resourceNamesUnsubscribe) {
        state.names?.delete(name);
        // The client forgets it, unless a response in flight carries it: the client may still apply that.
        if (carriedInFlight(state.phase, name)) state.knownMade().set(name, IN_DOUBT);
        else state.known?.delete(name);
      }
      state.dirty = true;
      state.full = true;
    }
    if (!created && request.responseNonce !== "")
      this.#answer(state, request.responseNonce, request.errorDetail);
  }

  /**
   * An ACK (no error detail, or one with code 0 carrying per-resource errors:
   * resource-errors.ts) or NACK (any other code) for `nonce`; stale nonces
   * change nothing.
   */
  #answer(state: TypeState, nonce: string, detail: Status | undefined): void {
    const phase = state.phase;
    const answered = inFlightWith(phase, nonce);
    if (answered === undefined) return; // stale
    const error = detail === undefined || detail.code === 0 ? undefined : detail.message;
    if (error === undefined) {
      state.phase = nextPhase(phase, { type: "ack", nonce });
      state.nacks = 0;
      // `known` took what the response carried when it was sent: nothing more to record.
      this.#observer.acked?.(state.typeUrl, answered.version, nonce);
      const { errors, omitted } = resourceErrorsOf(detail);
      this.#observer.resourceErrors?.(state.typeUrl, errors, omitted);
      return;
    }
    const o = this.#options;
    const backoff = backoffCeiling(state.nacks, {
      baseMs: o.nackBackoffMs,
      capMs: o.nackBackoffCapMs,
      resetAfterMs: 0,
    });
    state.nacks++;
    state.phase = nextPhase(phase, { type: "nack", nonce, until: this.#now() + backoff });
    this.#startOver(state, phase);
    this.#observer.nacked?.(state.typeUrl, answered.version, error, nonce);
  }

  /**
   * After a NACK or a timeout: forget what was in flight; send the current
   * set again (it may be the same). A client answers each response on its
   * own, so a response in flight after the NACKed one may have been applied
   * (its ACK now counts as stale): every key a response in flight carried is
   * in doubt, so the next diff sends it again, or its removal. `inFlight` is
   * the phase before the NACK or timeout dropped what was in flight.
   */
  #startOver(state: TypeState, inFlight: TypePhase): void {
    state.lastSentVersion = undefined;
    if (inFlight.kind === "inflight")
      for (const response of inFlight.sent) {
        for (const { key } of response.delta?.upserts ?? []) state.knownMade().set(key, IN_DOUBT);
        for (const key of response.delta?.removed ?? []) state.knownMade().set(key, IN_DOUBT);
      }
    state.dirty = true;
    state.full = true;
  }

  /**
   * Whether `#pumpNow` has anything to do: a type in backoff, one whose oldest
   * response in flight is past the ACK timeout, or one with something new
   * and room in flight. Errs on the side of true: `#pumpNow` itself decides.
   */
  #due(): boolean {
    const now = this.#now();
    for (const state of this.#typeList) {
      const phase = state.phase;
      if (phase.kind === "backoff") return true;
      const oldest = phase.kind === "inflight" ? phase.sent[0] : undefined;
      if (this.#late(state, oldest, now)) return true;
      const maxInFlight = state.mode === "delta" ? this.#options.maxDeltaInFlight : 1;
      if (state.dirty && canSend(phase, maxInFlight)) return true;
      if (this.#ordered && this.#released(state)) return true;
    }
    return false;
  }

  /**
   * Whether `state` has work not yet diffed (changes, or a change split over
   * responses not all sent), or held resources back: what a type ordered
   * after it waits for.
   */
  #pending(state: TypeState): boolean {
    if (state.dirty) return true;
    if (state.mode === "sotw") return false;
    return (
      state.full ||
      state.sweepAt < state.sweep.length ||
      (state.taken?.size ?? 0) > 0 ||
      (state.changed?.size ?? 0) > 0
    );
  }

  /**
   * What a diff of `state` may send now: resources once no type it depends
   * on has resources to send (work not diffed, or resources held back), and
   * removals once no type depending on it has removals to send. Undefined
   * when no order concerns it.
   */
  #order(state: TypeState): DiffOrder | undefined {
    if (!this.#ordered) return undefined;
    let related = state.deps.length > 0;
    let upserts = true;
    for (const dep of state.deps) {
      const d = this.#find(dep);
      if (d !== undefined && (this.#pending(d) || d.heldUpserts)) upserts = false;
    }
    let removals = true;
    for (const other of this.#typeList) {
      if (!other.deps.includes(state.typeUrl)) continue;
      related = true;
      if (this.#pending(other) || other.heldRemovals) removals = false;
    }
    return related ? { upserts, removals } : undefined;
  }

  /** Whether `state` held something back that its order now lets go (it is not yet marked dirty for it). */
  #released(state: TypeState): boolean {
    if (state.dirty || (!state.heldUpserts && !state.heldRemovals)) return false;
    const order = this.#order(state);
    return (
      order === undefined ||
      (state.heldUpserts && order.upserts) ||
      (state.heldRemovals && order.removals)
    );
  }

  /**
   * Does what is due (ends a backoff, times out an unanswered response) and
   * sends while a type has something new and room in flight, one response at
   * a time (a split change streams its parts), as far as it can without
   * waiting. Returns what to wait for before calling it again (a snapshot the
   * source gives later, a state-of-the-world send, or the event loop's turn
   * after a large part), or undefined when it is done. It only moves states
   * forward, so calling it again goes on where it stopped.
   */
  #pumpNow(signal: AbortSignal): Promise<unknown> | undefined {
    // With an order between types, a type that held something back goes again once what it waited for was sent
    // (bounded: a pass that releases nothing ends it).
    for (let pass = 0; pass <= this.#typeList.length; pass++) {
      const wait = this.#pumpPass(signal);
      if (wait !== undefined || !this.#ordered) return wait;
      let released = false;
      for (const state of this.#typeList)
        if (this.#released(state)) {
          state.dirty = true;
          released = true;
        }
      if (!released) return undefined;
    }
    return undefined;
  }

  /** One pass of {@link #pumpNow} over the types, in the order they were subscribed. */
  #pumpPass(signal: AbortSignal): Promise<unknown> | undefined {
    for (const state of this.#typeList) {
      const now = this.#now();
      if (state.phase.kind === "backoff")
        state.phase = nextPhase(state.phase, { type: "expired", now });
      const oldest = state.phase.kind === "inflight" ? state.phase.sent[0] : undefined;
      if (oldest !== undefined && this.#late(state, oldest, now)) {
        this.#observer.stalled?.(state.typeUrl, oldest.nonce, now - oldest.sentAt);
        // A type fetched once is given up on: `known` keeps counting on what the responses carried.
        if (this.#fetchedOnce.includes(state.typeUrl))
          state.phase = nextPhase(state.phase, { type: "timeout" });
        // Any other is waited for, not sent again: the session delivers every frame in order, so a late answer is a
        // slow peer, and a resend would only queue a copy behind the original in the peer's buffers (its memory
        // budget) and make every answer to the original stale, so that no ACK ever counted while the peer's
        // applying took longer than the timeout.
        else state.stalledNonce = oldest.nonce;
      }
      const maxInFlight = state.mode === "delta" ? this.#options.maxDeltaInFlight : 1;
      while (state.dirty && canSend(state.phase, maxInFlight)) {
        if (this.#sending) {
          this.#blocked = true;
          break;
        }
        if (state.mode === "sotw") {
          // A set waits for the types it depends on (it carries the whole kind: removals are not ordered).
          if (this.#ordered && state.deps.length > 0 && this.#order(state)?.upserts === false)
            break;
          return this.#sendSotw(state, signal);
        }
        const sent = this.#sendDelta(state, signal);
        if (sent === YIELD) return nextTurn();
        if (sent !== SENT) return sent;
      }
    }
    return undefined;
  }

  /** Whether `oldest`, the oldest response of `state` in flight, is past the ACK timeout and not yet reported stalled. */
  #late(state: TypeState, oldest: InFlight | undefined, now: number): boolean {
    return (
      oldest !== undefined &&
      oldest.nonce !== state.stalledNonce &&
      now - oldest.sentAt > this.#options.ackTimeoutMs
    );
  }

  #nextDeadline(): number {
    let deadline = Number.POSITIVE_INFINITY;
    for (const state of this.#typeList) {
      if (state.phase.kind === "backoff") deadline = Math.min(deadline, state.phase.until);
      const oldest = state.phase.kind === "inflight" ? state.phase.sent[0] : undefined;
      if (oldest !== undefined && oldest.nonce !== state.stalledNonce)
        deadline = Math.min(deadline, oldest.sentAt + this.#options.ackTimeoutMs + 1);
    }
    return deadline;
  }

  async #sendSotw(state: TypeState, signal: AbortSignal): Promise<void> {
    state.dirty = false;
    const snapshot = await this.#source.snapshot(state.typeUrl, signal);
    if (snapshot === undefined) return;
    if (snapshot.version === state.lastSentVersion) {
      if (!state.dirty) this.#observer.caughtUp?.(state.typeUrl);
      return;
    }
    const limit = this.#options.maxMessageBytes - envelopeBytes(state.typeUrl, snapshot.version);
    let bytes = 0;
    let count = 0;
    for (const r of snapshot.resources) {
      bytes += r.anyBytes + ENTRY_OVERHEAD;
      count++;
    }
    if (bytes > limit || count > this.#options.maxResponseResources) {
      // A state-of-the-world response cannot be split, and a client NACKs one over its
      // maxResponseResources; report (as "*") and wait for the set to shrink.
      state.lastSentVersion = snapshot.version;
      this.#observer.oversized?.(state.typeUrl, "*", bytes, limit);
      return;
    }
    const nonce = String(++this.#nonce);
    const resources = Array.from(snapshot.resources, (r) => r.any);
    state.phase = nextPhase(state.phase, {
      type: "sent",
      response: { nonce, version: snapshot.version, sentAt: this.#now(), delta: undefined },
      maxInFlight: 1,
    });
    state.lastSentVersion = snapshot.version;
    this.#send(
      create(DiscoveryResponseSchema, {
        versionInfo: snapshot.version,
        resources,
        typeUrl: state.typeUrl,
        nonce,
      }),
      signal,
      new SentInfo(
        state.typeUrl,
        snapshot.version,
        nonce,
        bytes,
        resources.length,
        undefined,
        NO_KEYS,
      ),
    );
    if (!state.dirty) this.#observer.caughtUp?.(state.typeUrl);
  }

  /**
   * Hands `response` to the view without waiting for the peer's window (see
   * `#sending`); the observer hears of it (`sent`) once it is accepted, and
   * the loop then looks for more to send if a type was waiting for it
   * (`#blocked`). One send at a time, so its info waits in one field and the
   * handlers are made once per stream, not per response (one per zone and
   * change).
   */
  #send(response: MuxResponse, signal: AbortSignal, sent: SentInfo): void {
    this.#sending = true;
    this.#sent = sent;
    const view = this.#view;
    // Accepted at once (nearly every response of a change): no promise, and the response leaves now.
    if (view.trySend?.(response, signal) === true) this.#accepted();
    else view.send(response, signal).then(this.#accepted, this.#sendFailed);
  }

  readonly #accepted = (): void => {
    const sent = this.#sent as SentInfo;
    this.#sent = undefined;
    this.#sending = false;
    try {
      this.#observer.sent?.(sent.typeUrl, sent);
    } catch (error) {
      this.#fail(error); // an observer that throws is a bug: the loop rethrows it, as it would its own
    }
    // Only a type that waited for this send needs the loop now; otherwise the next change or request wakes it.
    if (this.#blocked) {
      this.#blocked = false;
      this.#turns.wake();
    }
  };
  /** The session ended (or `signal` aborted): the loop throws it and ends. */
  readonly #sendFailed = (error: unknown): void => this.#fail(error);

  /**
   * Sends the next part of the type's diff, if any: {@link YIELD} when the
   * loop should let the event loop turn before the next part (it sent a part
   * of at least {@link YIELD_AFTER_BYTES} and more of the change is left),
   * {@link SENT} when it may go on at once (also when it sent nothing), or a
   * promise of the send when the source gives its snapshot only later (it
   * resolves once the event loop may go on).
   */
  #sendDelta(state: TypeState, signal: AbortSignal): typeof SENT | typeof YIELD | Promise<unknown> {
    // Take the work before reading the snapshot: a change that lands while it
    // is being read marks the type again and is handled next round.
    state.dirty = false;
    const full = takeWork(state);
    const source = this.#source;
    if (source.snapshotNow !== undefined)
      return this.#sendPart(state, source.snapshotNow(state.typeUrl), full, signal);
    return source.snapshot(state.typeUrl, signal).then((snapshot) => {
      const sent = this.#sendPart(state, snapshot, full, signal);
      return sent === YIELD ? nextTurn() : undefined;
    });
  }

  /** {@link #sendDelta}'s part against `snapshot` (undefined: the source cannot tell the set yet). */
  #sendPart(
    state: TypeState,
    snapshot: Snapshot | undefined,
    full: boolean,
    signal: AbortSignal,
  ): typeof SENT | typeof YIELD {
    if (snapshot === undefined) {
      // Not known yet: keep the work for when the source says it changed.
      giveBack(state, full);
      return SENT;
    }
    // From here to the send nothing awaits: the snapshot stays as it was read.
    const version = snapshot.version;
    if (state.envelopeVersion !== version) {
      state.envelopeBytes = envelopeBytes(state.typeUrl, version);
      state.envelopeVersion = version;
    }
    const envelope = state.envelopeBytes;
    const limit = this.#options.maxMessageBytes - envelope;
    // A response closes at the target size; one resource larger than that still goes, alone, up to the limit.
    const wanted = this.#options.deltaResponseBytes;
    const target = Number.isFinite(wanted)
      ? Math.min(limit, Math.max(1, wanted - envelope))
      : limit;
    const part = nextPart(
      state,
      snapshot.resources,
      version,
      full,
      { limit, target, entries: this.#options.maxResponseResources },
      (key, size) => this.#observer.oversized?.(state.typeUrl, key, size, limit),
      this.#order(state),
    );
    const { upserts, removed, bytes, more } = part;
    if (more) state.dirty = true;
    if (upserts.length === 0 && removed.length === 0) {
      if (!state.dirty) this.#observer.caughtUp?.(state.typeUrl);
      return SENT;
    }
    const nonce = String(++this.#nonce);
    state.phase = nextPhase(state.phase, {
      type: "sent",
      // The part is what the response carried (its upserts and removals): kept as is, not copied into another object.
      response: { nonce, version, sentAt: this.#now(), delta: part },
      maxInFlight: this.#options.maxDeltaInFlight,
    });
    // What the client will hold once it applies this response (see DeltaDiffState.known).
    // (Removals are of keys it holds, so `known` exists when there are any.)
    if (upserts.length > 0) {
      const known = state.knownMade();
      for (const r of upserts) known.set(r.key, r.version);
    }
    for (const key of removed) state.known?.delete(key);
    // The object `create(DeltaDiscoveryResponseSchema, ...)` makes, written out (one per zone and change).
    const response: DeltaDiscoveryResponse = {
      $typeName: "kds.v1.DeltaDiscoveryResponse",
      systemVersionInfo: version,
      resources: resourcesOf(upserts),
      typeUrl: state.typeUrl,
      nonce,
      removedResources: removed,
    };
    this.#send(
      response,
      signal,
      new SentInfo(state.typeUrl, version, nonce, bytes, upserts.length, upserts, removed),
    );
    if (!state.dirty) this.#observer.caughtUp?.(state.typeUrl);
    return more && bytes >= YIELD_AFTER_BYTES ? YIELD : SENT;
  }
}

/**
 * A part of a split change at least this large is let out before the next
 * part is diffed (see {@link nextTurn}). Smaller parts go on at once: a
 * timer turn per part would cost more than it brings forward.
 */
const YIELD_AFTER_BYTES = 64 * 1024;

/** {@link DiscoveryServer}'s `#sendDelta` sent a part, or nothing, and the loop may go on at once. */
const SENT = 0;
/** {@link DiscoveryServer}'s `#sendDelta` sent a large part of a split change: let the event loop turn first. */
const YIELD = 1;

const NO_KEYS: readonly string[] = Object.freeze([]);

/** No type subscribed yet: shared by every stream until its first subscription. */
const NO_TYPES: readonly TypeState[] = Object.freeze([]);

/** {@link DiscoveryServerInit.dependsOn}'s default: no type depends on another. */
const noDependencies = (): readonly string[] => NO_KEYS;

/**
 * What the observer's `sent` is told of a response: one object per response,
 * its `keys` listed only when read (the lag metrics read them; the status
 * counts only).
 */
class SentInfo {
  #keys: string[] | undefined;
  readonly #upserts: readonly WireResource[] | undefined;
  readonly #removed: readonly string[];

  constructor(
    readonly typeUrl: string,
    readonly version: string,
    readonly nonce: string,
    readonly bytes: number,
    readonly resources: number,
    upserts: readonly WireResource[] | undefined,
    removed: readonly string[],
  ) {
    this.#upserts = upserts;
    this.#removed = removed;
  }

  get removed(): number {
    return this.#removed.length;
  }

  /** A delta response's keys (updated, then removed); undefined for a state-of-the-world response. */
  get keys(): readonly string[] | undefined {
    const upserts = this.#upserts;
    if (upserts === undefined) return undefined;
    if (this.#keys === undefined) {
      const keys = upserts.map((r) => r.key);
      for (const key of this.#removed) keys.push(key);
      this.#keys = keys;
    }
    return this.#keys;
  }
}

/**
 * Resolves on the event loop's next turn (a 0 ms timer). Between large parts
 * of a split change: node:http2 writes a response's bytes to the socket only
 * once the microtasks are done, so without it the next parts were diffed and
 * encoded before the client received the first.
 */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/** The `Resource` of each of `upserts`, in order (a loop, not map(): one response per zone and change). */
function resourcesOf(upserts: readonly WireResource[]): WireResource["resource"][] {
  const resources: WireResource["resource"][] = [];
  for (const r of upserts) resources.push(r.resource);
  return resources;
}

/** Whether a delta response in flight in `phase` carries `key` (as a resource or a removal). */
function carriedInFlight(phase: TypePhase, key: string): boolean {
  if (phase.kind !== "inflight") return false;
  for (const response of phase.sent) {
    for (const r of response.delta?.upserts ?? []) if (r.key === key) return true;
    if (response.delta?.removed.includes(key) === true) return true;
  }
  return false;
}
