/**
 * The mux session: one transport stream, one reader, one writer, two views.
 *
 * The reader ({@link MuxSession.attach}) takes every inbound frame at once and
 * never waits on a view's consumer: data frames go into the receiving view's
 * buffer, bounded by the window this side granted in frames and in bytes, and
 * a peer that sends beyond its credit is a protocol error, found when the
 * frame arrives. What the buffers hold counts against the process's
 * {@link MemoryBudget}, when one is given. The writer is the {@link Outbox},
 * pulled by the transport through {@link MuxSession.outbound}.
 *
 * @module
 */
import { KdsError, abortError } from "../errors.ts";
import { create } from "@bufbuild/protobuf";
import {
  CallSchema,
  GoAwayReason,
  FrameSchema,
  type Call,
  type Frame,
} from "../gen/kds/mux/v1/mux_pb.ts";
import { raceAbort } from "../util/abort.ts";
import { deferred, type Deferred } from "../util/deferred.ts";
import { sharedTicker } from "../util/wake.ts";
import { noopMetrics, type Metrics } from "../metrics.ts";
import { frameRefusal } from "./frame-limits.ts";
import { weighFrame } from "./frame-size.ts";
import { helloWindowRefusal } from "./hello-limits.ts";
import { PUSH_FRAMES, pushesFrames, type PushedFrames } from "./frame-push.ts";
import {
  callLane,
  controlFrame,
  frameKind,
  goAwayReasons,
  type Lane,
  type MuxRequest,
  type MuxResponse,
} from "./frames.ts";
import type { BudgetHolder, MemoryBudget } from "./budget.ts";
import { Inbox, type InboxMemory } from "./inbox.ts";
import {
  MAX_WINDOW,
  resolveSessionOptions,
  type ResolvedSessionOptions,
  type SessionOptions,
} from "./options.ts";
import {
  helloFields,
  negotiate,
  type HelloNegotiationFields,
  type HelloOffer,
} from "./negotiation.ts";
import { Outbox } from "./outbox.ts";
import { SessionClientView, SessionServerView } from "./session-views.ts";
import { noteReceivedTrace, outgoingTrace, withTraceContext } from "./trace-context.ts";
import {
  gracefulCodes,
  transition,
  type PeerSettings,
  type SessionEnd,
  type SessionEndCode,
  type SessionState,
} from "./state.ts";
import type {
  CallPort,
  ClientStreamView,
  CloseOptions,
  ServerStreamView,
  Session,
  SessionStats,
} from "./views.ts";

export { MIN_PROTOCOL_VERSION, PROTOCOL_VERSION } from "./negotiation.ts";

/** How a {@link MuxSession} is created. */
export interface SessionInit {
  /** Which side this is. */
  role: "zone" | "global";
  /** This side's name, sent in the hello. */
  localId: string;
  /**
   * The peer's name, when known before the hello (the global knows the zone
   * from its `client-id` header, which admission checked against the zone's
   * token or certificate unless the global runs without zone
   * authentication). The peer's hello must match.
   */
  peerId?: string;
  /** Tunables; see {@link SessionOptions}. */
  options?: SessionOptions;
  /** Aborting it closes the session (a goaway with reason shutdown). */
  signal?: AbortSignal;
  /** Monotonic clock in milliseconds (tests may inject one). Default `performance.now`. */
  now?: () => number;
  /** Where frames, credit waits and the session's open and end are reported. Default: nowhere. */
  metrics?: Metrics;
  /**
   * The process's ceiling on buffered inbound bytes, shared with its other
   * sessions; when it is exhausted, the session holding the most is ended
   * with `resource_exhausted`. Default: none (only this session's byte
   * windows bound its buffers).
   */
  budget?: MemoryBudget;
}

const endCodeOfGoAway = new Map<GoAwayReason, SessionEndCode>(
  Object.entries(goAwayReasons).map(([code, reason]) => [reason, code as SessionEndCode]),
);

/** The default clock of every session: one function, not a closure per session. */
const performanceNow = (): number => performance.now();

/** The session implementation shared by both roles. Library users see it as a {@link Session}. */
export class MuxSession implements Session {
  readonly role: "zone" | "global";
  readonly localId: string;
  readonly server: ServerStreamView;
  readonly client: ClientStreamView;
  readonly ready: Promise<void>;
  readonly closed: Promise<SessionEnd>;
  readonly signal: AbortSignal;

