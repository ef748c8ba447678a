// The byte credit of a frame is its protobuf-encoded length. `weighFrame`
// computes it without encoding; these properties check it against an
// independent computation (protobuf-es's toBinary), for frames built here and
// for frames decoded from arbitrary bytes (unknown fields, odd encodings).
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { DeltaDiscoveryResponseSchema } from "../../src/gen/kds/v1/discovery_pb.ts";
import { frame, sentAck, sentResponse } from "../support/frame-arbitraries.ts";
import { scanFrame, scanRefusal } from "../../src/mux/frame-scan.ts";
import { MAX_FRAME_ELEMENTS, frameRefusal } from "../../src/mux/frame-limits.ts";
import { creditSize, rememberWeight, utf8Length, weighFrame } from "../../src/mux/frame-size.ts";

describe("creditSize", () => {
  it("is the length protobuf-es encodes the frame to, for any frame", () => {
    fc.assert(
      fc.property(frame, (f) => {
        expect(creditSize(f)).toBe(toBinary(FrameSchema, f).byteLength);
      }),
      { numRuns: 400 },
    );
  });

  it("is the length of a delta response as a server sends it (measured by its own walk)", () => {
    fc.assert(
      fc.property(sentResponse, (f) => {
        expect(creditSize(f)).toBe(toBinary(FrameSchema, f).byteLength);
      }),
      { numRuns: 400 },
    );
  });

  it("is the length of a delta ACK as a client sends it (measured by its own walk)", () => {
    fc.assert(
      fc.property(sentAck, (f) => {
        expect(creditSize(f)).toBe(toBinary(FrameSchema, f).byteLength);
      }),
      { numRuns: 400 },
    );
  });

  it("is the length of a batch and of every frame inside it", () => {
    fc.assert(
      fc.property(fc.array(frame, { maxLength: 6 }), (frames) => {
        const batch = create(FrameSchema, { value: { case: "batch", value: { frames } } });
        expect(creditSize(batch)).toBe(toBinary(FrameSchema, batch).byteLength);
      }),
      { numRuns: 100 },
    );
  });

  it("is the canonical length of a frame decoded from any bytes that decode, unknown fields included", () => {
    fc.assert(
      fc.property(frame, fc.uint8Array({ maxLength: 64 }), (f, tail) => {
        let decoded: Frame;
        try {
          decoded = fromBinary(FrameSchema, new Uint8Array([...toBinary(FrameSchema, f), ...tail]));
        } catch {
          return; // the appended bytes do not decode: nothing to measure
        }
        expect(creditSize(decoded)).toBe(toBinary(FrameSchema, decoded).byteLength);
      }),
      { numRuns: 400 },
    );
  });

  it("counts strings in UTF-8 as TextEncoder writes them, lone surrogates included", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary" }), (s) => {
        expect(utf8Length(s)).toBe(new TextEncoder().encode(s).byteLength);
      }),
      { numRuns: 500 },
    );
    expect(utf8Length("\ud800")).toBe(3);
    expect(utf8Length("\ud83d\ude00")).toBe(4);
  });
});

describe("weighFrame", () => {
  it("estimates far more memory than wire bytes for a frame of empty elements, and little more for a real response", () => {
    const empties = create(FrameSchema, {
      value: {
        case: "deltaResponse",
        value: create(DeltaDiscoveryResponseSchema, {
          typeUrl: "t",
          removedResources: Array.from({ length: 10_000 }, () => ""),
        }),
      },
    });
    const emptyMessages = create(FrameSchema, {
      value: {
        case: "deltaResponse",
        value: create(DeltaDiscoveryResponseSchema, {
          typeUrl: "t",
          resources: Array.from({ length: 10_000 }, () => ({})),
        }),
      },
    });
    const real = create(FrameSchema, {
      value: {
        case: "deltaResponse",
        value: create(DeltaDiscoveryResponseSchema, {
          typeUrl: "type.googleapis.com/kds.v1.Dataplane",
          nonce: "7",
          resources: Array.from({ length: 1000 }, (_, i) => ({
            name: `zone-1.dp-${i}`,
            version: `v${i}`,
            resource: {
              typeUrl: "type.googleapis.com/kds.v1.Dataplane",
              value: new Uint8Array(200),
            },
          })),
        }),
      },
    });
    const ratio = (f: Frame): number => {
      const w = weighFrame(f);
      return (w.wireBytes + w.heapBytes) / w.wireBytes;
    };
    expect(ratio(real)).toBeLessThan(4);
    expect(ratio(empties)).toBeGreaterThan(4);
    expect(ratio(emptyMessages)).toBeGreaterThan(40);
  });

  it("returns the weight remembered for a decoded frame, for the frame weighed next and for frames remembered before it", () => {
    // Marked weights (no walk finds them): each frame's own comes back, whichever order they are weighed in.
    const frames = Array.from({ length: 3 }, (_, i) =>
      create(FrameSchema, {
        value: {
          case: "deltaResponse",
          value: create(DeltaDiscoveryResponseSchema, { nonce: `n${i}` }),
        },
      }),
    );
    const marked = frames.map((_, i) => ({ wireBytes: 1000 + i, heapBytes: 7, elements: 1 }));
    for (const [i, f] of frames.entries()) rememberWeight(f, marked[i] as (typeof marked)[number]);
    expect(weighFrame(frames[2] as Frame)).toBe(marked[2]); // the last remembered
    expect(weighFrame(frames[0] as Frame)).toBe(marked[0]); // remembered while another waited
    expect(weighFrame(frames[1] as Frame)).toBe(marked[1]);
    // A frame nobody remembered is walked: its real encoded length.
    const walked = create(FrameSchema, {
      value: { case: "deltaResponse", value: create(DeltaDiscoveryResponseSchema, { nonce: "w" }) },
    });
    expect(weighFrame(walked).wireBytes).toBe(toBinary(FrameSchema, walked).length);
  });
});

