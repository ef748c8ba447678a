/**
 * The send side of a session: the one place frames leave from. The transport
 * pulls frames one at a time through {@link Outbox.frames}, so there is exactly
 * one writer however many tasks call `send` on the two views.
 *
 * Control frames have fixed slots and always go first (hello, goaway, pong,
 * window update, ping): they are never queued behind bulk data, and each has
 * one slot (a newer pong, ping or grant replaces or adds to the waiting one),
 * so a peer's ping flood queues at most one pong. Data frames wait in one
 * bounded queue per lane. A send is *accepted* (its promise resolves) as soon
 * as the peer's window for that lane has room for it, in frames and in bytes
 * (its credit size, the encoded length); the frame then leaves in order. Sends beyond the window wait, so a slow
 * consumer on the other side slows only its own lane. When several accepted
 * frames are ready and the peer supports it, they leave together in one
 * batch frame.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { KdsError, abortError } from "../errors.ts";
import { BatchSchema, FrameSchema, type Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import { Ring } from "../util/ring.ts";
import { creditSize } from "./frame-size.ts";
import { controlFrame, type FrameValueInit, type Lane } from "./frames.ts";
import { MAX_WINDOW } from "./options.ts";
import type { WrittenFrames } from "./frame-push.ts";
import { OutboundFrames, type FrameSource } from "./outbound-frames.ts";
import { isAborted } from "../util/abort.ts";

interface PendingSend {
  readonly frame: Frame;
  /** Encoded size: what it takes from the lane's byte window (its credit size). */
  readonly bytes: number;
  readonly enqueuedAt: number;
  resolve(): void;
  reject(reason: unknown): void;
  readonly signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

/** Counters of what left through the outbox. */
export interface OutboxCounters {
  /** Request frames handed to the transport (inside batches or alone). */
  requests: number;
  /** Response frames handed to the transport (inside batches or alone). */
  responses: number;
  /** Control frames handed to the transport. */
  control: number;
  /** Batch frames handed to the transport. */
  batches: number;
}

/** What an offered frame (accepted at once, see `Outbox.offer`) is told of its acceptance: nobody waits for it. */
const NOTHING = (): void => undefined;

/** Most data frames one batch carries. */
const MAX_BATCH_FRAMES = 128;
/** Most bytes one batch carries (also bounded by the peer's limit). */
const MAX_BATCH_BYTES = 1024 * 1024;

/** What the outbox keeps per lane: plain fields, so a window update allocates nothing. */
class LaneState {
  /** The sends, accepted ones first. */
  readonly queue: Ring<PendingSend>;
  /** Window left, after what was accepted. */
  credit = 0;
  /** Byte window left, after what was accepted (unbounded for a peer that grants no bytes). */
  creditBytes = 0;
  /** The peer's whole byte window: a frame larger than it can never be sent. */
  windowBytes = Number.POSITIVE_INFINITY;
  /** How many frames at the head of the queue are accepted (their send resolved). */
  accepted = 0;
  /** Credit queued for the peer, in frames and bytes. */
  grant = 0;
  grantBytes = 0;
  /** Since when sends have waited for credit, or undefined. */
  waitingForCredit: number | undefined = undefined;

  constructor(capacity: number) {
    this.queue = new Ring(capacity);
  }
}

/** Whether the lane's window has room for one more frame of `bytes`, in frames and in bytes. */
function fits(state: LaneState, bytes: number): boolean {
  return state.credit > 0 && state.creditBytes >= bytes;
}

/** Takes `pending`'s frame and bytes from the lane's window and resolves its send. */
function accept(state: LaneState, pending: PendingSend): void {
  state.credit--;
  state.creditBytes -= pending.bytes;
  state.accepted++;
  pending.onAbort = undefined;
  pending.resolve();
}

