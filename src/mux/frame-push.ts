/**
 * What a transport's inbound frames may offer besides async iteration: to
 * hand each frame to the session the moment it is read. A session reading
 * by iteration waits for every frame on a promise of its own (and the
 * transport's), which lives until the peer's next frame: a change later for
 * a zone's ACK, long enough that every young collection copies it and then
 * promotes it to the old generation. A session given frames that can be
 * pushed takes them this way instead (see `MuxSession.attach`); any other
 * `AsyncIterable<Frame>` is read as before.
 *
 * @module
 */
import type { Frame } from "../gen/kds/mux/v1/mux_pb.ts";

/** Where pushed frames go: one reader, called in order, never after `end` or `fail`. */
export interface FrameReceiver {
  /** The next frame. Returns false when the reader wants no more (the source stops pushing). */
  frame(frame: Frame): boolean;
  /** The peer ended its frames cleanly. */
  end(): void;
  /** The frames failed (a frame that cannot be read, or the stream's error). */
  fail(error: unknown): void;
}

/** The method an inbound frame iterator offers to push its frames instead. */
export const PUSH_FRAMES: unique symbol = Symbol("kds-mux.pushFrames");

/** An inbound frame iterator that can push its frames (see {@link FrameReceiver}). */
export interface PushedFrames {
  /**
   * Starts pushing every frame to `receiver`, those already read first. Call
   * it at most once, and instead of `next`, never beside it. `return` stops it.
   */
  [PUSH_FRAMES](receiver: FrameReceiver): void;
}

/** Whether `frames` can push its frames. */
export function pushesFrames(frames: object): frames is PushedFrames {
  return typeof (frames as Partial<PushedFrames>)[PUSH_FRAMES] === "function";
}

/** Where a session's outbound frames are pushed: one writer, called in order, never after `end` or `fail`. */
export interface FrameWriter {
  /**
   * The next frame to write. Returns false when the writer cannot take more
   * now (its stream is full): nothing more comes until it calls `resume` on
   * the {@link FrameFlow} it was given.
   */
  frame(frame: Frame): boolean;
  /** The frames are over (after the goaway, if any): end the stream. */
  end(): void;
  /** The frames ended with `error` (the session's end, for a transport that reports it in its status). */
  fail(error: unknown): void;
}

/** What a writer of pushed frames controls. */
export interface FrameFlow {
  /** The writer can take frames again. */
  resume(): void;
  /** The writer takes no more (its stream is gone): as `return` on the iterator. */
  stop(): void;
}

/** The method a session's outbound frames offer to push them to a writer instead of being iterated. */
export const WRITE_FRAMES: unique symbol = Symbol("kds-mux.writeFrames");

/** Outbound frames that can be pushed to a writer (see {@link FrameWriter}). */
export interface WrittenFrames {
  /**
   * Starts pushing the frames to `writer`, from a later microtask (never
   * before this returns). Call it at most once, instead of iterating.
   */
  [WRITE_FRAMES](writer: FrameWriter): FrameFlow;
}

/** Whether `frames` can be pushed to a writer. */
export function writesFrames(frames: object): frames is WrittenFrames {
  return typeof (frames as Partial<WrittenFrames>)[WRITE_FRAMES] === "function";
}
