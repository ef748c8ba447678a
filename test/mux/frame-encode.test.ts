// encodeFrame writes delta responses (and batches of them) itself and every
// other frame with the generic back-to-front writer (message-write.ts):
// either way its bytes must be exactly toBinary's, behind the prefix it
// leaves free.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import {
  DeltaDiscoveryResponseSchema,
  DiscoveryRequestSchema,
  DiscoveryResponseSchema,
} from "../../src/gen/kds/v1/discovery_pb.ts";
import { encodeFrame } from "../../src/mux/frame-encode.ts";
import { frame, sentAck, sentResponse, text } from "../support/frame-arbitraries.ts";

/** Control frames, each field at any value (zero values included, which are left out). */
const controlFrame = fc
  .oneof(
    fc
      .record({
        protocolVersion: fc.nat(),
        peerId: text,
        requestWindow: fc.nat(),
        responseWindow: fc.nat(),
        maxMessageBytes: fc.nat(),
        heartbeatIntervalMs: fc.nat(),
        heartbeatTimeoutMs: fc.nat(),
        batching: fc.boolean(),
        calls: fc.boolean(),
        requestWindowBytes: fc.nat(),
        responseWindowBytes: fc.nat(),
        maxProtocolVersion: fc.nat(),
        features: fc.array(text, { maxLength: 3 }),
        softwareVersion: text,
      })
      .map((value) => ({ case: "hello" as const, value })),
    fc
      .bigInt({ min: 0n, max: 2n ** 64n - 1n })
      .map((id) => ({ case: "ping" as const, value: { id } })),
    fc
      .bigInt({ min: 0n, max: 2n ** 64n - 1n })
      .map((id) => ({ case: "pong" as const, value: { id } })),
    fc
      .record({
        requests: fc.nat(),
        responses: fc.nat(),
        requestBytes: fc.nat(),
        responseBytes: fc.nat(),
      })
      .map((value) => ({ case: "windowUpdate" as const, value })),
    fc
      .record({ reason: fc.nat({ max: 8 }), message: text, reconnectTo: text })
      .map((value) => ({ case: "goaway" as const, value })),
  )
  .map((value) => create(FrameSchema, { value }) as Frame);

const anyFrame = fc.oneof(sentResponse, sentAck, frame, controlFrame);

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

  it("writes exactly toBinary's bytes for a delta ACK as a client sends it (written by its own path)", () => {
    fc.assert(
      fc.property(sentAck, fc.nat({ max: 8 }), (f, prefix) => expectEncodes(f, prefix)),
      { numRuns: 400 },
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
      fc.property(anyFrame, fc.uint8Array({ maxLength: 64 }), (f, tail) => {
        let decoded: Frame;
        try {
          decoded = fromBinary(FrameSchema, new Uint8Array([...toBinary(FrameSchema, f), ...tail]));
        } catch {
          return; // the appended bytes do not decode: nothing to write
        }
        expectEncodes(decoded, 5);
        expectEncodes(batchOf([decoded, f]), 0);
      }),
      { numRuns: 500 },
    );
  });

  it("writes large requests and responses (multi-byte lengths at every level) as toBinary does", () => {
    const payload = new Uint8Array(70_000).map((_, i) => (i * 7) % 256);
    const request = create(FrameSchema, {
      value: {
        case: "request",
        value: create(DiscoveryRequestSchema, {
          typeUrl: "bench",
          errorDetail: { code: -3, details: [{ typeUrl: "bench", value: payload }] },
        }),
      },
    }) as Frame;
    const response = create(FrameSchema, {
      value: {
        case: "response",
        value: create(DiscoveryResponseSchema, {
          typeUrl: "bench",
          nonce: "ü".repeat(200),
          resources: [
            { typeUrl: "bench", value: payload },
            { typeUrl: "", value: payload.subarray(0, 130) },
          ],
        }),
      },
    }) as Frame;
    expectEncodes(request, 5);
    expectEncodes(response, 0);
    expectEncodes(batchOf([request, response, request]), 5);
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
