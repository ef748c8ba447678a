// encodeFrame writes delta responses (and batches of them) itself and hands
// every other frame to protobuf-es: either way its bytes must be exactly
// toBinary's, behind the prefix it leaves free.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { DeltaDiscoveryResponseSchema } from "../../src/gen/kds/v1/discovery_pb.ts";
import { encodeFrame } from "../../src/mux/frame-encode.ts";
import { frame, sentResponse } from "../support/frame-arbitraries.ts";

const anyFrame = fc.oneof(sentResponse, frame);

function batchOf(frames: Frame[]): Frame {
  return create(FrameSchema, { value: { case: "batch", value: { frames } } }) as Frame;
}

/** Checks the bytes behind the prefix against toBinary's (the first difference named: a deep equal of large arrays takes minutes). */
function expectEncodes(f: Frame, prefix: number): void {
  const out = encodeFrame(f, prefix).subarray(prefix);
  const expected = toBinary(FrameSchema, f);
  expect(out.byteLength).toBe(expected.byteLength);
  expect(out.findIndex((b, i) => b !== expected[i])).toBe(-1);
}

describe("encodeFrame", () => {
  it("writes exactly toBinary's bytes for any frame, behind any prefix", () => {
    fc.assert(
      fc.property(anyFrame, fc.nat({ max: 8 }), (f, prefix) => expectEncodes(f, prefix)),
      { numRuns: 500 },
    );
  });

  it("writes exactly toBinary's bytes for a batch of any frames, nested batches included", () => {
    fc.assert(
      fc.property(
        fc.array(anyFrame, { maxLength: 5 }),
        fc.array(anyFrame, { maxLength: 3 }),
        fc.nat({ max: 5 }),
        (frames, inner, prefix) => {
          expectEncodes(batchOf(frames), prefix);
          expectEncodes(batchOf([...frames, batchOf(inner)]), prefix);
        },
      ),
      { numRuns: 200 },
    );
  });

  it("writes exactly toBinary's bytes for frames decoded from any bytes, unknown fields included", () => {
    fc.assert(
      fc.property(sentResponse, fc.uint8Array({ maxLength: 64 }), (f, tail) => {
        let decoded: Frame;
        try {
          decoded = fromBinary(FrameSchema, new Uint8Array([...toBinary(FrameSchema, f), ...tail]));
        } catch {
          return; // the appended bytes do not decode: nothing to write
        }
        expectEncodes(decoded, 5);
        expectEncodes(batchOf([decoded, f]), 0);
      }),
      { numRuns: 300 },
    );
  });

  it("writes a large response with multi-byte lengths as toBinary does", () => {
    const big = create(FrameSchema, {
      value: {
        case: "deltaResponse",
        value: create(DeltaDiscoveryResponseSchema, {
          typeUrl: "type.googleapis.com/kds.v1.KdsResource",
          systemVersionInfo: "v".repeat(300),
          nonce: "12",
          resources: Array.from({ length: 3000 }, (_, i) => ({
            name: `default/policy-${i}-é`,
            version: String(i),
            resource: {
              typeUrl: "type.googleapis.com/kds.v1.KdsResource",
              value: new Uint8Array(i % 400).fill(i % 256),
            },
          })),
          removedResources: ["", "a/b", "ü"],
        }),
      },
    }) as Frame;
    expectEncodes(big, 5);
    expectEncodes(batchOf([big, big]), 5);
  });
});
