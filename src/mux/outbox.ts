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

/** The single writer of a session. */
export class Outbox implements FrameSource {
  readonly #now: () => number;
  readonly #lanes: Record<Lane, Ring<PendingSend>>;
  /** Window left per lane, after what was accepted. */
  readonly #credit: Record<Lane, number> = { requests: 0, responses: 0 };
  /** Byte window left per lane, after what was accepted (unbounded for a peer that grants no bytes). */
  readonly #creditBytes: Record<Lane, number> = { requests: 0, responses: 0 };
  /** The peer's whole byte window per lane: a frame larger than it can never be sent. */
  readonly #windowBytes: Record<Lane, number> = {
    requests: Number.POSITIVE_INFINITY,
    responses: Number.POSITIVE_INFINITY,
  };
  /** How many frames at the head of each lane's queue are accepted (their send resolved). */
  readonly #accepted: Record<Lane, number> = { requests: 0, responses: 0 };
  #hello: Frame | undefined;
  #goaway: Frame | undefined;
  #pongId: bigint | undefined;
  #pingId: bigint | undefined;
  #grant: Record<Lane, number> = { requests: 0, responses: 0 };
  #grantBytes: Record<Lane, number> = { requests: 0, responses: 0 };
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
  /** Since when each lane has had sends waiting for credit, or undefined. */
  readonly #waitingForCredit: Record<Lane, number | undefined> = {
    requests: undefined,
    responses: undefined,
  };
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
    this.#lanes = {
      requests: new Ring(maxQueuedSends + maxWindow),
      responses: new Ring(maxQueuedSends + maxWindow),
    };
    this.#maxQueued = maxQueuedSends;
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
      this.#credit[lane] += window[lane];
      this.#windowBytes[lane] = windowBytes[lane];
      this.#creditBytes[lane] += this.#windowBytes[lane];
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
    this.#credit.requests += requests;
    this.#credit.responses += responses;
    this.#creditBytes.requests += requestBytes;
    this.#creditBytes.responses += responseBytes;
    if (this.#credit.requests > 2 ** 31 || this.#credit.responses > 2 ** 31) {
      return new KdsError(
        "protocol_error",
        "peer granted more than 2^31 frames of window; a conforming peer grants only what its views consumed",
      );
    }
    if (this.#creditBytes.requests > 2 ** 40 || this.#creditBytes.responses > 2 ** 40) {
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
    this.#grant[lane] += frames;
    this.#grantBytes[lane] += bytes;
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
    if (bytes > this.#windowBytes[lane])
      return Promise.reject(this.#tooLargeForWindow(lane, bytes));
    const queue = this.#lanes[lane];
    if (queue.size - this.#accepted[lane] >= this.#maxQueued) {
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
      if (this.#fits(lane, pending.bytes) && this.#accepted[lane] === queue.size - 1) {
        this.#accept(lane, pending);
      } else {
        if (!this.#fits(lane, pending.bytes)) this.#waitingForCredit[lane] ??= pending.enqueuedAt;
        if (signal !== undefined) {
          pending.onAbort = () => {
            if (queue.remove((p) => p === pending)) reject(abortError(signal, "send"));
            if (this.#accepted[lane] === queue.size) this.#creditWaitEnded(lane);
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
    const queue = this.#lanes[lane];
    if (queue.size > 0) return false;
    const bytes = creditSize(frame);
    if (bytes > this.#peerMaxBytes || !this.#fits(lane, bytes)) return false;
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
    this.#accept(lane, pending);
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
      const accepted = this.#accepted[lane];
      this.#accepted[lane] = 0;
      this.#lanes[lane].drain().forEach((pending, i) => {
        if (i < accepted) return;
        if (pending.onAbort !== undefined)
          pending.signal?.removeEventListener("abort", pending.onAbort);
        pending.reject(error);
      });
      this.#creditWaitEnded(lane);
    }
    this.#pingId = undefined;
    this.#pongId = undefined;
    this.#grant = { requests: 0, responses: 0 };
    this.#grantBytes = { requests: 0, responses: 0 };
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
      const head = this.#lanes[lane].peek();
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
      const queue = this.#lanes[lane];
      while (this.#accepted[lane] < queue.size) {
        const pending = queue.at(this.#accepted[lane]) as PendingSend;
        const tooLarge = pending.bytes > this.#windowBytes[lane];
        if (!tooLarge && !this.#fits(lane, pending.bytes)) break;
        if (pending.onAbort !== undefined)
          pending.signal?.removeEventListener("abort", pending.onAbort);
        if (tooLarge) {
          queue.remove((p) => p === pending);
          pending.reject(this.#tooLargeForWindow(lane, pending.bytes));
        } else this.#accept(lane, pending);
      }
      if (this.#accepted[lane] === queue.size) this.#creditWaitEnded(lane);
    }
  }

  /** Whether the lane's window has room for one more frame of `bytes`, in frames and in bytes. */
  #fits(lane: Lane, bytes: number): boolean {
    return this.#credit[lane] > 0 && this.#creditBytes[lane] >= bytes;
  }

  #tooLargeForWindow(lane: Lane, credit: number): KdsError {
    return new KdsError(
      "message_too_large",
      `a ${lane === "requests" ? "request" : "response"} of credit size ${credit} bytes exceeds the whole byte window of ${this.#windowBytes[lane]} the peer grants on that lane; split it into smaller messages (the session goes on)`,
    );
  }

  /** Reports the wait for credit on `lane` once nothing on it waits any more. */
  #creditWaitEnded(lane: Lane): void {
    const since = this.#waitingForCredit[lane];
    if (since === undefined) return;
    this.#waitingForCredit[lane] = undefined;
    this.#onCreditWait(lane, this.#now() - since);
  }

  #accept(lane: Lane, pending: PendingSend): void {
    this.#credit[lane]--;
    this.#creditBytes[lane] -= pending.bytes;
    this.#accepted[lane]++;
    pending.onAbort = undefined;
    pending.resolve();
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
    if (this.#grant.requests > 0 || this.#grant.responses > 0) {
      const { requests, responses } = this.#grant;
      const { requests: requestBytes, responses: responseBytes } = this.#grantBytes;
      this.#grant = { requests: 0, responses: 0 };
      this.#grantBytes = { requests: 0, responses: 0 };
      return this.#tookControl(
        controlFrame({
          case: "windowUpdate",
          value: { requests, responses, requestBytes, responseBytes },
        }),
      );
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
      if (this.#accepted[lane] > 0) return this.#lanes[lane].peek();
    return undefined;
  }

  #takeData(): PendingSend | undefined {
    const first = this.#nextLane;
    const second: Lane = first === "requests" ? "responses" : "requests";
    for (const lane of [first, second]) {
      if (this.#accepted[lane] === 0) continue;
      const pending = this.#lanes[lane].shift() as PendingSend;
      this.#accepted[lane]--;
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
      this.#grant.requests === 0 &&
      this.#grant.responses === 0
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
