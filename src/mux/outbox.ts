/**
 * The send side of a session: the one place frames leave from. The transport
 * pulls frames one at a time through {@link Outbox.frames}, so there is exactly
 * one writer however many tasks call `send` on the two views.
 *
 * Control frames have fixed slots and always go first (hello, goaway, pong,
 * window update, ping): they are never queued behind bulk data. Data frames
 * wait in one bounded queue per lane and leave only while the peer has granted
 * credit for that lane; the two lanes take turns.
 *
 * @module
 */
import { toBinary } from "@bufbuild/protobuf";
import { KdsError, abortError } from "../errors.ts";
import { MessageSchema, type Message } from "../gen/kds/mux/v1/mux_pb.ts";
import { Ring } from "../util/ring.ts";
import { controlFrame, frameSizeBound, type FrameValueInit, type Lane } from "./frames.ts";

interface PendingSend {
  frame: Message;
  enqueuedAt: number;
  resolve(): void;
  reject(reason: unknown): void;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

/** Counters of what left through the outbox. */
export interface OutboxCounters {
  /** Data frames handed to the transport, per lane. */
  requests: number;
  /** Data frames handed to the transport, per lane. */
  responses: number;
  /** Control frames handed to the transport. */
  control: number;
}

/** The single writer of a session. */
export class Outbox {
  readonly #now: () => number;
  readonly #lanes: Record<Lane, Ring<PendingSend>>;
  readonly #credit: Record<Lane, number> = { requests: 0, responses: 0 };
  #hello: Message | undefined;
  #goaway: Message | undefined;
  #pongId: bigint | undefined;
  #pingId: bigint | undefined;
  #grant: Record<Lane, number> = { requests: 0, responses: 0 };
  #controlPendingSince: number | undefined;
  #nextLane: Lane = "requests";
  #wake: (() => void) | undefined;
  #ended = false;
  #peerMaxBytes = Number.POSITIVE_INFINITY;
  /** What left so far. */
  readonly counters: OutboxCounters = { requests: 0, responses: 0, control: 0 };

  /**
   * @param maxQueuedSends - bound of each lane's queue
   * @param now - monotonic clock in milliseconds
   */
  constructor(maxQueuedSends: number, now: () => number) {
    this.#now = now;
    this.#lanes = { requests: new Ring(maxQueuedSends), responses: new Ring(maxQueuedSends) };
  }

  /** Queues this side's hello; it leaves before anything else. */
  setHello(frame: Message): void {
    this.#hello = frame;
    this.#controlQueued();
  }

  /** Applies the peer's settings: initial credit and the largest frame it accepts. */
  openLanes(requestWindow: number, responseWindow: number, peerMaxBytes: number): void {
    this.#credit.requests += requestWindow;
    this.#credit.responses += responseWindow;
    this.#peerMaxBytes = peerMaxBytes;
    this.#signal();
  }

  /** Adds credit the peer granted through a window update. Returns an error when it overflows. */
  addCredit(requests: number, responses: number): KdsError | undefined {
    this.#credit.requests += requests;
    this.#credit.responses += responses;
    if (this.#credit.requests > 2 ** 31 || this.#credit.responses > 2 ** 31) {
      return new KdsError("protocol_error", "peer granted more than 2^31 frames of window; a conforming peer grants only what its views consumed");
    }
    this.#signal();
    return undefined;
  }

