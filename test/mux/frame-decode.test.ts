// readFrame reads delta responses (and plain delta ACKs) itself and hands every other frame to
// protobuf-es: either way it must give exactly what fromBinary gives, refuse
// exactly what the scan or fromBinary refuse, and the weight weighFrame then
// reports (the scan's, remembered, for a frame read by hand) must be the one
// a walk of the decoded frame finds.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { readFrame } from "../../src/mux/frame-decode.ts";
import { encodeFrame } from "../../src/mux/frame-encode.ts";
import { scanRefusal } from "../../src/mux/frame-scan.ts";
import { weighFrame } from "../../src/mux/frame-size.ts";
import { frame, sentAck, sentResponse, sentSubscription } from "../support/frame-arbitraries.ts";

const unreadable = (reason: string): Error => new Error(`unreadable: ${reason}`);

/** What readFrame gives for `bytes`, or the error it throws. */
function read(bytes: Uint8Array): Frame | Error {
  try {
    return readFrame(bytes, unreadable);
  } catch (error) {
    return error as Error;
  }
}

/** fromBinary's frame for `bytes`, or undefined when the scan or fromBinary refuse them. */
function reflective(bytes: Uint8Array): Frame | undefined {
  if (scanRefusal(bytes) !== undefined) return undefined;
  try {
    return fromBinary(FrameSchema, bytes);
  } catch {
    return undefined;
  }
}

function expectAsReflective(bytes: Uint8Array): void {
  const got = read(bytes);
  const expected = reflective(bytes);
  if (expected === undefined) {
    expect(got).toBeInstanceOf(Error);
    return;
  }
  if (got instanceof Error) throw got;
  expect(got).toEqual(expected);
  if (got.value.case === "deltaRequest" && expected.value.case === "deltaRequest")
    expect(Object.keys(got.value.value)).toEqual(Object.keys(expected.value.value));
  // The same fields in the same order as protobuf-es sets them (so both kinds of resource share their object shapes).
  if (got.value.case === "deltaResponse" && expected.value.case === "deltaResponse") {
    const want = expected.value.value.resources;
    got.value.value.resources.forEach((r, i) => {
      expect(Object.keys(r)).toEqual(Object.keys(want[i] as object));
    });
  }
  expect(weighFrame(got)).toEqual(weighFrame(expected));
  // The session weighs a batch's frames one by one.
  if (got.value.case === "batch" && expected.value.case === "batch") {
    const want = expected.value.value.frames;
    got.value.value.frames.forEach((inner, i) => {
      expect(weighFrame(inner)).toEqual(weighFrame(want[i] as Frame));
    });
  }
}

/** Batches of delta responses as a server sends them (and, now and then, another frame among them). */
const sentBatch = fc
  .array(fc.oneof({ weight: 6, arbitrary: sentResponse }, { weight: 1, arbitrary: frame }), {
    maxLength: 4,
  })
  .map((frames) => create(FrameSchema, { value: { case: "batch", value: { frames } } }));

describe("readFrame", () => {
  it("gives what fromBinary gives, and the same weight, for any frame as toBinary and encodeFrame write it", () => {
    fc.assert(
      fc.property(fc.oneof(sentResponse, sentBatch, sentAck, sentSubscription, frame), (f) => {
        expectAsReflective(toBinary(FrameSchema, f));
        expectAsReflective(encodeFrame(f));
      }),
      { numRuns: 1000 },
    );
  });

  it("gives what fromBinary gives (or refuses what the scan or fromBinary refuse) for frames with any bytes changed or added", () => {
    fc.assert(
      fc.property(
        fc.oneof(sentResponse, sentBatch, sentAck, sentSubscription, frame),
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 3 }),
        fc.uint8Array({ maxLength: 12 }),
        (f, changes, tail) => {
          const bytes = new Uint8Array([...toBinary(FrameSchema, f), ...tail]);
          for (const [at, value] of changes) bytes[at % bytes.length] = value;
          expectAsReflective(bytes);
        },
      ),
      { numRuns: 3000 },
    );
  });

  it("gives plain Uint8Array payloads, also from a subclass's bytes", () => {
    class Bytes extends Uint8Array {}
    const f = create(FrameSchema, {
      value: {
        case: "deltaResponse",
        value: {
          typeUrl: "t",
          resources: [
            { name: "a", version: "1", resource: { typeUrl: "x", value: new Uint8Array([1, 2]) } },
          ],
        },
      },
    });
    const encoded = toBinary(FrameSchema, f);
    const bytes = new Bytes(encoded.length);
    bytes.set(encoded);
    const got = readFrame(bytes, unreadable);
    expect(got).toEqual(fromBinary(FrameSchema, encoded));
    const value =
      got.value.case === "deltaResponse"
        ? got.value.value.resources[0]?.resource?.value
        : undefined;
    expect(value?.constructor).toBe(Uint8Array);
  });

  it("reads a batch of delta responses by hand too (plain Uint8Array payloads, each response's weight kept)", () => {
    const response = {
      case: "deltaResponse" as const,
      value: {
        typeUrl: "t",
        nonce: "1",
        resources: [
          { name: "a", version: "1", resource: { typeUrl: "x", value: new Uint8Array([1, 2]) } },
        ],
      },
    };
    const f = create(FrameSchema, {
      value: { case: "batch", value: { frames: [{ value: response }, { value: response }] } },
    });
    const encoded = toBinary(FrameSchema, f);
    const got = readFrame(Buffer.from(encoded), unreadable);
    const expected = fromBinary(FrameSchema, encoded);
    expect(got).toEqual(expected);
    const frames = got.value.case === "batch" ? got.value.value.frames : [];
    expect(frames).toHaveLength(2);
    for (const inner of frames) {
      const value =
        inner.value.case === "deltaResponse"
          ? inner.value.value.resources[0]?.resource?.value
          : undefined;
      expect(value?.constructor).toBe(Uint8Array);
      expect(weighFrame(inner)).toEqual(weighFrame(create(FrameSchema, { value: response })));
    }
  });

  it("reads a plain delta ACK by hand, and again with the same type URL (its string reused)", () => {
    const ack = (nonce: string): Uint8Array =>
      toBinary(
        FrameSchema,
        create(FrameSchema, {
          value: {
            case: "deltaRequest",
            value: { typeUrl: "type.googleapis.com/kds.v1.KdsResource/Mesh", responseNonce: nonce },
          },
        }),
      );
    for (const nonce of ["1", "2", "3"]) {
      const got = readFrame(Buffer.from(ack(nonce)), unreadable);
      expect(got).toEqual(fromBinary(FrameSchema, ack(nonce)));
      expect(weighFrame(got)).toEqual(weighFrame(fromBinary(FrameSchema, ack(nonce))));
    }
  });
});
