// The hand-written envelope encoder must produce exactly what the reflective
// encoder describes: same decoded message, and the sizes the discovery layer
// budgets with.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { AnySchema, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { ResourceSchema } from "../../src/gen/kds/v1/discovery_pb.ts";
import { KdsResourceSchema } from "../../src/gen/kds/v1/resource_pb.ts";
import { TrafficPolicySpecSchema, exampleTypes } from "../../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { KDS_RESOURCE_TYPE_URL, fromWire, toWire } from "../../src/sync/wire.ts";

describe("wire envelope", () => {
  it("encodes meta and spec as a KdsResource, with exact sizes", async () => {
    const types = createTypeRegistry(exampleTypes);
    const store = new InMemoryStore(types);
    const stored = await store.put({
      kind: "TrafficPolicy",
      mesh: "mesh-1",
      name: "p.1",
      labels: { app: "wéb", team: "" },
      spec: create(TrafficPolicySpecSchema, { services: ["a", "b"], timeoutMs: 1500, retries: 3 }),
    });
    const type = types.get("TrafficPolicy");
    const wire = toWire(type, stored);
    const envelope = fromBinary(KdsResourceSchema, wire.any.value);
    expect(envelope.meta).toMatchObject({
      name: "p.1",
      mesh: "mesh-1",
      labels: { app: "wéb", team: "" },
      version: stored.meta.version,
    });
    expect(envelope.meta?.creationTime).toEqual(timestampFromDate(stored.meta.creationTime));
    expect(envelope.spec?.typeUrl).toBe(type.typeUrl);
    expect(fromBinary(TrafficPolicySpecSchema, envelope.spec?.value ?? new Uint8Array())).toEqual(
      stored.spec,
    );
    expect(wire.anyBytes).toBe(toBinary(AnySchema, wire.any).byteLength);
    expect(wire.resourceBytes).toBe(toBinary(ResourceSchema, wire.resource).byteLength);
    const decoded = fromWire(type, wire.any, wire.key);
    expect(decoded).toMatchObject({
      key: "mesh-1/p.1",
      name: "p.1",
      mesh: "mesh-1",
      version: stored.meta.version,
    });
    expect(decoded.creationTime?.getTime()).toBe(stored.meta.creationTime.getTime());
  });

  it.each([
    ["Uint8Array", (n: number): Uint8Array => new Uint8Array(n)],
    // What Node's HTTP/2 stream hands over: Buffer's own slice() is a view, not a copy.
    ["Buffer", (n: number): Uint8Array => Buffer.alloc(n)],
  ])(
    "decodes a spec from its own copy of its bytes, so a kept spec pins no larger received buffer (%s)",
    async (_name, allocate) => {
      const types = createTypeRegistry(exampleTypes);
      const type = types.get("TrafficPolicy");
      const stored = await new InMemoryStore(types).put({
        kind: "TrafficPolicy",
        mesh: "m",
        name: "p",
        spec: create(TrafficPolicySpecSchema, { timeoutMs: 5 }),
      });
      const wire = toWire(type, stored);
      // An unknown field in the spec (field 99, bytes): the decoder keeps it as a view into what it decoded.
      const envelope = fromBinary(KdsResourceSchema, wire.any.value);
      const spec = envelope.spec as { value: Uint8Array };
      spec.value = new Uint8Array([...spec.value, 0x9a, 0x06, 3, 1, 2, 3]);
      const value = toBinary(KdsResourceSchema, envelope);
      // The resource as a view into a much larger buffer, as a received response holds it.
      const response = allocate(1 << 20);
      response.set(value, 1000);
      const decoded = fromWire(type, {
        ...wire.any,
        value: response.subarray(1000, 1000 + value.length),
      });
      const unknown = (decoded.spec as { $unknown?: Array<{ data: Uint8Array }> }).$unknown;
      expect(unknown?.[0]?.data).toEqual(new Uint8Array([3, 1, 2, 3])); // length-prefixed, as the decoder keeps it
      expect(unknown?.[0]?.data.buffer.byteLength).toBeLessThan(100);
      expect(decoded.specBytes.buffer.byteLength).toBeLessThan(100);
      expect(decoded.spec).toMatchObject({ timeoutMs: 5 });
    },
  );

  it("decodes a spec of scalars straight from the received bytes, and a spec with bytes fields from its own copy", async () => {
    // TrafficPolicySpec has scalar fields only: without unknown fields the decoded spec holds no view, so no copy is made.
    const types = createTypeRegistry([
      ...exampleTypes,
      { kind: "Blob", schema: AnySchema, direction: "global-to-zone", scope: "cluster" },
    ]);
    const store = new InMemoryStore(types);
    const received = async (
      input: Parameters<InMemoryStore["put"]>[0],
    ): Promise<{ decoded: ReturnType<typeof fromWire>; response: Uint8Array }> => {
      const type = types.get(input.kind);
      const wire = toWire(type, await store.put(input));
      const response = Buffer.alloc(1 << 20);
      response.set(wire.any.value, 1000);
      const value = new Uint8Array(
        response.buffer,
        response.byteOffset + 1000,
        wire.any.value.length,
      );
      return { decoded: fromWire(type, { ...wire.any, value }), response };
    };
    const policy = await received({
      kind: "TrafficPolicy",
      mesh: "m",
      name: "p",
      spec: create(TrafficPolicySpecSchema, { services: ["a"], timeoutMs: 5 }),
    });
    expect(policy.decoded.spec).toEqual(
      create(TrafficPolicySpecSchema, { services: ["a"], timeoutMs: 5 }),
    );
    expect(policy.decoded.specBytes.buffer).toBe(policy.response.buffer);
    // google.protobuf.Any has a bytes field, which the decoded spec keeps as a view: decoded from a copy.
    const blob = await received({
      kind: "Blob",
      name: "b",
      spec: create(AnySchema, { typeUrl: "x", value: new Uint8Array([1, 2, 3]) }),
    });
    expect((blob.decoded.spec as unknown as { value: Uint8Array }).value).toEqual(
      new Uint8Array([1, 2, 3]),
    );
    expect(
      (blob.decoded.spec as unknown as { value: Uint8Array }).value.buffer.byteLength,
    ).toBeLessThan(100);
    expect(blob.decoded.specBytes.buffer.byteLength).toBeLessThan(100);
  });

  it("decodes each spec of scalars into a message of its own, the one fromBinary makes: same fields in the same order, lists not shared", async () => {
    const types = createTypeRegistry(exampleTypes);
    const type = types.get("TrafficPolicy");
    const store = new InMemoryStore(types);
    const decode = async (
      name: string,
      spec: Parameters<typeof create<typeof TrafficPolicySpecSchema>>[1],
    ) => {
      const wire = toWire(
        type,
        await store.put({
          kind: "TrafficPolicy",
          mesh: "m",
          name,
          spec: create(TrafficPolicySpecSchema, spec),
        }),
      );
      const envelope = fromBinary(KdsResourceSchema, wire.any.value);
      return {
        decoded: fromWire(type, wire.any, wire.key).spec,
        reflective: fromBinary(TrafficPolicySpecSchema, envelope.spec?.value ?? new Uint8Array()),
      };
    };
    const empty = await decode("empty", {});
    const full = await decode("full", { services: ["a", "b"], timeoutMs: 7, retries: 2 });
    const other = await decode("other", { services: ["c"] });
    for (const { decoded, reflective } of [empty, full, other]) {
      expect(decoded).toEqual(reflective);
      expect(Object.keys(decoded)).toEqual(Object.keys(reflective));
      expect(Object.getPrototypeOf(decoded)).toBe(Object.getPrototypeOf(reflective));
    }
    const lists = [empty, full, other].map(
      ({ decoded }) => (decoded as unknown as { services: string[] }).services,
    );
    expect(new Set(lists).size).toBe(3);
    lists[0]?.push("x");
    expect((await decode("later", {})).decoded).toEqual(create(TrafficPolicySpecSchema));
  });

  it("decodes an envelope as the reflective decoder does: unknown fields, merged repeats, odd label keys; malformed bytes are invalid_resource", () => {
    const types = createTypeRegistry(exampleTypes);
    const type = types.get("TrafficPolicy");
    const spec = create(TrafficPolicySpecSchema, { services: ["a"], timeoutMs: 7 });
    const envelope = create(KdsResourceSchema, {
      meta: {
        name: "p",
        mesh: "m",
        labels: { ["__proto__"]: "x", "a.b/c": "é" },
        version: "9",
        creationTime: timestampFromDate(new Date(1_700_000_000_123)),
      },
      spec: create(AnySchema, {
        typeUrl: type.typeUrl,
        value: toBinary(TrafficPolicySpecSchema, spec),
      }),
    });
    // A second meta (merged: its version wins, the rest stays) and an unknown field of every wire type.
    const extra = toBinary(
      KdsResourceSchema,
      create(KdsResourceSchema, { meta: { version: "10", labels: { z: "1" } } }),
    );
    const unknown = new Uint8Array([
      0x98, 0x06, 0x01, 0xa2, 0x06, 0x02, 0x68, 0x69, 0xad, 0x06, 1, 2, 3, 4, 0xa9, 0x06, 1, 2, 3,
      4, 5, 6, 7, 8,
    ]);
    const bytes = new Uint8Array([...toBinary(KdsResourceSchema, envelope), ...unknown, ...extra]);
    const expected = fromBinary(KdsResourceSchema, bytes);
    const decoded = fromWire(
      type,
      create(AnySchema, { typeUrl: KDS_RESOURCE_TYPE_URL, value: bytes }),
      "m/p",
    );
    expect(decoded.version).toBe("10");
    expect(decoded.version).toBe(expected.meta?.version);
    expect({ ...decoded.labels }).toEqual({ ...expected.meta?.labels });
    expect(Object.getPrototypeOf(decoded.labels)).toBe(Object.prototype);
    expect(Object.keys(decoded.labels).sort()).toEqual(["__proto__", "a.b/c", "z"]);
    expect(decoded.creationTime?.getTime()).toBe(1_700_000_000_123);
    expect(decoded.modificationTime).toBeUndefined();
    expect(decoded.spec).toEqual(spec);
    const good = toBinary(KdsResourceSchema, envelope);
    const badUtf8 = toBinary(
      KdsResourceSchema,
      create(KdsResourceSchema, { meta: { name: "p\u00e9", mesh: "m" }, spec: envelope.spec }),
    );
    badUtf8[badUtf8.indexOf(0xc3)] = 0xff; // the name's "é" becomes invalid UTF-8
    for (const value of [
      good.subarray(0, good.length - 3),
      new Uint8Array([0x0a, 0x05, 0x0a, 0x09, 0x70]),
      badUtf8,
    ]) {
      expect(() =>
        fromWire(type, create(AnySchema, { typeUrl: KDS_RESOURCE_TYPE_URL, value })),
      ).toThrow(expect.objectContaining({ code: "invalid_resource" }));
    }
    expect(() =>
      fromWire(
        type,
        create(AnySchema, {
          typeUrl: KDS_RESOURCE_TYPE_URL,
          value: toBinary(KdsResourceSchema, create(KdsResourceSchema, { meta: envelope.meta })),
        }),
      ),
    ).toThrow(/lacks meta or spec/);
  });

  it("decodes every spec byte string as protobuf-es does: odd varints, repeats, wrong wire types, unknown fields, bad UTF-8, a BOM", () => {
    const types = createTypeRegistry(exampleTypes);
    const type = types.get("TrafficPolicy");
    // TrafficPolicySpec: 1 repeated string services, 2 uint32 timeout_ms, 3 uint32 retries.
    const text = (s: string): number[] => [...new TextEncoder().encode(s)];
    const str = (field: number, bytes: number[]): number[] => [
      (field << 3) | 2,
      bytes.length,
      ...bytes,
    ];
    const cases: Array<[string, number[]]> = [
      ["empty", []],
      ["all", [...str(1, text("a")), ...str(1, text("bé")), 0x10, 7, 0x18, 2]],
      ["last singular wins", [0x10, 1, 0x10, 2, 0x18, 0x7f, 0x18, 0x80, 0x01]],
      ["4-byte varint", [0x10, 0xff, 0xff, 0xff, 0x7f]],
      ["5-byte varint (2^28 and over)", [0x10, 0x80, 0x80, 0x80, 0x80, 0x01]],
      ["uint32 max", [0x10, 0xff, 0xff, 0xff, 0xff, 0x0f]],
      ["10-byte varint", [0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]],
      ["overlong zero", [0x10, 0x80, 0x00]],
      ["two-byte tag", [0x90, 0x00, 5]],
      ["unknown varint field", [0x20, 5, 0x10, 3]],
      ["unknown delimited field", [...str(9, text("xy")), 0x10, 3]],
      ["unknown field 64+", [0x80, 0x08, 1]],
      ["string as varint", [0x08, 1]],
      ["uint32 as fixed32", [0x15, 1, 0, 0, 0]],
      ["uint32 as delimited", [...str(2, [1, 2])]],
      ["BOM", [...str(1, [0xef, 0xbb, 0xbf, 0x61])]],
      ["long ASCII", [...str(1, text("x".repeat(40)))]],
      ["long UTF-8", [...str(1, text("é".repeat(40)))]],
      ["bad UTF-8", [...str(1, [0x61, 0xff])]],
      ["truncated string", [0x0a, 5, 0x61]],
      ["truncated varint", [0x10, 0x80]],
      ["field 0", [0x00, 1]],
      ["group wire type", [0x0b, 0x0c]],
    ];
    for (const [name, specBytes] of cases) {
      const envelope = create(KdsResourceSchema, {
        meta: { name: "p", mesh: "m", version: "1" },
        spec: create(AnySchema, { typeUrl: type.typeUrl, value: new Uint8Array(specBytes) }),
      });
      const any = create(AnySchema, {
        typeUrl: KDS_RESOURCE_TYPE_URL,
        value: toBinary(KdsResourceSchema, envelope),
      });
      let expected: unknown;
      try {
        expected = fromBinary(TrafficPolicySpecSchema, new Uint8Array(specBytes));
      } catch (error) {
        expect(() => fromWire(type, any), name).toThrow(String((error as Error).message));
        continue;
      }
      const decoded = fromWire(type, any).spec;
      expect(decoded, name).toEqual(expected);
      expect(Object.keys(decoded), name).toEqual(Object.keys(expected as object));
    }
  });
});