/** The single writer of a session. */
export class Outbox implements FrameSource {
  readonly #now: () => number;
  readonly #requests: LaneState;
  readonly #responses: LaneState;
  #hello: Frame | undefined;
  #goaway: Frame | undefined;
  #pongId: bigint | undefined;
  #pingId: bigint | undefined;
  #controlPendingSince: number | undefined;
  #nextLane: Lane = "requests";
  /**
   * The transport's waiting frames: their `retry` pulls again, hands over
   * what is there and returns true when a frame (or the end) was. Retried from
   * a microtask after each signal, as a waker's promise would, without the
   * promise and the `then` each wait cost (every frame of every session waits here).
   */
  #waiting: OutboundFrames | undefined;
  #retryQueued = false;
  #ended = false;
  #peerMaxBytes = Number.POSITIVE_INFINITY;
  #batching = false;
  readonly #maxQueued: number;
  readonly #onCreditWait: (lane: Lane, ms: number) => void;
  readonly #onSent: (lane: Lane | "control", bytes: number) => void;
  /** What left so far. */
  readonly counters: OutboxCounters = { requests: 0, responses: 0, control: 0, batches: 0 };

  /**
   * @param maxQueuedSends - how many sends may wait beyond the window, per lane
   * @param now - monotonic clock in milliseconds
   * @param maxWindow - the largest window a peer may grant per lane (bounds the accepted frames)
   * @param onCreditWait - told how long a lane's sends waited for credit, when the wait ends
   * @param onSent - told of every frame handed to the transport, a batch as each frame it holds, with its encoded size
   */
  constructor(
    maxQueuedSends: number,
    now: () => number,
    maxWindow = MAX_WINDOW,
    onCreditWait: (lane: Lane, ms: number) => void = () => undefined,
    onSent: (lane: Lane | "control", bytes: number) => void = () => undefined,
  ) {
    this.#now = now;
    this.#onCreditWait = onCreditWait;
    this.#onSent = onSent;
    this.#requests = new LaneState(maxQueuedSends + maxWindow);
    this.#responses = new LaneState(maxQueuedSends + maxWindow);
    this.#maxQueued = maxQueuedSends;
  }

