// The published protocol test vectors (docs/protocol/vectors/*.json) against
// the code: each file's credit size, element count, verdict and reason are
// what the receiver's own checks decide for its bytes (judgeFrame), and the
// files are exactly what scripts/protocol-vectors.ts writes from the code's
// encoders and limits. A change to a limit or a check fails here until the
// vectors are regenerated (npx tsx scripts/protocol-vectors.ts).
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { fromHex, protocolVectors, vectorFile } from "../../src/conformance/vector-cases.ts";
import { judgeFrame, type VectorContext } from "../../src/conformance/vector-judge.ts";
import { FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { laneOf } from "../../src/mux/frames.ts";

const dir = resolve(import.meta.dirname, "../../docs/protocol/vectors");

interface StoredVector {
  name: string;
  description: string;
  frame: string;
  wireBytes: number;
  creditSize: number | null;
  elements: number | null;
  context?: VectorContext;
  verdict: "accept" | "refuse";
  reason?: string;
}

const files = readdirSync(dir).filter((f) => f.endsWith(".json"));
const stored = files.map(
  (f) => [f, JSON.parse(readFileSync(join(dir, f), "utf8")) as StoredVector] as const,
);

describe("protocol test vectors", () => {
  it("publishes at least 60, each named as its file", () => {
    expect(files.length).toBeGreaterThanOrEqual(60);
    for (const [file, v] of stored) expect(`${v.name}.json`).toBe(file);
  });

  it("every vector is what the code decides for its bytes", () => {
    for (const [file, v] of stored) {
      const bytes = fromHex(v.frame);
      const judged = judgeFrame(bytes, v.context);
      expect(
        {
          wireBytes: v.wireBytes,
          creditSize: v.creditSize,
          elements: v.elements,
          verdict: v.verdict,
          reason: v.reason,
        },
        file,
      ).toEqual({
        wireBytes: bytes.length,
        creditSize: judged.creditSize ?? null,
        elements: judged.elements ?? null,
        verdict: judged.verdict,
        reason: judged.reason,
      });
    }
  });

  it("the files are exactly what the generator writes from the code (regenerate after a change)", () => {
    const generated = new Map(protocolVectors().map((v) => [`${v.name}.json`, vectorFile(v)]));
    expect([...generated.keys()].sort()).toEqual([...files].sort());
    for (const file of files)
      expect(readFileSync(join(dir, file), "utf8"), file).toBe(generated.get(file));
  });

  it("a data frame's credit is its decoded frame encoded again by protobuf-es (a batch: its members'), whatever the wire held", () => {
    let checked = 0;
    for (const [file, v] of stored) {
      if (v.creditSize === null) continue;
      const frame = fromBinary(FrameSchema, fromHex(v.frame));
      const flat = (f: Frame): Frame[] =>
        f.value.case === "batch" ? f.value.value.frames.flatMap(flat) : [f];
      const reencoded = flat(frame)
        .filter((m) => laneOf(m) !== "control")
        .reduce((n, m) => n + toBinary(FrameSchema, m).length, 0);
      expect(v.creditSize, file).toBe(reencoded);
      checked++;
    }
    expect(checked).toBeGreaterThan(40);
  });

  it("covers every frame kind, every reason, limits on both sides of each bound, and non-canonical encodings", () => {
    const kinds = new Set<string>();
    for (const [, v] of stored) {
      if (v.creditSize === null) continue;
      const frame = fromBinary(FrameSchema, fromHex(v.frame));
      if (frame.value.case !== undefined) kinds.add(frame.value.case);
      if (frame.value.case === "call" && frame.value.value.kind.case !== undefined)
        kinds.add(`call.${frame.value.value.kind.case}`);
    }
    expect([...kinds].sort()).toEqual(
      [
        "request",
        "response",
        "deltaRequest",
        "deltaResponse",
        "hello",
        "ping",
        "pong",
        "windowUpdate",
        "goaway",
        "batch",
        "call",
        "call.open",
        "call.head",
        "call.data",
        "call.end",
        "call.cancel",
        "call.credit",
      ].sort(),
    );
    const reasons = new Set(stored.map(([, v]) => v.reason).filter((r) => r !== undefined));
    expect([...reasons].sort()).toEqual(
      [
        "too-large",
        "malformed",
        "elements",
        "expansion",
        "unknown-kind",
        "batch-member",
        "hello",
        "overrun.frame",
        "overrun.byte",
        "window-cap",
      ].sort(),
    );
    const names = new Set(stored.map(([, v]) => v.name));
    for (const bound of ["max-message-bytes", "elements", "expansion", "depth"]) {
      expect(names.has(`limit.${bound}-at`), bound).toBe(true);
      expect(names.has(`limit.${bound}-past`), bound).toBe(true);
    }
    for (const [at, past] of [
      ["credit.byte-at", "credit.byte-past"],
      ["credit.frame-at", "credit.frame-past"],
      ["window.frames-cap-at", "window.frames-cap-past"],
      ["window.bytes-cap-at", "window.bytes-cap-past"],
    ] as const) {
      expect(stored.find(([, v]) => v.name === at)?.[1].verdict, at).toBe("accept");
      expect(stored.find(([, v]) => v.name === past)?.[1].verdict, past).toBe("refuse");
    }
    // Encodings where the credit differs from the wire length, both ways.
    const differ = stored.filter(
      ([, v]) => v.creditSize !== null && v.creditSize > 0 && v.creditSize !== v.wireBytes,
    );
    expect(differ.some(([, v]) => (v.creditSize ?? 0) < v.wireBytes)).toBe(true);
    expect(differ.some(([, v]) => (v.creditSize ?? 0) > v.wireBytes)).toBe(true);
  });
});