  readonly #options: ResolvedSessionOptions;
  readonly #now: () => number;
  /** The session agreed on the feature `trace-context`: frames carry trace contexts both ways (trace-context.ts). */
  #traceAgreed = false;
  readonly #metrics: Metrics;
  readonly #outbox: Outbox;
  readonly #serverInbox: Inbox<MuxRequest>;
  readonly #clientInbox: Inbox<MuxResponse>;
  /** Until the hello settled it; then dropped (its resolvers), as `ready` holds the promise. */
  #ready: Deferred<void> | undefined;
  /** Settles `closed`: only the resolver is kept (a deferred's object and reject function are a closure and more per session). */
  readonly #resolveClosed: (end: SessionEnd) => void;
  /**
   * Made when someone asks for {@link released} (most sessions: when they
   * end), not with every idle session; resolved already when asked after the release.
   */
  #released: Deferred<void> | undefined;
  readonly #abort = new AbortController();
  /**
   * Made when a transport asks for {@link transportSignal}: the global's
   * direct mux stream never does, and an AbortSignal costs an idle zone's
   * session most of a KiB of heap. The reader learns of the release through
   * `#onReleased` instead.
   */
  #transportAbort: AbortController | undefined;
  /** The one reader's hook for the release of the transport (set while it reads). */
  #onReleased: (() => void) | undefined;
  readonly #received = { requests: 0, responses: 0, control: 0 };
  #callListener: ((call: Call) => KdsError | undefined) | undefined;
  #expectedPeerId: string | undefined;
  #state: SessionState = { kind: "handshaking" };
  /** Stops the session's tick (on the process's shared ticker); undefined once stopped. */
  #stopTick: (() => void) | undefined;
  #graceTimer: ReturnType<typeof setTimeout> | undefined;
  #lastHeard: number;
  /** When the session was created: the transport's open is timed from here. */
  readonly #startedAt: number;
  /** When the transport handed over the peer's frames ({@link attach}): the hello is timed from here. */
  #attachedAt: number | undefined;
  #lastPingAt: number;
  #nextPingId = 1n;
  /** Pings sent and not yet answered; none (no Map) between an answer and the next ping, most of an idle session's life. */
  #pingSentAt: Map<bigint, number> | undefined;
  #rttMs: number | undefined;
  #outboundUsed = false;
  #outboundDone = false;
  #inboundDone = false;
  #peerEndedStream = false;
  /** Makes the process's memory budget forget this session (set when it has one). */
  #forgetMemory: (() => void) | undefined;

