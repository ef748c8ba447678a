// A peer that says nothing: frames that never come, for tests of a
// session's timeouts.
import type { Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";

/** Frames that never come (the peer went silent), ended when the reader lets go. */
export function silence(): AsyncIterable<Frame> {
  return {
    [Symbol.asyncIterator]: () => ({
      next: () => new Promise<IteratorResult<Frame>>(() => undefined),
      return: async () => ({ done: true, value: undefined }),
    }),
  };
}
