// A session's outbound frames pushed to a writer (mux/frame-push.ts) instead
// of iterated: the same frames in the same order, held back while the
// writer is full, the goaway last, and nothing once the writer stopped.
import { describe, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import type { Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { WRITE_FRAMES, writesFrames, type FrameWriter } from "../../src/mux/frame-push.ts";
import { controlFrame, requestFrame } from "../../src/mux/frames.ts";
import { Outbox } from "../../src/mux/outbox.ts";
import { request } from "../contract/harness.ts";

/** Lets queued microtasks run. */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** A writer that records what it is given as `case:typeUrl`, and is full whenever `full()` says so. */
function recorder(full: () => boolean = () => false): {
  writer: FrameWriter;
  written: string[];
  outcome: { ended: boolean; failure: unknown };
} {
  const written: string[] = [];
  const outcome = { ended: false, failure: undefined as unknown };
  const writer: FrameWriter = {
    frame: (frame: Frame) => {
      const typeUrl = (frame.value.value as { typeUrl?: string } | undefined)?.typeUrl;
      written.push(
        typeUrl === undefined ? `${frame.value.case}` : `${frame.value.case}:${typeUrl}`,
      );
      return !full();
    },
    end: () => {
      outcome.ended = true;
    },
    fail: (error) => {
      outcome.failure = error;
    },
  };
  return { writer, written, outcome };
}

/** An outbox with its hello set and room for `window` requests. */
function openOutbox(window = 8): Outbox {
  const outbox = new Outbox(16, () => 0);
  outbox.setHello(controlFrame({ case: "hello", value: { protocolVersion: 3 } }));
  outbox.openLanes(
    { requests: window, responses: window },
    { requests: 1 << 20, responses: 1 << 20 },
    1 << 20,
  );
  return outbox;
}

describe("outbound frames pushed to a writer", () => {
  it("pushes the hello and each frame in order, from a later microtask, then the goaway and the end", async () => {
    const outbox = openOutbox();
    const frames = outbox.frames();
    expect(writesFrames(frames)).toBe(true);
    const r = recorder();
    frames[WRITE_FRAMES](r.writer);
    expect(r.written).toEqual([]); // never before it returns
    void outbox.send("requests", requestFrame(request("a")));
    void outbox.send("requests", requestFrame(request("b")));
    await settle();
    expect(r.written).toEqual(["hello", "request:a", "request:b"]);
    void outbox.send("requests", requestFrame(request("c")));
    await settle();
    expect(r.written.at(-1)).toBe("request:c");
    outbox.finish(new KdsError("session_closed", "done"), {
      case: "goaway",
      value: { message: "bye" },
    });
    await settle();
    expect(r.written.at(-1)).toBe("goaway");
    expect(r.outcome).toEqual({ ended: true, failure: undefined });
  });

  it("holds frames back while the writer is full, and goes on where it stopped once resumed", async () => {
    const outbox = openOutbox();
    const frames = outbox.frames();
    let full = true;
    const r = recorder(() => full);
    const flow = frames[WRITE_FRAMES](r.writer);
    void outbox.send("requests", requestFrame(request("a")));
    void outbox.send("requests", requestFrame(request("b")));
    await settle();
    expect(r.written).toEqual(["hello"]); // full after the hello: nothing more until resumed
    void outbox.send("requests", requestFrame(request("c")));
    await settle();
    expect(r.written).toEqual(["hello"]);
    full = false;
    flow.resume();
    await settle();
    expect(r.written).toEqual(["hello", "request:a", "request:b", "request:c"]);
  });

  it("is not held back by a writer that resumed before it said it was full (its stream drained at once)", async () => {
    const outbox = openOutbox();
    const frames = outbox.frames();
    const written: string[] = [];
    const flow = frames[WRITE_FRAMES]({
      frame: (frame) => {
        written.push(frame.value.case ?? "");
        flow.resume();
        return false;
      },
      end: () => undefined,
      fail: () => undefined,
    });
    void outbox.send("requests", requestFrame(request("a")));
    void outbox.send("requests", requestFrame(request("b")));
    await settle();
    expect(written).toEqual(["hello", "request", "request"]);
  });

  it("takes nothing more once the writer stopped, and ends the outbox as the iterator's return would", async () => {
    const outbox = openOutbox();
    const frames = outbox.frames();
    const r = recorder();
    const flow = frames[WRITE_FRAMES](r.writer);
    await settle();
    flow.stop();
    await expect(outbox.send("requests", requestFrame(request("late")))).rejects.toMatchObject({
      code: "session_closed",
    });
    await settle();
    expect(r.written).toEqual(["hello"]);
    expect(r.outcome).toEqual({ ended: false, failure: undefined });
  });

  it("ends the frames with a writer's throw as its failure, the outbox finished", async () => {
    const outbox = openOutbox();
    const frames = outbox.frames();
    const broken = new Error("the writer broke");
    let failure: unknown;
    frames[WRITE_FRAMES]({
      frame: () => {
        throw broken;
      },
      end: () => undefined,
      fail: (error) => {
        failure = error;
      },
    });
    await settle();
    expect(failure).toBe(broken);
    await expect(outbox.send("requests", requestFrame(request("after")))).rejects.toMatchObject({
      code: "session_closed",
    });
  });
});