  /** @param init - role, names, options and the owner's signal */
  constructor(init: SessionInit) {
    this.role = init.role;
    this.localId = init.localId;
    this.#expectedPeerId = init.peerId;
    this.#options = resolveSessionOptions(init.options);
    this.#now = init.now ?? performanceNow;
    this.#metrics = init.metrics ?? noopMetrics;
    this.#lastHeard = this.#now();
    this.#startedAt = this.#lastHeard;
    this.#lastPingAt = this.#lastHeard;
    this.signal = this.#abort.signal;
    const ready = deferred<void>();
    this.#ready = ready;
    this.ready = ready.promise;
    // Only marks the rejection handled for a caller that never awaits ready: whoever awaits it gets the
    // rejection, and the same end is on `end` and `closed`, so nothing is lost.
    this.ready.catch(() => undefined);
    let resolveClosed!: (end: SessionEnd) => void;
    this.closed = new Promise<SessionEnd>((resolve) => {
      resolveClosed = resolve;
    });
    this.#resolveClosed = resolveClosed;

    const metrics = this.#metrics;
    this.#outbox = new Outbox(
      this.#options.maxQueuedSends,
      this.#now,
      MAX_WINDOW,
      (lane, ms) => metrics.creditWait(lane, ms),
      (lane, bytes) => metrics.frames("sent", lane, 1, bytes),
    );
    const grant = (lane: Lane, frames: number, bytes: number): void =>
      this.#outbox.grant(lane, frames, bytes);
    const memory = init.budget === undefined ? undefined : this.#budgetMemory(init.budget);
    // The largest frame this side reads bounds what a peer's frame takes of the window (see Inbox).
    const o = this.#options;
    this.#serverInbox = new Inbox<MuxRequest>(
      "requests",
      o.requestWindow,
      o.requestWindowBytes,
      grant,
      memory,
      o.maxMessageBytes,
    );
    this.#clientInbox = new Inbox<MuxResponse>(
      "responses",
      o.responseWindow,
      o.responseWindowBytes,
      grant,
      memory,
      o.maxMessageBytes,
    );
    // One closure for both views (they are objects with prototype methods): every idle zone's session holds them.
    const traced = (message: object, frame: Frame): Frame => this.#traced(message, frame);
    this.server = new SessionServerView(this.#serverInbox, this.#outbox, traced);
    this.client = new SessionClientView(this.#clientInbox, this.#outbox, traced);

    this.#outbox.setHello(
      controlFrame({
        case: "hello",
        value: {
          ...helloFields(this.#offer()),
          peerId: this.localId,
          requestWindow: this.#options.requestWindow,
          responseWindow: this.#options.responseWindow,
          requestWindowBytes: this.#options.requestWindowBytes,
          responseWindowBytes: this.#options.responseWindowBytes,
          maxMessageBytes: this.#options.maxMessageBytes,
          heartbeatIntervalMs: this.#options.heartbeatIntervalMs,
          heartbeatTimeoutMs: this.#options.heartbeatTimeoutMs,
        },
      }),
    );

    const tickMs = Math.max(
      5,
      Math.floor(
        Math.min(
          o.heartbeatIntervalMs,
          o.heartbeatTimeoutMs / 4,
          o.sendTimeoutMs / 4,
          o.handshakeTimeoutMs / 4,
          o.openTimeoutMs / 4,
        ),
      ),
    );
    // One timer per period for every session of the process, not an interval each (see Ticker).
    this.#stopTick = sharedTicker.every(tickMs, () => this.#tick());

    if (init.signal !== undefined) {
      const owner = init.signal;
      const onAbort = (): void =>
        this.#finish(
          {
            code: "aborted",
            message: `${this.role} closed the session through its AbortSignal`,
            initiator: "local",
            graceful: true,
            cause: owner.reason,
          },
          GoAwayReason.SHUTDOWN,
        );
      if (owner.aborted) onAbort();
      else owner.addEventListener("abort", onAbort, { once: true, signal: this.signal });
    }
  }

  /** The reverse-call frames of this session (see {@link CallPort}). */
  readonly calls: CallPort = {
    peerAcceptsCalls: () => this.peer?.calls === true,
    send: (call, signal) =>
      this.#outbox.send(
        callLane(call),
        create(FrameSchema, { value: { case: "call", value: call } }),
        signal,
      ),
    listen: (listener) => {
      if (this.#callListener !== undefined)
        throw new KdsError("busy", "a session has one call listener; it is already set");
      this.#callListener = listener;
    },
  };

  /** The peer's name (see {@link Session.peerId}). */
  get peerId(): string {
    return this.#expectedPeerId ?? "";
  }

  /** What the peer announced in its hello (see {@link Session.peer}). */
  get peer(): PeerSettings | undefined {
    return this.#state.kind === "handshaking" ? undefined : this.#state.peer;
  }

  /** The end reason, once ended. */
  get end(): SessionEnd | undefined {
    return this.#state.kind === "ending" || this.#state.kind === "closed"
      ? this.#state.end
      : undefined;
  }

  /** How many batch frames this side sent. */
  get batchesSent(): number {
    return this.#outbox.counters.batches;
  }

  /** The current lifecycle state (for diagnostics and tests). */
  get state(): SessionState {
    return this.#state;
  }

  /** Aborts when the session lets go of its transport; transports tie their call to it. */
  get transportSignal(): AbortSignal {
    if (this.#transportAbort === undefined) {
      this.#transportAbort = new AbortController();
      if (this.#state.kind === "closed") this.#transportAbort.abort(this.#abort.signal.reason);
    }
    return this.#transportAbort.signal;
  }

  /** Resolves once the transport has been released (the session has fully wound down). */
  get released(): Promise<void> {
    return this.#releasedPromise();
  }

  /** The release's promise, made on first use (see {@link MuxSession.#released}). */
  #releasedPromise(): Promise<void> {
    if (this.#released === undefined) {
      this.#released = deferred<void>();
      if (this.#state.kind === "closed") this.#released.resolve();
    }
    return this.#released.promise;
  }

  /** The frames this side writes. The transport pulls them; it may be taken once. */
  get outbound(): AsyncIterable<Frame> {
    if (this.#outboundUsed)
      throw new KdsError(
        "invalid_argument",
        "the outbound frames of a session can be taken only once (one writer per stream)",
      );
    this.#outboundUsed = true;
    return this.#outbox.frames(() => this.#outboundFinished());
  }

  /**
   * Starts the one reader on `inbound` (the frames the peer writes). The
   * peer's hello is timed from here (`handshakeTimeoutMs`); before it, from
   * the session's creation, the transport has `openTimeoutMs` to open the
   * stream.
   */
  attach(inbound: AsyncIterable<Frame>): void {
    this.#attachedAt = this.#lastHeard = this.#now();
    const iterator = inbound[Symbol.asyncIterator]();
    if (pushesFrames(iterator)) this.#receive(iterator);
    else void this.#read(iterator);
  }

  stats(): SessionStats {
    const { requests, responses, control } = this.#outbox.counters;
    return {
      sent: { requests, responses, control },
      received: { ...this.#received },
      buffered: { requests: this.#serverInbox.buffered, responses: this.#clientInbox.buffered },
      bufferedBytes: {
        requests: this.#serverInbox.bufferedBytes,
        responses: this.#clientInbox.bufferedBytes,
      },
      heartbeatRttMs: this.#rttMs,
    };
  }

  async close(options: CloseOptions = {}): Promise<SessionEnd> {
    const code = options.code ?? "shutdown";
    this.#finish(
      {
        code,
        message: options.message ?? `${this.role} ${this.localId} closed the session`,
        initiator: "local",
        graceful: gracefulCodes.has(code),
        cause: options.cause,
      },
      goAwayReasons[code],
      options.reconnectTo,
    );
    await raceAbort(
      this.#releasedPromise(),
      options.signal,
      "waiting for the session to release its transport",
    ).catch(() => undefined); // rejects only when the caller's signal aborts: it stops waiting, the session is ended either way
    return this.closed;
  }

  /**
   * Ends the session because of a failure found outside the session (the
   * transport call failed before or while streaming).
   */
  fail(code: SessionEndCode, message: string, cause?: unknown): void {
    this.#finish({ code, message, initiator: "local", graceful: false, cause }, undefined);
  }

  /** Reads the peer's frames by iteration (any transport's frames). */
  async #read(iterator: AsyncIterator<Frame>): Promise<void> {
    // Each read races the transport's release, through one hook for the whole stream (one per frame cost more than the frame).
    // Released after the session ended: the release carries the session's end (its signal's reason).
    const ended = this.#abort.signal;
    let failRead: ((reason: unknown) => void) | undefined;
    // Set by the hook and read per frame.
    let isReleased = this.#state.kind === "closed";
    const onReleased = (): void => {
      isReleased = true;
      failRead?.(abortError(ended, "reading the mux stream"));
    };
    this.#onReleased = onReleased;
    const read = (
      resolve: (r: IteratorResult<Frame>) => void,
      reject: (reason: unknown) => void,
    ): void => {
      failRead = reject;
      iterator.next().then(resolve, reject);
    };
    try {
      for (;;) {
        if (isReleased) throw abortError(ended, "reading the mux stream");
        // A session ended for a failure reads no more: each frame pulled is one more the transport decodes, only to drop it.
        if (this.end !== undefined && !this.end.graceful) return;
        const result = await new Promise(read);
        if (result.done === true) {
          this.#peerEnded();
          return;
        }
        this.#lastHeard = this.#now();
        this.#dispatch(result.value);
      }
    } catch (error) {
      this.#readFailed(error);
    } finally {
      if (this.#onReleased === onReleased) this.#onReleased = undefined;
      this.#readDone(iterator);
    }
  }

  /**
   * Takes the peer's frames as the transport pushes them (see
   * frame-push.ts): what {@link MuxSession.#read} does, without a promise
   * per frame. The first frames come after `attach` has returned, as they
   * would by iteration.
   */
  #receive(source: PushedFrames & AsyncIterator<Frame>): void {
    const ended = this.#abort.signal;
    let over = false;
    const stop = (): void => {
      if (over) return;
      over = true;
      if (this.#onReleased === onReleased) this.#onReleased = undefined;
      this.#readDone(source);
    };
    const onReleased = (): void => {
      if (over) return;
      this.#readFailed(abortError(ended, "reading the mux stream"));
      stop();
    };
    this.#onReleased = onReleased;
    queueMicrotask(() => {
      if (over) return;
      if (this.#state.kind === "closed") {
        onReleased();
        return;
      }
      // A session ended for a failure before it read reads nothing (as #read).
      if (this.end !== undefined && !this.end.graceful) {
        stop();
        return;
      }
      try {
        source[PUSH_FRAMES]({
          frame: (frame) => {
            if (over) return false;
            // A session ended for a failure reads no more (as #read).
            if (this.end !== undefined && !this.end.graceful) {
              stop();
              return false;
            }
            this.#lastHeard = this.#now();
            try {
              this.#dispatch(frame);
            } catch (error) {
              this.#readFailed(error);
              stop();
              return false;
            }
            // A frame that ended the session for a failure is the last one read (as #read).
            if (this.end !== undefined && !this.end.graceful) {
              stop();
              return false;
            }
            return true;
          },
          end: () => {
            if (over) return;
            try {
              this.#peerEnded();
            } catch (error) {
              this.#readFailed(error);
            } finally {
              stop();
            }
          },
          fail: (error) => {
            if (over) return;
            try {
              this.#readFailed(error);
            } finally {
              stop();
            }
          },
        });
      } catch (error) {
        this.#readFailed(error);
        stop();
      }
    });
  }

  /** The peer ended its frames without a goaway. */
  #peerEnded(): void {
    this.#peerEndedStream = true;
    this.#finish(
      {
        code: "peer_eof",
        message: `the ${this.role === "zone" ? "global" : "zone"} ended its direction of the stream without a goaway (a proxy or load balancer may have cut it); reconnecting is safe`,
        initiator: "peer",
        graceful: false,
      },
      undefined,
    );
  }

  /** Reading the peer's frames failed with `error`: ends the session for it, unless it has ended already. */
  #readFailed(error: unknown): void {
    if (this.end === undefined && KdsError.is(error, "protocol_error")) {
      // The transport could not decode what the peer wrote: tell the peer, as for any broken frame.
      this.#protocolError(error.message, error);
    } else if (this.end === undefined) {
      this.#finish(
        {
          code: "transport",
          message: `the mux stream failed: ${describe(error)}`,
          initiator: "peer",
          graceful: false,
          cause: error,
        },
        undefined,
      );
    }
  }

  /** The reading is over: stops the peer's stream and lets the transport go once the writing is over too. */
  #readDone(frames: AsyncIterator<Frame>): void {
    this.#inboundDone = true;
    // Only stops the peer's stream; what it failed with was read already (or the session already ended).
    void Promise.resolve(frames.return?.()).catch(() => undefined);
    this.#maybeRelease();
  }

  /**
   * Weighs a data frame as it arrives: counts it, and refuses it when its
   * decoded form is out of proportion to its length. Returns its weight, or
   * undefined once the session is ended for it.
   */
  #weigh(frame: Frame, lane: Lane): { bytes: number; memory: number } | undefined {
    const weight = weighFrame(frame);
    this.#metrics.frames("received", lane, 1, weight.wireBytes);
    const refused = frameRefusal(weight);
    if (refused !== undefined) {
      this.#protocolError(`the peer sent ${lane}: ${refused}`);
      return undefined;
    }
    return { bytes: weight.wireBytes, memory: weight.wireBytes + weight.heapBytes };
  }

  #dispatch(frame: Frame): void {
    const ended = this.end !== undefined;
    const value = frame.value;
    if (this.#state.kind === "handshaking" && value.case !== "hello") {
      this.#protocolError(`the first frame must be a hello, got ${frameKind(frame)}`);
      return;
    }
    if (
      value.case !== "request" &&
      value.case !== "deltaRequest" &&
      value.case !== "response" &&
      value.case !== "deltaResponse" &&
      value.case !== "call"
    ) {
      // Control frames and a batch's own fields are weighed too (a batch's frames each on their own below): a frame of too many
      // elements ends the session whatever its kind, also where the transport decoded it before anything could weigh its bytes.
      const container =
        value.case === "batch" &&
        frame.$unknown === undefined &&
        value.value.$unknown === undefined;
      const weight = container ? undefined : weighFrame(frame);
      if (weight !== undefined && value.case !== "batch")
        this.#metrics.frames("received", "control", 1, weight.wireBytes);
      const refused = weight === undefined ? undefined : frameRefusal(weight);
      if (refused !== undefined) {
        this.#protocolError(`the peer sent a ${frameKind(frame)} frame: ${refused}`);
        return;
      }
    }
    switch (value.case) {
      case "request":
      case "deltaRequest": {
        this.#received.requests++;
        if (this.#traceAgreed && frame.traceContext !== undefined)
          noteReceivedTrace(value.value, frame.traceContext, performance.now());
        const weight = this.#weigh(frame, "requests");
        if (!ended && weight !== undefined)
          this.#deliverOrFail(this.#serverInbox.deliver(value.value, weight.bytes, weight.memory));
        return;
      }
      case "response":
      case "deltaResponse": {
        this.#received.responses++;
        if (this.#traceAgreed && frame.traceContext !== undefined)
          noteReceivedTrace(value.value, frame.traceContext, performance.now());
        const weight = this.#weigh(frame, "responses");
        if (!ended && weight !== undefined)
          this.#deliverOrFail(this.#clientInbox.deliver(value.value, weight.bytes, weight.memory));
        return;
      }
      case "hello":
        this.#received.control++;
        this.#onHello(value.value);
        return;
      case "ping":
        this.#received.control++;
        this.#outbox.pong(value.value.id); // one pong slot: a flood of pings leaves one pong waiting, for the latest
        return;
      case "pong": {
        this.#received.control++;
        const sentAt = this.#pingSentAt?.get(value.value.id);
        if (sentAt !== undefined) {
          this.#rttMs = this.#now() - sentAt;
          this.#pingSentAt = undefined;
        }
        return;
      }
      case "windowUpdate":
        this.#received.control++;
        this.#deliverOrFail(
          this.#outbox.addCredit(
            value.value.requests,
            value.value.responses,
            value.value.requestBytes,
            value.value.responseBytes,
          ),
        );
        return;
      case "goaway": {
        this.#received.control++;
        const code = endCodeOfGoAway.get(value.value.reason) ?? "shutdown";
        this.#peerEndedStream = true;
        this.#finish(
          {
            code,
            message:
              value.value.message === ""
                ? `the peer ended the session (${code})`
                : value.value.message,
            initiator: "peer",
            graceful: gracefulCodes.has(code),
          },
          undefined,
        );
        return;
      }
      case "call": {
        const lane = callLane(value.value);
        this.#received[lane]++;
        const weight = this.#weigh(frame, lane);
        if (!ended && weight !== undefined)
          this.#deliverOrFail(this.#onCall(value.value, lane, weight.bytes));
        return;
      }
      case "batch":
        if (!this.#options.features.includes("batching")) {
          this.#protocolError(
            "the peer sent a batch, but this side's hello did not offer the batching feature",
          );
          return;
        }
        for (const inner of value.value.frames) {
          const kind = inner.value.case;
          if (
            kind !== "request" &&
            kind !== "deltaRequest" &&
            kind !== "response" &&
            kind !== "deltaResponse" &&
            kind !== "call"
          ) {
            this.#protocolError(
              `a batch may hold only requests, responses and calls, got ${frameKind(inner)}`,
            );
            return;
          }
          this.#dispatch(inner);
          if (this.#state.kind !== "open") return;
        }
        return;
      case undefined:
        this.#protocolError(
          "the peer sent a frame of a kind this version does not know; check that both sides run compatible kds-mux versions",
        );
        return;
    }
  }

  /**
   * `frame` (of `message`) with the trace context the layer above marked
   * `message` with, when the session agreed on `trace-context`; else
   * `frame` itself.
   */
  #traced(message: object, frame: Frame): Frame {
    if (!this.#traceAgreed) return frame;
    const context = outgoingTrace(message);
    return context === undefined ? frame : withTraceContext(frame, context);
  }

  /** What this side offers in its hello. */
  #offer(): HelloOffer {
    const o = this.#options;
    return {
      versions: o.protocolVersions,
      features: o.features,
      softwareVersion: o.softwareVersion,
    };
  }

  #onHello(
    hello: HelloNegotiationFields & {
      peerId: string;
      requestWindow: number;
      responseWindow: number;
      requestWindowBytes: number;
      responseWindowBytes: number;
      maxMessageBytes: number;
    },
  ): void {
    if (this.#state.kind !== "handshaking") {
      this.#protocolError("the peer sent a second hello");
      return;
    }
    const peerRole = this.role === "zone" ? "global" : "zone";
    const peerName = this.#expectedPeerId ?? hello.peerId;
    const negotiated = negotiate(this.#offer(), hello, {
      local: this.role,
      peer: peerName === "" ? peerRole : `${peerRole} "${peerName}"`,
    });
    if ("refusal" in negotiated) {
      this.#protocolError(negotiated.refusal);
      return;
    }
    const { agreement } = negotiated;
    const windows = helloWindowRefusal(hello);
    if (windows !== undefined) {
      this.#protocolError(windows);
      return;
    }
    if (this.#expectedPeerId !== undefined && hello.peerId !== this.#expectedPeerId) {
      this.#protocolError(
        `the peer named itself "${hello.peerId}" in its hello but was admitted as "${this.#expectedPeerId}"`,
      );
      return;
    }
    const peer: PeerSettings = {
      peerId: hello.peerId,
      requestWindow: hello.requestWindow,
      responseWindow: hello.responseWindow,
      requestWindowBytes: hello.requestWindowBytes,
      responseWindowBytes: hello.responseWindowBytes,
      maxMessageBytes: hello.maxMessageBytes,
      calls: agreement.features.includes("calls"),
      protocolVersions: agreement.peerVersions,
      softwareVersion: agreement.peerSoftwareVersion,
      protocolVersion: agreement.protocolVersion,
      features: agreement.features,
    };
    this.#expectedPeerId = hello.peerId;
    this.#traceAgreed = agreement.features.includes("trace-context");
    this.#state = transition(this.#state, { type: "hello", peer });
    this.#outbox.openLanes(
      { requests: peer.requestWindow, responses: peer.responseWindow },
      { requests: peer.requestWindowBytes, responses: peer.responseWindowBytes },
      peer.maxMessageBytes,
      agreement.features.includes("batching"),
    );
    this.#ping(this.#now()); // a first round trip right away, so status shows one from the start
    this.#metrics.sessionOpened(peer.peerId, peerVersion(peer));
    this.#ready?.resolve();
    this.#ready = undefined; // settled: a later failure leaves `ready` resolved, as rejecting a resolved promise would
  }

  /**
   * Hands a call frame to the session's call listener. The frame is checked
   * against its lane's credit and the credit is returned at once: the call
   * layer bounds what it keeps per call (its own window), so a slow caller
   * never holds up discovery traffic.
   */
  #onCall(call: Call, lane: Lane, bytes: number): KdsError | undefined {
    const overrun = (lane === "requests" ? this.#serverInbox : this.#clientInbox).pass(bytes);
    if (overrun !== undefined) return overrun;
    if (this.#callListener !== undefined) return this.#callListener(call);
    if (call.kind.case === "open") {
      // Nothing here serves calls: refuse, so the caller is not left waiting.
      const end = create(CallSchema, {
        id: call.id,
        kind: {
          case: "end",
          value: {
            error: `${this.role} "${this.localId}" serves no calls over the mux`,
            code: "unimplemented",
          },
        },
      });
      this.calls.send(end).catch(() => undefined); // fails only once the session has ended, when the caller fails anyway
    }
    return undefined;
  }

  #deliverOrFail(error: KdsError | undefined): void {
    if (error === undefined) return;
    if (error.code === "resource_exhausted") this.#resourceExhausted(error.message, error);
    else this.#protocolError(error.message, error);
  }

  #resourceExhausted(message: string, cause?: unknown): void {
    this.#finish(
      { code: "resource_exhausted", message, initiator: "local", graceful: false, cause },
      GoAwayReason.RESOURCE_EXHAUSTED,
    );
  }

  /** This session as a holder of the process's memory budget: when it holds the most of an exhausted budget, it ends. */
  #budgetMemory(budget: MemoryBudget): InboxMemory {
    const share = new BudgetShare(budget, this, (message) => this.#resourceExhausted(message));
    this.#forgetMemory = () => budget.releaseAll(share);
    return share;
  }

  /** Ends a session still without the peer's hello (goaway PROTOCOL_ERROR, `handshake_timeout`). */
  #handshakeTimeout(message: string): void {
    this.#finish(
      { code: "handshake_timeout", message, initiator: "local", graceful: false },
      GoAwayReason.PROTOCOL_ERROR,
    );
  }

  #protocolError(message: string, cause?: unknown): void {
    this.#finish(
      { code: "protocol_error", message, initiator: "local", graceful: false, cause },
      GoAwayReason.PROTOCOL_ERROR,
    );
  }

  #tick(): void {
    if (this.end !== undefined) return;
    const now = this.#now();
    const o = this.#options;
    if (this.#state.kind === "handshaking") {
      // Before the transport opened the stream, only the open is timed: a connection the peer has not accepted yet
      // (its listen queue, in a reconnect storm) keeps its place rather than being given up and dialed again.
      if (this.#attachedAt === undefined) {
        if (now - this.#startedAt > o.openTimeoutMs)
          this.#handshakeTimeout(
            `the transport did not open the stream within ${o.openTimeoutMs} ms (the peer did not accept the connection or answer the request); check that it is reachable and not overloaded`,
          );
        return;
      }
      if (now - this.#attachedAt > o.handshakeTimeoutMs) {
        this.#handshakeTimeout(
          `the peer sent no hello within ${o.handshakeTimeoutMs} ms; check that it runs kds-mux and is reachable`,
        );
        return;
      }
    }
    if (now - this.#lastHeard > o.heartbeatTimeoutMs) {
      this.#finish(
        {
          code: "heartbeat_timeout",
          message: `nothing heard from the peer for ${Math.round(now - this.#lastHeard)} ms (timeout ${o.heartbeatTimeoutMs} ms); the connection is presumed dead`,
          initiator: "local",
          graceful: false,
        },
        GoAwayReason.HEARTBEAT_TIMEOUT,
      );
      return;
    }
    const waitingSince = this.#outbox.oldestWaitingSince();
    if (waitingSince !== undefined && now - waitingSince > o.sendTimeoutMs) {
      this.#finish(
        {
          code: "send_timeout",
          message: `a frame waited ${Math.round(now - waitingSince)} ms to be sent (timeout ${o.sendTimeoutMs} ms): the peer stopped consuming or the connection is stuck`,
          initiator: "local",
          graceful: false,
        },
        GoAwayReason.SEND_TIMEOUT,
      );
      return;
    }
    if (
      this.#state.kind === "open" &&
      pingDue(now, this.#lastPingAt, this.#lastHeard, o.heartbeatIntervalMs)
    )
      this.#ping(now);
  }

  #ping(now: number): void {
    const id = this.#nextPingId++;
    this.#lastPingAt = now;
    if (this.#pingSentAt === undefined || this.#pingSentAt.size > 16) this.#pingSentAt = new Map();
    this.#pingSentAt.set(id, now);
    this.#outbox.ping(id);
  }

  /** Decides the session's end (first reason wins) and starts winding down. */
  #finish(end: SessionEnd, goaway: GoAwayReason | undefined, reconnectTo = ""): void {
    const before = this.#state;
    this.#state = transition(before, { type: "end", end });
    if (this.#state === before) return;
    if (before.kind === "open")
      this.#metrics.sessionClosed(before.peer.peerId, end.code, peerVersion(before.peer));
    const error = new KdsError(
      "session_closed",
      `the session has ended (${end.code}): ${end.message}`,
      { cause: end },
    );
    // A failed session drops what it buffered at once (frees its memory budget); a deliberate end hands it out first.
    this.#serverInbox.close(error, end.graceful);
    this.#clientInbox.close(error, end.graceful);
    // Both inboxes gave back what they held: the budget forgets this session.
    this.#forgetMemory?.();
    this.#ready?.reject(error);
    this.#ready = undefined;
    // Answer nothing to a peer that already ended its side; tell any other peer why.
    const sendGoAway = goaway !== undefined && !this.#peerEndedStream && end.initiator === "local";
    this.#outbox.finish(
      error,
      sendGoAway
        ? { case: "goaway", value: { reason: goaway, message: end.message, reconnectTo } }
        : undefined,
    );
    this.#stopTick?.();
    this.#stopTick = undefined;
    this.#graceTimer = setTimeout(() => this.#release(), this.#options.closeGraceMs);
    this.#resolveClosed(end);
    this.#abort.abort(error);
    if (!this.#outboundUsed) this.#outboundDone = true;
    this.#maybeRelease();
  }

  #outboundFinished(): void {
    this.#outboundDone = true;
    this.#maybeRelease();
  }

  #maybeRelease(): void {
    if (this.end !== undefined && this.#inboundDone && this.#outboundDone) this.#release();
  }

  #release(): void {
    if (this.#state.kind === "closed") return;
    if (this.#state.kind !== "ending") {
      // The transport went away before the session ended (cannot happen through
      // #finish, which always runs first); end it as a transport failure.
      this.fail("transport", "the transport was released while the session was open");
      return;
    }
    this.#state = transition(this.#state, { type: "released" });
    if (this.#graceTimer !== undefined) clearTimeout(this.#graceTimer);
    this.#transportAbort?.abort(this.#abort.signal.reason);
    const onReleased = this.#onReleased;
    this.#onReleased = undefined;
    onReleased?.();
    this.#released?.resolve();
  }
}

