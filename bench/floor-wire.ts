// The bytes the floors of the bench send (bench/sync-floor.ts, the fan-out
// floor in bench/fanout.ts, the raw HTTP/2 echo in bench/echo.ts): mux frames
// built with plain protobuf-es (create, toBinary, fromBinary, no hand-written
// encoder), gRPC length-prefixed, and a reader that splits a byte stream back
// into those frames. The one place the floors name the mux frame's schema.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { anyPack, anyUnpack, timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  MeshSpecSchema,
  TrafficPolicySpecSchema,
  exampleTypes,
} from "../examples/example-kinds/index.ts";
import { FrameSchema, type Frame } from "../src/gen/kds/mux/v1/mux_pb.ts";
import { DeltaDiscoveryResponseSchema, ResourceSchema } from "../src/gen/kds/v1/discovery_pb.ts";
import { KdsResourceSchema } from "../src/gen/kds/v1/resource_pb.ts";
import { createTypeRegistry } from "../src/kinds/builtin-types.ts";

const registry = createTypeRegistry(exampleTypes);
const typeUrlOf = (kind: string): string => registry.get(kind).typeUrl;

/** gRPC's 5-byte prefix (not compressed, big-endian length) in front of `body`. */
export function lengthPrefixed(body: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + body.byteLength);
  new DataView(out.buffer).setUint32(1, body.byteLength);
  out.set(body, 5);
  return out;
}

/**
 * Splits a byte stream into gRPC length-prefixed bodies: push() each chunk as
 * it arrives, get every body it completed. Bounded by `maxBodyBytes`.
 */
export class PrefixedReader {
  #pending: Uint8Array[] = [];
  #pendingBytes = 0;
  constructor(readonly maxBodyBytes: number) {}

  push(chunk: Uint8Array): Uint8Array[] {
    this.#pending.push(chunk);
    this.#pendingBytes += chunk.byteLength;
    const bodies: Uint8Array[] = [];
    for (;;) {
      if (this.#pendingBytes < 5) return bodies;
      const head = this.#take(5, false);
      const length = new DataView(head.buffer, head.byteOffset, 5).getUint32(1);
      if (length > this.maxBodyBytes)
        throw new Error(`a frame of ${length} bytes exceeds ${this.maxBodyBytes}`);
      if (this.#pendingBytes < 5 + length) return bodies;
      this.#take(5, true);
      bodies.push(this.#take(length, true));
    }
  }

  /** The first `n` pending bytes, removed when `consume`. */
  #take(n: number, consume: boolean): Uint8Array {
    const first = this.#pending[0] as Uint8Array;
    let out: Uint8Array;
    if (first.byteLength >= n) out = first.subarray(0, n);
    else {
      out = new Uint8Array(n);
      let at = 0;
      for (const c of this.#pending) {
        const part = c.subarray(0, Math.min(c.byteLength, n - at));
        out.set(part, at);
        at += part.byteLength;
        if (at === n) break;
      }
    }
    if (consume) {
      let left = n;
      while (left > 0) {
        const c = this.#pending[0] as Uint8Array;
        if (c.byteLength <= left) {
          this.#pending.shift();
          left -= c.byteLength;
        } else {
          this.#pending[0] = c.subarray(left);
          left = 0;
        }
      }
      this.#pendingBytes -= n;
    }
    return out;
  }
}

/** The sync scenario's policy `i` (bench/sync.ts writes the same spec) as a wire Resource, built by protobuf-es reflection. */
function policyResource(i: number) {
  const now = timestampFromMs(Date.UTC(2026, 0, 1));
  const kds = create(KdsResourceSchema, {
    meta: {
      name: `policy-${i}`,
      mesh: "default",
      labels: { "kds.io/origin": "global" },
      version: String(i + 1),
      creationTime: now,
      modificationTime: now,
    },
    spec: anyPack(
      TrafficPolicySpecSchema,
      create(TrafficPolicySpecSchema, {
        services: [`svc-${i % 100}`],
        timeoutMs: 1000,
        retries: 2,
      }),
    ),
  });
  return create(ResourceSchema, {
    name: `default/policy-${i}`,
    version: String(i + 1),
    resource: anyPack(KdsResourceSchema, kds),
  });
}

/**
 * The sync floor's frames, built (not yet encoded): `n` policies in delta
 * responses, each frame holding resources until its body reaches
 * `partBytes` (the global streams a change in parts of 512 KiB).
 */
export function policyFrames(n: number, partBytes = 512 * 1024): Frame[] {
  const typeUrl = typeUrlOf("TrafficPolicy");
  const frames: Frame[] = [];
  let batch: ReturnType<typeof policyResource>[] = [];
  let batchBytes = 0;
  const flush = (): void => {
    frames.push(
      create(FrameSchema, {
        value: {
          case: "deltaResponse",
          value: create(DeltaDiscoveryResponseSchema, {
            typeUrl,
            nonce: String(frames.length + 1),
            systemVersionInfo: String(n),
            resources: batch,
          }),
        },
      }),
    );
    batch = [];
    batchBytes = 0;
  };
  for (let i = 0; i < n; i++) {
    const r = policyResource(i);
    batch.push(r);
    batchBytes += toBinary(ResourceSchema, r).byteLength + 4;
    if (batchBytes >= partBytes) flush();
  }
  if (batch.length > 0) flush();
  return frames;
}

/** The sync floor's encode: each frame with protobuf-es, length-prefixed. */
export function encodeFrames(frames: readonly Frame[]): Uint8Array[] {
  return frames.map((f) => lengthPrefixed(toBinary(FrameSchema, f)));
}

/** The sync floor's decode of one frame body: the mux frame, each resource's envelope and its spec, as the zone does. Returns the resources in it. */
export function decodePolicyFrame(body: Uint8Array): number {
  const frame = fromBinary(FrameSchema, body);
  if (frame.value.case !== "deltaResponse") throw new Error("expected a delta response");
  let count = 0;
  for (const r of frame.value.value.resources) {
    if (r.resource === undefined) throw new Error(`resource ${r.name} is empty`);
    const kds = anyUnpack(r.resource, KdsResourceSchema);
    if (kds?.spec === undefined) throw new Error(`resource ${r.name} has no spec`);
    const spec = anyUnpack(kds.spec, TrafficPolicySpecSchema);
    if (spec === undefined) throw new Error(`resource ${r.name} is not a TrafficPolicy`);
    count++;
  }
  return count;
}

/** The fan-out floor's bytes: a length-prefixed mux frame carrying the Mesh `description`, as one change of the fan-out scenario. */
export function meshChangeFrame(description: string): Uint8Array {
  const now = timestampFromMs(Date.UTC(2026, 0, 1));
  const kds = create(KdsResourceSchema, {
    meta: {
      name: "default",
      labels: { "kds.io/origin": "global" },
      version: "2",
      creationTime: now,
      modificationTime: now,
    },
    spec: anyPack(MeshSpecSchema, create(MeshSpecSchema, { description })),
  });
  return lengthPrefixed(
    toBinary(
      FrameSchema,
      create(FrameSchema, {
        value: {
          case: "deltaResponse",
          value: create(DeltaDiscoveryResponseSchema, {
            typeUrl: typeUrlOf("Mesh"),
            nonce: "1",
            systemVersionInfo: "2",
            resources: [
              create(ResourceSchema, {
                name: "default",
                version: "2",
                resource: anyPack(KdsResourceSchema, kds),
              }),
            ],
          }),
        },
      }),
    ),
  );
}
