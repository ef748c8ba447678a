// A frame written from preset pieces (src/mux/frame-bytes.ts) must be byte
// for byte what protobuf-es encodes for the same message, so that a peer
// decodes the same frame and its credit size is the same number: checked
// against toBinary for arbitrary responses, and inside batches.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import {
  DeltaDiscoveryRequestSchema,
  DeltaDiscoveryResponseSchema,
  ResourceSchema,
} from "../../src/gen/kds/v1/discovery_pb.ts";
import type { WireResource } from "../../src/discovery/types.ts";
import { deltaResponseEncoding } from "../../src/discovery/response-bytes.ts";
import {
  presetEncoding,
  presetFrameEncoding,
  presetFrameLength,
  type EncodedPieces,
} from "../../src/mux/frame-bytes.ts";
import { creditSize } from "../../src/mux/frame-size.ts";
import { requestFrame, responseFrame } from "../../src/mux/frames.ts";

const text = fc.oneof(
  fc.string(),
  fc.string({ unit: "binary" }),
  fc.string({ unit: "grapheme" }),
  fc.constant(""),
);

/** A resource as the snapshot cache holds it, its delta entry encoded on its own. */
const wireResource = fc
  .record({
    key: text,
    version: text,
    typeUrl: text,
    value: fc.uint8Array({ maxLength: 300 }),
  })
  .map(({ key, version, typeUrl, value }): WireResource => {
    const any = create(AnySchema, { typeUrl, value });
    const resource = create(ResourceSchema, { name: key, version, resource: any });
    const body = toBinary(ResourceSchema, resource);
    const entry = new Uint8Array(body.byteLength + 6);
    const head = lengthPrefix(0x12, body.byteLength);
    entry.set(head);
    entry.set(body, head.byteLength);
    return {
      key,
      version,
      any,
      resource,
      anyBytes: toBinary(AnySchema, any).byteLength,
      resourceBytes: body.byteLength,
      deltaEntry: entry.subarray(0, head.byteLength + body.byteLength),
    };
  });

function lengthPrefix(tag: number, length: number): Uint8Array {
  const out = [tag];
  let n = length;
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return new Uint8Array(out);
}

const joined = (e: EncodedPieces): Uint8Array => {
  const out = new Uint8Array(e.byteLength);
  let at = 0;
  for (const p of e.pieces) {
    out.set(p, at);
    at += p.byteLength;
  }
  expect(at).toBe(e.byteLength);
  return out;
};

const response = fc.record({
  version: text,
  typeUrl: text,
  nonce: text,
  upserts: fc.array(wireResource, { maxLength: 5 }),
  removed: fc.array(text, { maxLength: 5 }),
});

/** The response as the discovery server builds it, with its preset encoding. */
function presetResponse(r: {
  version: string;
  typeUrl: string;
  nonce: string;
  upserts: WireResource[];
  removed: string[];
}) {
  const message = create(DeltaDiscoveryResponseSchema, {
    systemVersionInfo: r.version,
    typeUrl: r.typeUrl,
    nonce: r.nonce,
    resources: r.upserts.map((u) => u.resource),
    removedResources: r.removed,
  });
  const encoding = deltaResponseEncoding(r.version, r.typeUrl, r.nonce, r.upserts, r.removed);
  if (encoding === undefined) throw new Error("every resource has its entry");
  presetEncoding(message, encoding);
  return { message, encoding };
}

describe("preset frame bytes", () => {
  it("encode a delta response exactly as toBinary does, for any fields", () => {
    fc.assert(
      fc.property(response, (r) => {
        const { message, encoding } = presetResponse(r);
        expect(joined(encoding)).toEqual(toBinary(DeltaDiscoveryResponseSchema, message));
        const frame = responseFrame(message);
        const bytes = joined(presetFrameEncoding(frame) as EncodedPieces);
        expect(bytes).toEqual(toBinary(FrameSchema, frame));
        expect(presetFrameLength(frame)).toBe(creditSize(frame));
        expect(fromBinary(FrameSchema, bytes)).toEqual(frame);
      }),
      { numRuns: 300 },
    );
  });

  it("encode a batch of preset and plain frames exactly as toBinary does", () => {
    const plain = text.map((nonce) =>
      requestFrame(create(DeltaDiscoveryRequestSchema, { typeUrl: "t", responseNonce: nonce })),
    );
    const preset = response.map((r) => responseFrame(presetResponse(r).message));
    fc.assert(
      fc.property(fc.array(fc.oneof(plain, preset), { minLength: 1, maxLength: 5 }), (frames) => {
        const batch = create(FrameSchema, { value: { case: "batch", value: { frames } } });
        const preset = presetFrameEncoding(batch);
        if (frames.some((f) => presetFrameLength(f) !== undefined))
          expect(joined(preset as EncodedPieces)).toEqual(toBinary(FrameSchema, batch));
        else expect(preset).toBeUndefined();
      }),
      { numRuns: 100 },
    );
  });

  it("share each resource's bytes between responses and keep what differs per response their own", () => {
    const [a, b, c] = fc.sample(wireResource, 3) as [WireResource, WireResource, WireResource];
    const zone1 = presetResponse({
      version: "v",
      typeUrl: "t",
      nonce: "1",
      upserts: [a, b],
      removed: [],
    });
    const zone2 = presetResponse({
      version: "v",
      typeUrl: "t",
      nonce: "17",
      upserts: [a, b],
      removed: ["gone"],
    });
    const zone3 = presetResponse({
      version: "w",
      typeUrl: "t",
      nonce: "1",
      upserts: [c],
      removed: [],
    });
    expect(zone1.encoding.pieces).toContain(a.deltaEntry);
    expect(zone2.encoding.pieces).toContain(a.deltaEntry);
    expect(zone3.encoding.pieces).not.toContain(a.deltaEntry);
    const decoded = [zone1, zone2, zone3].map(({ encoding }) =>
      fromBinary(DeltaDiscoveryResponseSchema, joined(encoding)),
    );
    expect(decoded.map((d) => [d.nonce, d.systemVersionInfo, d.removedResources])).toEqual([
      ["1", "v", []],
      ["17", "v", ["gone"]],
      ["1", "w", []],
    ]);
    expect(decoded.map((d) => d.resources.map((r) => r.name))).toEqual([
      [a.key, b.key],
      [a.key, b.key],
      [c.key],
    ]);
  });

  it("leave a response with a resource lacking its entry to toBinary", () => {
    const [a] = fc.sample(wireResource, 1) as [WireResource];
    const { deltaEntry: _, ...bare } = a;
    expect(deltaResponseEncoding("v", "t", "1", [a, bare], [])).toBeUndefined();
    const message = create(DeltaDiscoveryResponseSchema, { typeUrl: "t", nonce: "1" });
    const frame: Frame = responseFrame(message);
    expect(presetFrameLength(frame)).toBeUndefined();
    expect(presetFrameEncoding(frame)).toBeUndefined();
  });
});