  #lane(lane: Lane): LaneState {
    return lane === "requests" ? this.#requests : this.#responses;
  }

  /** Queues this side's hello; it leaves before anything else. */
  setHello(frame: Frame): void {
    this.#hello = frame;
    this.#controlQueued();
  }

  /**
   * Applies the peer's settings: initial windows (frames, and bytes where the
   * peer grants bytes), largest frame, batch support.
   */
  openLanes(
    window: Record<Lane, number>,
    windowBytes: Record<Lane, number>,
    peerMaxBytes: number,
    batching = false,
  ): void {
    this.#peerMaxBytes = peerMaxBytes;
    this.#batching = batching;
    for (const lane of ["requests", "responses"] as const) {
      const state = this.#lane(lane);
      state.credit += window[lane];
      state.windowBytes = windowBytes[lane];
      state.creditBytes += state.windowBytes;
    }
    this.#acceptWaiting();
    this.#signal();
  }

  /** Adds window the peer granted, in frames and bytes. Returns an error when it overflows. */
  addCredit(
    requests: number,
    responses: number,
    requestBytes = 0,
    responseBytes = 0,
  ): KdsError | undefined {
    const r = this.#requests;
    const s = this.#responses;
    r.credit += requests;
    s.credit += responses;
    r.creditBytes += requestBytes;
    s.creditBytes += responseBytes;
    if (r.credit > 2 ** 31 || s.credit > 2 ** 31) {
      return new KdsError(
        "protocol_error",
        "peer granted more than 2^31 frames of window; a conforming peer grants only what its views consumed",
      );
    }
    if (r.creditBytes > 2 ** 40 || s.creditBytes > 2 ** 40) {
      return new KdsError(
        "protocol_error",
        "peer granted more than 2^40 bytes of window; a conforming peer grants only what its views consumed",
      );
    }
    this.#acceptWaiting();
    this.#signal();
    return undefined;
  }

  /** Queues credit for the peer, `frames` frames and `bytes` bytes (coalesced into one window update). */
  grant(lane: Lane, frames: number, bytes: number): void {
    if (this.#ended || this.#goaway !== undefined) return;
    const state = this.#lane(lane);
    state.grant += frames;
    state.grantBytes += bytes;
    this.#controlQueued();
  }

  /** Queues a ping (at most one waits at a time). */
  ping(id: bigint): void {
    if (this.#ended || this.#goaway !== undefined) return;
    this.#pingId = id;
    this.#controlQueued();
  }

  /** Queues a pong answering ping `id` (only the latest ping is answered). */
  pong(id: bigint): void {
    if (this.#ended || this.#goaway !== undefined) return;
    this.#pongId = id;
    this.#controlQueued();
  }

  /**
   * Queues `frame` on `lane`. Resolves once the frame is within the peer's
   * window (it then leaves in order); rejects when the frame is too large for
   * the peer, too many sends already wait, `signal` aborts first, or the
   * session ends first.
   */
  send(lane: Lane, frame: Frame, signal?: AbortSignal): Promise<void> {
    if (this.#ended || this.#goaway !== undefined) {
      return Promise.reject(
        new KdsError("session_closed", "the session has ended; wait for the next session to send"),
      );
    }
    if (isAborted(signal)) return Promise.reject(abortError(signal as AbortSignal, "send"));
    const bytes = creditSize(frame);
    if (bytes > this.#peerMaxBytes) {
      return Promise.reject(
        new KdsError(
          "message_too_large",
          `a ${lane === "requests" ? "request" : "response"} of ${bytes} bytes exceeds the ${this.#peerMaxBytes} bytes the peer accepts; split it into smaller messages (the session goes on)`,
        ),
      );
    }
    const state = this.#lane(lane);
    if (bytes > state.windowBytes) return Promise.reject(this.#tooLargeForWindow(lane, bytes));
    const queue = state.queue;
    if (queue.size - state.accepted >= this.#maxQueued) {
      return Promise.reject(
        new KdsError(
          "send_queue_full",
          `${this.#maxQueued} sends already wait on the ${lane} lane; await each send before the next, or raise maxQueuedSends`,
        ),
      );
    }
    return new Promise<void>((resolve, reject) => {
      const pending: PendingSend = {
        frame,
        bytes,
        enqueuedAt: this.#now(),
        resolve,
        reject,
        signal,
        onAbort: undefined,
      };
      queue.push(pending);
      if (fits(state, pending.bytes) && state.accepted === queue.size - 1) {
        accept(state, pending);
      } else {
        if (!fits(state, pending.bytes)) state.waitingForCredit ??= pending.enqueuedAt;
        if (signal !== undefined) {
          pending.onAbort = () => {
            if (queue.remove((p) => p === pending)) reject(abortError(signal, "send"));
            if (state.accepted === queue.size) this.#creditWaitEnded(lane);
          };
          signal.addEventListener("abort", pending.onAbort, { once: true });
        }
      }
      this.#signal();
    });
  }

  /**
   * {@link Outbox.send} without a promise, when it can be done at once:
   * `frame` fits the peer's window on `lane`, nothing on that lane waits
   * before it, and the session goes on. It is then accepted and, where the
   * transport takes pushed frames and can take more, handed to it before this
   * returns, not from a later microtask: a change wakes every zone's stream
   * in one run of microtasks, and a frame left for a microtask queued behind
   * all of them lived, with what it holds, until the last was composed.
   * Returns false, having done nothing, in every other case: `send` it then.
   */
  offer(lane: Lane, frame: Frame, signal?: AbortSignal): boolean {
    if (this.#ended || this.#goaway !== undefined || isAborted(signal)) return false;
    const state = this.#lane(lane);
    const queue = state.queue;
    if (queue.size > 0) return false;
    const bytes = creditSize(frame);
    if (bytes > this.#peerMaxBytes || !fits(state, bytes)) return false;
    const pending: PendingSend = {
      frame,
      bytes,
      enqueuedAt: this.#now(), // the send timeout's clock, should the transport not take it at once
      resolve: NOTHING,
      reject: NOTHING,
      signal: undefined,
      onAbort: undefined,
    };
    queue.push(pending);
    accept(state, pending);
    if (this.#waiting !== undefined) this.#retryPull();
    return true;
  }

  /**
   * Stops taking data: every send not yet accepted rejects with `error`,
   * accepted frames not yet sent are dropped, then `goaway` (if given) is the
   * last frame to leave. Without a goaway the frame stream ends at once,
   * after this side's hello if the transport has not taken it yet.
   */
  finish(error: KdsError, goaway?: FrameValueInit): void {
    if (this.#goaway !== undefined || this.#ended) return;
    for (const lane of ["requests", "responses"] as const) {
      const state = this.#lane(lane);
      const accepted = state.accepted;
      state.accepted = 0;
      state.grant = 0;
      state.grantBytes = 0;
      state.queue.drain().forEach((pending, i) => {
        if (i < accepted) return;
        if (pending.onAbort !== undefined)
          pending.signal?.removeEventListener("abort", pending.onAbort);
        pending.reject(error);
      });
      this.#creditWaitEnded(lane);
    }
    this.#pingId = undefined;
    this.#pongId = undefined;
    if (goaway === undefined) this.#ended = true;
    else {
      this.#goaway = controlFrame(goaway);
      this.#controlQueued();
    }
    this.#signal();
  }

  /** Since when the oldest frame has waited to leave, or undefined when nothing waits. Drives the send timeout. */
  oldestWaitingSince(): number | undefined {
    let oldest = this.#controlPendingSince;
    for (const lane of ["requests", "responses"] as const) {
      const head = this.#lane(lane).queue.peek();
      if (head !== undefined && (oldest === undefined || head.enqueuedAt < oldest))
        oldest = head.enqueuedAt;
    }
    return oldest;
  }

  /**
   * The frames to write, pulled by the transport one at a time or pushed to
   * its writer. Ends after the goaway. When the transport stops pulling (the
   * end, or `return`), nothing more leaves, and `onEnd` runs.
   */
  frames(onEnd?: () => void): AsyncIterableIterator<Frame> & WrittenFrames {
    return new OutboundFrames(this, onEnd);
  }

  /** The next frame for {@link OutboundFrames}: a frame, "end" once the frames are over, or undefined when nothing is ready. */
  take(): Frame | "end" | undefined {
    return this.#take();
  }

  /** Has `frames.retry()` run a microtask after each change until it returns true (see {@link OutboundFrames}). */
  wait(frames: OutboundFrames): void {
    this.#waiting = frames;
  }

  /** Stops calling `frames.retry()`, if it is the one waiting. */
  unwait(frames: OutboundFrames): void {
    if (this.#waiting === frames) this.#waiting = undefined;
  }

  /** Something may be ready for the waiting frames. */
  changed(): void {
    this.#signal();
  }

  /** The transport stopped taking frames: nothing more leaves. */
  stopped(): void {
    // After the session's own end (the usual way here) finish would do nothing: build no error for it.
    if (!this.#ended && this.#goaway === undefined)
      this.finish(
        new KdsError(
          "session_closed",
          "the transport stopped taking frames; the session has ended",
        ),
      );
    this.#ended = true;
  }

  /** Accepts waiting sends in order while their lanes have window; refuses those larger than the peer's whole byte window. */
  #acceptWaiting(): void {
    for (const lane of ["requests", "responses"] as const) {
      const state = this.#lane(lane);
      const queue = state.queue;
      while (state.accepted < queue.size) {
        const pending = queue.at(state.accepted) as PendingSend;
        const tooLarge = pending.bytes > state.windowBytes;
        if (!tooLarge && !fits(state, pending.bytes)) break;
        if (pending.onAbort !== undefined)
          pending.signal?.removeEventListener("abort", pending.onAbort);
        if (tooLarge) {
          queue.remove((p) => p === pending);
          pending.reject(this.#tooLargeForWindow(lane, pending.bytes));
        } else accept(state, pending);
      }
      if (state.accepted === queue.size) this.#creditWaitEnded(lane);
    }
  }

  #tooLargeForWindow(lane: Lane, credit: number): KdsError {
    return new KdsError(
      "message_too_large",
      `a ${lane === "requests" ? "request" : "response"} of credit size ${credit} bytes exceeds the whole byte window of ${this.#lane(lane).windowBytes} the peer grants on that lane; split it into smaller messages (the session goes on)`,
    );
  }

  /** Reports the wait for credit on `lane` once nothing on it waits any more. */
  #creditWaitEnded(lane: Lane): void {
    const state = this.#lane(lane);
    const since = state.waitingForCredit;
    if (since === undefined) return;
    state.waitingForCredit = undefined;
    this.#onCreditWait(lane, this.#now() - since);
  }

  #take(): Frame | "end" | undefined {
    // The hello leaves first even when the session ended before the transport took it (a peer that sent its hello
    // and ended its direction at once, both read in one event): every stream this side writes opens with its hello.
    if (this.#hello !== undefined) {
      const hello = this.#hello;
      this.#hello = undefined;
      return this.#tookControl(hello);
    }
    if (this.#ended) return "end";
    if (this.#goaway !== undefined) {
      this.#ended = true;
      return this.#tookControl(this.#goaway);
    }
    if (this.#pongId !== undefined) {
      const id = this.#pongId;
      this.#pongId = undefined;
      return this.#tookControl(controlFrame({ case: "pong", value: { id } }));
    }
    const r = this.#requests;
    const s = this.#responses;
    if (r.grant > 0 || s.grant > 0) {
      const value = {
        requests: r.grant,
        responses: s.grant,
        requestBytes: r.grantBytes,
        responseBytes: s.grantBytes,
      };
      r.grant = r.grantBytes = s.grant = s.grantBytes = 0;
      return this.#tookControl(controlFrame({ case: "windowUpdate", value }));
    }
    if (this.#pingId !== undefined) {
      const id = this.#pingId;
      this.#pingId = undefined;
      return this.#tookControl(controlFrame({ case: "ping", value: { id } }));
    }
    const first = this.#takeData();
    if (first === undefined || !this.#batching) return first?.frame;
    const limit = Math.min(this.#peerMaxBytes - 64, MAX_BATCH_BYTES);
    const frames = [first.frame];
    let bytes = first.bytes;
    for (;;) {
      const next = this.#peekData();
      if (next === undefined || frames.length >= MAX_BATCH_FRAMES || bytes + next.bytes + 6 > limit)
        break;
      this.#takeData();
      frames.push(next.frame);
      bytes += next.bytes + 6;
    }
    if (frames.length === 1) return first.frame;
    this.counters.batches++;
    return create(FrameSchema, {
      value: { case: "batch", value: create(BatchSchema, { frames }) },
    });
  }

  /** The accepted frame that would leave next (lanes take turns). */
  #peekData(): PendingSend | undefined {
    const first = this.#nextLane;
    const second: Lane = first === "requests" ? "responses" : "requests";
    for (const lane of [first, second])
      if (this.#lane(lane).accepted > 0) return this.#lane(lane).queue.peek();
    return undefined;
  }

  #takeData(): PendingSend | undefined {
    const first = this.#nextLane;
    const second: Lane = first === "requests" ? "responses" : "requests";
    for (const lane of [first, second]) {
      const state = this.#lane(lane);
      if (state.accepted === 0) continue;
      const pending = state.queue.shift() as PendingSend;
      state.accepted--;
      this.counters[lane]++;
      this.#onSent(lane, pending.bytes);
      this.#nextLane = second === lane ? first : second;
      return pending;
    }
    return undefined;
  }

  #tookControl(frame: Frame): Frame {
    this.counters.control++;
    this.#onSent("control", creditSize(frame));
    if (
      this.#hello === undefined &&
      this.#pongId === undefined &&
      this.#pingId === undefined &&
      this.#requests.grant === 0 &&
      this.#responses.grant === 0
    ) {
      this.#controlPendingSince = undefined;
    }
    return frame;
  }

  #controlQueued(): void {
    this.#controlPendingSince ??= this.#now();
    this.#signal();
  }

  /** Tells the transport's waiting `next` (if any) that something changed: it pulls again a microtask later. */
  #signal(): void {
    if (this.#waiting === undefined || this.#retryQueued) return;
    this.#retryQueued = true;
    queueMicrotask(this.#retryPull);
  }

  readonly #retryPull = (): void => {
    this.#retryQueued = false;
    if (this.#waiting?.retry() === true) this.#waiting = undefined;
  };
}
