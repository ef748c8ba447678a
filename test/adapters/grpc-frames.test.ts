// The gRPC frame reader's push mode (mux/frame-push.ts): the frames of a
// byte stream handed to a receiver as they arrive, in order, split across
// chunks or several in one, then the end or the failure, and nothing after
// the receiver let go.
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { grpcFrame, readGrpcFrames } from "../../src/adapters/node/grpc-frames.ts";
import type { Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { PUSH_FRAMES, pushesFrames, type FrameReceiver } from "../../src/mux/frame-push.ts";
import { requestFrame } from "../../src/mux/frames.ts";
import { request } from "../contract/harness.ts";

const unreadable = (reason: string): Error => new Error(`unreadable: ${reason}`);

/** A receiver that records what it is given; after `stopAfter` frames, it asks for no more. */
function recorder(stopAfter = Number.POSITIVE_INFINITY): {
  receiver: FrameReceiver;
  nonces: string[];
  ends: { count: number };
  failures: unknown[];
} {
  const nonces: string[] = [];
  const ends = { count: 0 };
  const failures: unknown[] = [];
  const receiver: FrameReceiver = {
    frame: (frame: Frame) => {
      nonces.push((frame.value.value as { responseNonce: string }).responseNonce);
      return nonces.length < stopAfter;
    },
    end: () => {
      ends.count++;
    },
    fail: (error) => {
      failures.push(error);
    },
  };
  return { receiver, nonces, ends, failures };
}

/** The bytes of a request frame with `nonce`, as a gRPC message. */
const bytesOf = (nonce: string): Buffer => grpcFrame(requestFrame(request("type.x", nonce)));

/** Lets the stream's events run. */
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe("gRPC frame reader, pushing", () => {
  it("pushes the frames read before it started first, then each as it arrives, whole or split, and then the end", async () => {
    const stream = new PassThrough();
    const frames = readGrpcFrames(stream, 1 << 20, unreadable);
    expect(pushesFrames(frames)).toBe(true);
    stream.write(Buffer.concat([bytesOf("1"), bytesOf("2")])); // two in one chunk, before anyone reads
    await turn();
    const r = recorder();
    frames[PUSH_FRAMES](r.receiver);
    expect(r.nonces).toEqual(["1", "2"]);
    const third = bytesOf("3");
    stream.write(third.subarray(0, 4)); // a frame split across chunks comes once whole
    await turn();
    expect(r.nonces).toEqual(["1", "2"]);
    stream.write(third.subarray(4));
    await turn();
    expect(r.nonces).toEqual(["1", "2", "3"]);
    stream.end();
    await turn();
    expect(r.ends.count).toBe(1);
    expect(r.failures).toEqual([]);
  });

  it("fails with what the reader makes of a frame that cannot be read, and pushes nothing after it", async () => {
    const stream = new PassThrough();
    const frames = readGrpcFrames(stream, 1 << 20, unreadable);
    const r = recorder();
    frames[PUSH_FRAMES](r.receiver);
    const garbage = Buffer.from([0, 0, 0, 0, 3, 0xff, 0xff, 0xff]);
    stream.write(Buffer.concat([bytesOf("1"), garbage, bytesOf("2")]));
    await turn();
    expect(r.nonces).toEqual(["1"]);
    expect(r.failures).toHaveLength(1);
    expect(String(r.failures[0])).toMatch(/unreadable/);
    stream.end();
    await turn();
    expect(r.ends.count).toBe(0);
  });

  it("stops once the receiver wants no more, and once the reading is returned", async () => {
    const stream = new PassThrough();
    const frames = readGrpcFrames(stream, 1 << 20, unreadable);
    const r = recorder(2);
    frames[PUSH_FRAMES](r.receiver);
    stream.write(Buffer.concat([bytesOf("1"), bytesOf("2"), bytesOf("3")]));
    await turn();
    expect(r.nonces).toEqual(["1", "2"]);
    stream.write(bytesOf("4"));
    await turn();
    expect(r.nonces).toEqual(["1", "2"]);

    const other = new PassThrough();
    const returned = readGrpcFrames(other, 1 << 20, unreadable);
    const s = recorder();
    returned[PUSH_FRAMES](s.receiver);
    other.write(bytesOf("a"));
    await turn();
    await returned.return?.();
    other.write(bytesOf("b"));
    other.end();
    await turn();
    expect(s.nonces).toEqual(["a"]);
    expect(s.ends.count).toBe(0);
  });

  it("has one reader: pushing beside a pending next is refused", async () => {
    const stream = new PassThrough();
    const frames = readGrpcFrames(stream, 1 << 20, unreadable);
    const pending = frames.next();
    expect(() => frames[PUSH_FRAMES](recorder().receiver)).toThrow(/one reader/);
    stream.write(bytesOf("1"));
    const first = await pending;
    expect((first.value as Frame).value.value).toMatchObject({ responseNonce: "1" });
  });
});
