// The hand-written envelope encoder must produce exactly what the reflective
// encoder describes: same decoded message, and the sizes the discovery layer
// budgets with.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { AnySchema, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { ResourceSchema } from "../../src/gen/kds/v1/discovery_pb.ts";
import { KdsResourceSchema } from "../../src/gen/kds/v1/resource_pb.ts";
import { TrafficPolicySpecSchema, exampleTypes } from "../../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../../src/sync/builtin-types.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { fromWire, toWire } from "../../src/sync/wire.ts";

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
    expect(envelope.meta).toMatchObject({ name: "p.1", mesh: "mesh-1", labels: { app: "wéb", team: "" }, version: stored.meta.version });
    expect(envelope.meta?.creationTime).toEqual(timestampFromDate(stored.meta.creationTime));
    expect(envelope.spec?.typeUrl).toBe(type.typeUrl);
    expect(fromBinary(TrafficPolicySpecSchema, envelope.spec?.value ?? new Uint8Array())).toEqual(stored.spec);
    expect(wire.anyBytes).toBe(toBinary(AnySchema, wire.any).byteLength);
    expect(wire.resourceBytes).toBe(toBinary(ResourceSchema, wire.resource).byteLength);
    const decoded = fromWire(type, wire.any, wire.key);
    expect(decoded).toMatchObject({ key: "mesh-1/p.1", name: "p.1", mesh: "mesh-1", version: stored.meta.version });
    expect(decoded.creationTime?.getTime()).toBe(stored.meta.creationTime.getTime());
  });
});