/**
 * A session's share of the process's memory budget: its holder there, and
 * what its inboxes reserve and release through. A class: an object literal
 * with a getter was a property dictionary of about 250 bytes per session,
 * besides the closures around it.
 */
class BudgetShare implements BudgetHolder, InboxMemory {
  readonly #budget: MemoryBudget;
  readonly #session: { readonly peerId: string };
  readonly evict: (message: string) => void;

  constructor(
    budget: MemoryBudget,
    session: { readonly peerId: string },
    evict: (message: string) => void,
  ) {
    this.#budget = budget;
    this.#session = session;
    this.evict = evict;
  }

  get name(): string {
    return this.#session.peerId === "" ? "(peer not yet named)" : this.#session.peerId;
  }

  reserve(bytes: number): string | undefined {
    return this.#budget.reserve(this, bytes);
  }

  release(bytes: number): void {
    this.#budget.release(this, bytes);
  }
}

/** What metrics record of a peer: the session's protocol version and features, and the peer's software version. */
function peerVersion(peer: PeerSettings): {
  protocolVersion: number;
  softwareVersion: string;
  features: readonly string[];
} {
  return {
    protocolVersion: peer.protocolVersion,
    softwareVersion: peer.softwareVersion,
    features: peer.features,
  };
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * A side pings at most once per heartbeat interval, and only when it needs
 * to: when it has heard nothing from the peer for an interval (the peer's
 * own pings, its pongs and any other frame all count), or when its last ping
 * is {@link RTT_REFRESH_INTERVALS} intervals old (its round-trip time stays
 * fresh). Two sides that both ping every interval send twice the frames a
 * liveness check needs: each side's pings alone prove the peer alive to both.
 */
function pingDue(now: number, lastPingAt: number, lastHeard: number, intervalMs: number): boolean {
  const sincePing = now - lastPingAt;
  if (sincePing < intervalMs) return false;
  return now - lastHeard >= intervalMs || sincePing >= RTT_REFRESH_INTERVALS * intervalMs;
}

/** However often the peer is heard, a side pings at least every this many heartbeat intervals (for its round-trip time). */
const RTT_REFRESH_INTERVALS = 4;