  /** Queues credit for the peer (coalesced into one window update). */
  grant(lane: Lane, credit: number): void {
    if (this.#ended || this.#goaway !== undefined) return;
    this.#grant[lane] += credit;
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
   * Queues `frame` on `lane`. Resolves when the transport has taken the frame;
   * rejects when the frame is too large for the peer, the lane's queue is full,
   * `signal` aborts, or the session ends first.
   */
  send(lane: Lane, frame: Message, signal?: AbortSignal): Promise<void> {
    if (this.#ended || this.#goaway !== undefined) {
      return Promise.reject(new KdsError("session_closed", "the session has ended; wait for the next session to send"));
    }
    if (signal?.aborted) return Promise.reject(abortError(signal, "send"));
    if (Number.isFinite(this.#peerMaxBytes) && (frameSizeBound(frame) ?? Number.POSITIVE_INFINITY) > this.#peerMaxBytes) {
      const size = toBinary(MessageSchema, frame).byteLength;
      if (size > this.#peerMaxBytes) {
        return Promise.reject(
          new KdsError(
            "message_too_large",
            `a ${lane === "requests" ? "request" : "response"} of ${size} bytes exceeds the ${this.#peerMaxBytes} bytes the peer accepts; split it into smaller messages (the session goes on)`,
          ),
        );
      }
    }
    return new Promise<void>((resolve, reject) => {
      const pending: PendingSend = { frame, enqueuedAt: this.#now(), resolve, reject, signal, onAbort: undefined };
      if (!this.#lanes[lane].push(pending)) {
        reject(
          new KdsError(
            "send_queue_full",
            `${this.#lanes[lane].capacity} sends already wait on the ${lane} lane; await each send before the next, or raise maxQueuedSends`,
          ),
        );
        return;
      }
      if (signal !== undefined) {
        pending.onAbort = () => {
          if (this.#lanes[lane].remove((p) => p === pending)) reject(abortError(signal, "send"));
        };
        signal.addEventListener("abort", pending.onAbort, { once: true });
      }
      this.#signal();
    });
  }

  /**
   * Stops taking data: every queued send rejects with `error`, then `goaway`
   * (if given) is the last frame to leave. Without a goaway the frame stream
   * ends at once.
   */
  finish(error: KdsError, goaway?: FrameValueInit): void {
    if (this.#goaway !== undefined || this.#ended) return;
    for (const lane of ["requests", "responses"] as const) {
      for (const pending of this.#lanes[lane].drain()) {
        if (pending.onAbort !== undefined) pending.signal?.removeEventListener("abort", pending.onAbort);
        pending.reject(error);
      }
    }
    this.#pingId = undefined;
    this.#pongId = undefined;
    this.#grant = { requests: 0, responses: 0 };
    if (goaway === undefined) this.#ended = true;
    else {
      this.#goaway = controlFrame(goaway);
      this.#controlQueued();
    }
    this.#signal();
  }

  /**
   * Since when the oldest frame has waited to leave, or undefined when nothing
   * waits. Drives the send timeout.
   */
  oldestWaitingSince(): number | undefined {
    let oldest = this.#controlPendingSince;
    for (const lane of ["requests", "responses"] as const) {
      const head = this.#lanes[lane].peek();
      if (head !== undefined && (oldest === undefined || head.enqueuedAt < oldest)) oldest = head.enqueuedAt;
    }
    return oldest;
  }

  /** The frames to write, pulled by the transport one at a time. Ends after the goaway. */
  async *frames(): AsyncGenerator<Message, void, undefined> {
    try {
      for (;;) {
        const frame = this.#take();
        if (frame === "end") return;
        if (frame === undefined) {
          await new Promise<void>((resolve) => {
            this.#wake = resolve;
          });
          continue;
        }
        yield frame;
      }
    } finally {
      // The transport stopped pulling (end, error or cancel): nothing more leaves.
      this.finish(new KdsError("session_closed", "the transport stopped taking frames; the session has ended"));
      this.#ended = true;
    }
  }

  #take(): Message | "end" | undefined {
    if (this.#ended) return "end";
    if (this.#hello !== undefined) {
      const hello = this.#hello;
      this.#hello = undefined;
      return this.#tookControl(hello);
    }
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
      this.#grant = { requests: 0, responses: 0 };
      return this.#tookControl(
        controlFrame({ case: "windowUpdate", value: { requests, responses } }),
      );
    }
    if (this.#pingId !== undefined) {
      const id = this.#pingId;
      this.#pingId = undefined;
      return this.#tookControl(controlFrame({ case: "ping", value: { id } }));
    }
    const first = this.#nextLane;
    const second: Lane = first === "requests" ? "responses" : "requests";
    for (const lane of [first, second]) {
      if (this.#credit[lane] > 0 && this.#lanes[lane].size > 0) {
        const pending = this.#lanes[lane].shift() as PendingSend;
        this.#credit[lane]--;
        this.counters[lane]++;
        this.#nextLane = lane === "requests" ? "responses" : "requests";
        if (pending.onAbort !== undefined) pending.signal?.removeEventListener("abort", pending.onAbort);
        pending.resolve();
        return pending.frame;
      }
    }
    return undefined;
  }

  #tookControl(frame: Message): Message {
    this.counters.control++;
    if (this.#hello === undefined && this.#pongId === undefined && this.#pingId === undefined && this.#grant.requests === 0 && this.#grant.responses === 0) {
      this.#controlPendingSince = undefined;
    }
    return frame;
  }

  #controlQueued(): void {
    this.#controlPendingSince ??= this.#now();
    this.#signal();
  }

  #signal(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }
}