/** Frames without free-form node metadata (a JSON object decoded, which the two estimates count differently). */
const plainFrame = frame.filter(
  (f) => !(f.value.case === "request" && f.value.value.node?.metadata !== undefined),
);

describe("scanFrame", () => {
  it("finds in the encoded bytes the same weight weighFrame finds in the decoded frame", () => {
    fc.assert(
      fc.property(plainFrame, (f) => {
        expect(scanFrame(toBinary(FrameSchema, f))).toEqual(weighFrame(f));
      }),
      { numRuns: 400 },
    );
    fc.assert(
      fc.property(fc.array(plainFrame, { maxLength: 5 }), (frames) => {
        const batch = create(FrameSchema, { value: { case: "batch", value: { frames } } });
        expect(scanFrame(toBinary(FrameSchema, batch))).toEqual(weighFrame(batch));
      }),
      { numRuns: 100 },
    );
  });

  it("never throws on arbitrary bytes, and refuses no canonical encoding of what the decoder reads unless weighFrame refuses it too", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
        scanRefusal(bytes); // may refuse bytes the lenient decoder reads (a known field with another wire type), but never throws
        let decoded: Frame | undefined;
        try {
          decoded = fromBinary(FrameSchema, bytes);
        } catch {
          decoded = undefined;
        }
        if (decoded === undefined) return;
        const canonical = toBinary(FrameSchema, decoded);
        if (scanRefusal(canonical) !== undefined)
          expect(frameRefusal(weighFrame(decoded))).toBeDefined();
      }),
      { numRuns: 2000 },
    );
  });

  it("refuses what the decoder would read differently from the scan: a known field with another wire type, and nesting past its depth", () => {
    // A ping whose id (a varint) arrives length-delimited, holding 200,000 fields the decoder would read as unknown ones.
    const inner = new Uint8Array(400_000);
    for (let i = 0; i < inner.length; i += 2) inner[i] = 0x10; // field 2, varint 0
    const ping = concat(tagAndLength(0x5a, concat(tagAndLength(0x0a, inner))));
    expect(fromBinary(FrameSchema, ping).value.case).toBe("ping"); // the decoder takes it
    expect(scanRefusal(ping)).toMatch(
      /not a well-formed kds.mux.v1.Frame: field 1 arrives with wire type 2, not its own/,
    );
    // Batches nested 40 deep (the decoder reads up to 100).
    let nested = toBinary(
      FrameSchema,
      create(FrameSchema, { value: { case: "ping", value: { id: 1n } } }),
    );
    for (let i = 0; i < 40; i++)
      nested = toBinary(
        FrameSchema,
        create(FrameSchema, {
          value: { case: "batch", value: { frames: [fromBinary(FrameSchema, nested)] } },
        }),
      );
    expect(scanRefusal(nested)).toMatch(/nests deeper than 32/);
    expect(scanRefusal(new Uint8Array([0x0a, 0x05, 0x01]))).toMatch(/not a well-formed/);
  });

  it("refuses, without decoding, a frame of too many empty strings and one of empty messages", () => {
    const strings = create(FrameSchema, {
      value: {
        case: "deltaResponse",
        value: create(DeltaDiscoveryResponseSchema, {
          typeUrl: "t",
          removedResources: Array.from({ length: MAX_FRAME_ELEMENTS + 1 }, () => ""),
        }),
      },
    });
    expect(scanRefusal(toBinary(FrameSchema, strings))).toMatch(/over the 524288 a frame may hold/);
    const messages = create(FrameSchema, {
      value: {
        case: "deltaResponse",
        value: create(DeltaDiscoveryResponseSchema, {
          typeUrl: "t",
          resources: Array.from({ length: 50_000 }, () => ({})),
        }),
      },
    });
    expect(scanRefusal(toBinary(FrameSchema, messages))).toMatch(/over 16 times its length/);
    // The same frames, decoded, are refused alike.
    expect(frameRefusal(weighFrame(strings))).toMatch(/over the 524288/);
    expect(frameRefusal(weighFrame(messages))).toMatch(/over 16 times/);
  });
});

/** A length-delimited field: `tag`, the varint length of `body`, `body`. */
function tagAndLength(tag: number, body: Uint8Array): Uint8Array[] {
  const length: number[] = [];
  let n = body.length;
  while (n >= 0x80) {
    length.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  length.push(n);
  return [new Uint8Array([tag, ...length]), body];
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, p) => sum + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
