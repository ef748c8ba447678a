/**
 * The transport's side of an {@link Outbox}: the frames to write, as one
 * object that is both the async iterator the transport pulls and, for a
 * transport that takes pushed frames, the writer's {@link FrameFlow}. One
 * object with prototype methods rather than an iterator of closures: every
 * session holds one for its whole life.
 *
 * @module
 */
import type { Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import {
  WRITE_FRAMES,
  type FrameFlow,
  type FrameWriter,
  type WrittenFrames,
} from "./frame-push.ts";

/** What the frames are pulled from: the outbox. */
export interface FrameSource {
  /** The next frame, "end" once the frames are over, or undefined when nothing is ready. */
  take(): Frame | "end" | undefined;
  /** Has `frames.retry()` run a microtask after each change, until it returns true. */
  wait(frames: OutboundFrames): void;
  /** Stops calling `frames.retry()`, if it is the one waiting. */
  unwait(frames: OutboundFrames): void;
  /** Something may be ready: the waiting `retry` runs a microtask later. */
  changed(): void;
  /** The transport stopped taking frames (their end, or `return`): nothing more leaves. */
  stopped(): void;
}

const END: IteratorResult<Frame, undefined> = Object.freeze({ done: true, value: undefined });

/**
 * The frames to write, pulled by the transport one at a time or pushed to
 * its writer (see {@link WrittenFrames}). Ends after the goaway. When the
 * transport stops pulling, nothing more leaves, and `onEnd` runs.
 */
export class OutboundFrames implements AsyncIterableIterator<Frame>, WrittenFrames, FrameFlow {
  readonly #source: FrameSource;
  readonly #onEnd: (() => void) | undefined;
  #done = false;
  /** The waiting `next`'s resolve, when the transport pulls. */
  #resolve: ((result: IteratorResult<Frame, undefined>) => void) | undefined;
  /** The writer frames are pushed to, when the transport takes pushed frames. */
  #writer: FrameWriter | undefined;
  #paused = false;
  #over = false;
  /** Counts `resume` calls: a writer that resumes before it returns false (it drained at once) is not paused. */
  #resumes = 0;

  constructor(source: FrameSource, onEnd: (() => void) | undefined) {
    this.#source = source;
    this.#onEnd = onEnd;
  }

  next(): Promise<IteratorResult<Frame, undefined>> {
    const ready = this.#pull();
    if (ready !== undefined) return Promise.resolve(ready);
    return new Promise((resolve) => {
      this.#resolve = resolve;
      this.#source.wait(this);
    });
  }

  return(): Promise<IteratorResult<Frame, undefined>> {
    this.#stop();
    return Promise.resolve(END);
  }

  throw(error: unknown): Promise<IteratorResult<Frame, undefined>> {
    this.#stop();
    return Promise.reject(error);
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  [WRITE_FRAMES](writer: FrameWriter): FrameFlow {
    this.#writer = writer;
    // Stays the source's waiter (a change drains again) until the frames are over: no promise per frame.
    this.#source.wait(this);
    this.#source.changed();
    return this;
  }

  /** The writer can take frames again. */
  resume(): void {
    this.#resumes++;
    this.#paused = false;
    this.#source.changed();
  }

  /** The writer takes no more: as `return`. */
  stop(): void {
    this.#over = true;
    this.#stop();
    this.#source.unwait(this);
  }

  /** Pulls again after a change: true once done waiting (a frame or the end was handed over). */
  retry(): boolean {
    if (this.#writer !== undefined) return this.#drain(this.#writer);
    const result = this.#pull();
    if (result === undefined) return false;
    const resolve = this.#resolve;
    this.#resolve = undefined;
    resolve?.(result);
    return true;
  }

  #drain(writer: FrameWriter): boolean {
    while (!this.#paused && !this.#over) {
      const result = this.#pull();
      if (result === undefined) return false;
      if (result.done === true) {
        this.#over = true;
        writer.end();
        return true;
      }
      try {
        const before = this.#resumes;
        if (!writer.frame(result.value) && this.#resumes === before) this.#paused = true;
      } catch (error) {
        // A writer that throws is a bug; the frames end with its error, as a loop over them would.
        this.#over = true;
        this.#stop();
        writer.fail(error);
        return true;
      }
    }
    return this.#over;
  }

  /** The next frame, the end, or undefined when nothing is ready. */
  #pull(): IteratorResult<Frame, undefined> | undefined {
    if (this.#done) return END;
    const frame = this.#source.take();
    if (frame === undefined) return undefined;
    if (frame !== "end") return { done: false, value: frame };
    this.#stop();
    return END;
  }

  #stop(): void {
    if (this.#done) return;
    this.#done = true;
    this.#source.stopped();
    this.#onEnd?.();
  }
}
