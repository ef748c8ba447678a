/**
 * Inbound frames a transport hands over as they arrive instead of when
 * pulled. A session's reader takes every frame the moment it can anyway
 * (session.ts: it never waits on a view's consumer), so a transport that
 * decodes frames in its own data events (the node adapter's gRPC reader)
 * may give them to the session there: each frame then costs no promise to
 * hand over, where the pulled iterator cost two and a resumption (every ACK
 * of every zone comes this way). Internal to the package: a transport
 * without it is iterated as before.
 *
 * @module
 */
import type { Frame } from "../gen/kds/mux/v1/mux_pb.ts";

/** Where pushed frames go. */
export interface FrameSink {
  /** The next frame, in order. */
  frame(frame: Frame): void;
  /** No frame follows: the peer ended its direction (no `error`), or the read failed with `error`. */
  end(error?: unknown): void;
}

/** Inbound frames that can be pushed (and still stopped through the iterator's `return`). */
export interface PushedFrames extends AsyncIterable<Frame> {
  /**
   * Hands every frame, from now on, to `sink` instead of `next`: those
   * already buffered at once, the rest as they arrive, then the end. Called
   * at most once, and never after `next`. The iterator's `return` stops it.
   */
  pushTo(sink: FrameSink): void;
}

/** Whether `frames` can be pushed (see {@link PushedFrames}). */
export function canPush(frames: AsyncIterable<Frame>): frames is PushedFrames {
  return typeof (frames as Partial<PushedFrames>).pushTo === "function";
}
