// A session reading pushed frames (mux/frame-push.ts) ends its reading where
// one reading by iteration does: after a frame that ended it for a failure,
// at once when it had ended before it was attached, and without a throw
// escaping the stream's event handlers. Each case runs both ways (the
// iterated one hides PUSH_FRAMES). Timers are fake, so the close grace never
// runs out: only the reading's own end lets the transport go.
import { PassThrough } from "node:stream";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { grpcFrame, readGrpcFrames } from "../../src/adapters/node/grpc-frames.ts";
import type { Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { noopMetrics, type Metrics } from "../../src/metrics.ts";
import { controlFrame } from "../../src/mux/frames.ts";
import { MuxSession } from "../../src/mux/session.ts";
import { helloFrame } from "../contract/harness.ts";

const unreadable = (reason: string): Error => new Error(`unreadable: ${reason}`);

/** Hides PUSH_FRAMES: the session reads by iteration. */
function iterated(frames: AsyncIterableIterator<Frame>): AsyncIterable<Frame> {
  return {
    [Symbol.asyncIterator]: () => ({
      next: () => frames.next(),
      return: () => frames.return?.() ?? Promise.resolve({ done: true, value: undefined }),
    }),
  };
}

/** Runs `body`, collecting what it throws uncaught (out of an event handler or a microtask) instead of failing the run. */
async function uncaughtIn(body: () => Promise<void>): Promise<unknown[]> {
  const uncaught: unknown[] = [];
  const onUncaught = (error: unknown): void => void uncaught.push(error);
  const listeners = process.listeners("uncaughtException");
  process.removeAllListeners("uncaughtException");
  process.on("uncaughtException", onUncaught);
  try {
    await body();
  } finally {
    process.off("uncaughtException", onUncaught);
    for (const l of listeners) process.on("uncaughtException", l);
  }
  return uncaught;
}

/** Lets the stream's events and the session's microtasks run until `done()`, at most 100 turns. */
async function until(done: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !done(); i++) await new Promise((r) => setImmediate(r));
}

/** A global's session reading `stream` (pushed or iterated), its frames drained as a transport would. */
function globalSession(
  stream: PassThrough,
  push: boolean,
  metrics: Metrics = noopMetrics,
  finished?: () => void,
): { session: MuxSession; released: () => boolean } {
  const session = new MuxSession({ role: "global", localId: "global", peerId: "zone-1", metrics });
  void (async () => {
    for await (const _ of session.outbound);
  })();
  const reader = readGrpcFrames(stream, 1 << 20, unreadable, { finished });
  session.attach(push ? reader : iterated(reader));
  let released = false;
  void session.released.then(() => {
    released = true;
  });
  return { session, released: () => released };
}

describe.each([
  ["pushed", true],
  ["iterated", false],
])("a session reading %s frames", (_how, push) => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval"] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("stops reading after a frame that ended it for a failure, and lets the transport go", async () => {
    const stream = new PassThrough();
    const { session, released } = globalSession(stream, push);
    // Not a hello first: a protocol error.
    stream.write(grpcFrame(controlFrame({ case: "ping", value: { id: 1n } })));
    await until(released);
    expect(session.end?.code).toBe("protocol_error");
    expect(released()).toBe(true);
    expect(stream.listenerCount("data")).toBe(0);
  });

  it("reads nothing when it ended for a failure before it was attached", async () => {
    const session = new MuxSession({ role: "zone", localId: "zone-1" });
    void (async () => {
      for await (const _ of session.outbound);
    })();
    session.fail("transport", "the dial was cancelled"); // while the transport was still opening
    const stream = new PassThrough();
    let finished = false;
    const reader = readGrpcFrames(stream, 1 << 20, unreadable, {
      finished: () => {
        finished = true;
      },
    });
    session.attach(push ? reader : iterated(reader));
    let released = false;
    void session.released.then(() => {
      released = true;
    });
    await until(() => released && finished);
    expect({ released, finished }).toEqual({ released: true, finished: true });
  });

  it("keeps a throw while it ends for the peer's EOF inside the session (a metrics sink that throws)", async () => {
    const uncaught = await uncaughtIn(async () => {
      const stream = new PassThrough();
      const { session } = globalSession(stream, push, {
        ...noopMetrics,
        sessionClosed: () => {
          throw new Error("the metrics sink broke");
        },
      });
      stream.write(grpcFrame(helloFrame("zone-1")));
      await until(() => session.state.kind === "open");
      expect(session.state.kind).toBe("open");
      stream.end(); // the peer's EOF, without a goaway
      await until(() => session.end !== undefined);
      await until(() => false); // the stream's end and close events, and what they start
    });
    expect(uncaught).toEqual([]);
  });
});

describe("a reader someone already called next on", () => {
  it("is read by the session without a throw escaping a microtask", async () => {
    const uncaught = await uncaughtIn(async () => {
      const session = new MuxSession({ role: "global", localId: "global", peerId: "zone-1" });
      const stream = new PassThrough();
      const reader = readGrpcFrames(stream, 1 << 20, unreadable);
      void reader.next(); // someone peeked: the reader cannot push beside it
      session.attach(reader);
      await until(() => session.end !== undefined);
      expect(session.end?.code).toBe("transport");
    });
    expect(uncaught).toEqual([]);
  });
});
