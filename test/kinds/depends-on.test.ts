// dependsOn: checked when kinds are registered, carried by the kind catalog,
// learned by a zone (docs/kinds.md, "Ordered delivery").
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MeshSpecSchema, TrafficPolicySpecSchema } from "../../examples/example-kinds/index.ts";
import { KdsError } from "../../src/errors.ts";
import { KindCatalogSchema } from "../../src/gen/kds/v1/kinds_pb.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { TypeRegistry, type ResourceTypeInit } from "../../src/kinds/resource-types.ts";
import { KindAgreement } from "../../src/sync/kind-agreement.ts";
import { catalogOf, catalogResource, kindCatalog } from "../../src/sync/kind-catalog.ts";

const mesh: ResourceTypeInit = {
  kind: "Mesh",
  schema: MeshSpecSchema,
  direction: "global-to-zone",
  scope: "cluster",
};
const policy: ResourceTypeInit = {
  kind: "TrafficPolicy",
  schema: TrafficPolicySpecSchema,
  direction: "global-to-zone",
  scope: "mesh",
  dependsOn: ["Mesh"],
};

function invalid(work: () => unknown): string {
  try {
    work();
  } catch (error) {
    expect(KdsError.is(error, "invalid_argument")).toBe(true);
    return (error as Error).message;
  }
  throw new Error("expected invalid_argument");
}

describe("dependsOn", () => {
  it("registers each kind after the kinds it depends on, whatever the order given", () => {
    const types = createTypeRegistry([policy, mesh]);
    expect(types.get("TrafficPolicy").dependsOn).toEqual(["Mesh"]);
    const flowing = types.list().filter((t) => t.direction !== "local");
    expect(flowing.map((t) => t.kind)).toEqual(["Mesh", "TrafficPolicy"]);
    expect(types.dependenciesOf(types.get("TrafficPolicy").typeUrl)).toEqual([
      types.get("Mesh").typeUrl,
    ]);
    expect(types.dependenciesOf(types.get("Mesh").typeUrl)).toEqual([]);
  });

  it("refuses a cycle, naming its kinds, and registers nothing", () => {
    const a = { ...mesh, dependsOn: ["TrafficPolicy"] };
    expect(invalid(() => createTypeRegistry([a, policy]))).toContain(
      "dependsOn forms a cycle: Mesh -> TrafficPolicy -> Mesh",
    );
    expect(invalid(() => new TypeRegistry([{ ...mesh, dependsOn: ["Mesh"] }]))).toContain(
      "dependsOn forms a cycle: Mesh -> Mesh",
    );
  });

  it("refuses a kind that is not defined, naming both", () => {
    expect(invalid(() => createTypeRegistry([policy]))).toContain(
      'dependsOn names kinds that are not defined: "TrafficPolicy" depends on "Mesh"',
    );
    // One at a time: what it depends on must be registered first; a refusal registers nothing.
    const types = createTypeRegistry();
    const before = types.list().length;
    expect(invalid(() => types.register(policy))).toContain(
      'resource kind "TrafficPolicy" depends on kind "Mesh", which is not registered',
    );
    expect(types.list()).toHaveLength(before);
    types.register(mesh);
    expect(types.register(policy).dependsOn).toEqual(["Mesh"]);
  });

  it("travels in the kind catalog, which lists each kind after those it depends on, and a zone learns it", () => {
    const global = createTypeRegistry([policy, mesh]);
    const catalog = catalogOf([catalogResource(kindCatalog(global.list())).any]);
    expect(catalog.kinds.map((k) => `${k.kind}:${k.dependsOn.join(",")}`)).toEqual([
      "Mesh:",
      "TrafficPolicy:Mesh",
    ]);
    const zone = createTypeRegistry();
    new KindAgreement(zone, 'zone "z"').agree(catalog, 'global "g"');
    expect(zone.get("TrafficPolicy").dependsOn).toEqual(["Mesh"]);
    // A catalog listing a kind before what it depends on is learned in dependency order.
    const reversed = create(KindCatalogSchema, { ...catalog, kinds: [...catalog.kinds].reverse() });
    const other = createTypeRegistry();
    const learned = new KindAgreement(other, 'zone "y"').agree(reversed, 'global "g"');
    expect(learned.map((t) => t.kind)).toEqual(["Mesh", "TrafficPolicy"]);
  });

  it("leaves dependencies on local kinds (which never travel) out of the catalog", () => {
    const global = createTypeRegistry([mesh, { ...policy, dependsOn: ["Mesh", "Zone"] }]);
    expect(global.get("TrafficPolicy").dependsOn).toEqual(["Mesh", "Zone"]);
    const catalog = kindCatalog(global.list());
    expect(catalog.kinds.find((k) => k.kind === "TrafficPolicy")?.dependsOn).toEqual(["Mesh"]);
  });

  it("refuses a catalog whose dependsOn names a kind it lacks, learning nothing", () => {
    const global = createTypeRegistry([mesh, policy]);
    const catalog = catalogOf([catalogResource(kindCatalog(global.list())).any]);
    const broken = create(KindCatalogSchema, {
      ...catalog,
      kinds: catalog.kinds.map((k) => ({
        ...k,
        dependsOn: k.kind === "Mesh" ? ["Gateway"] : k.dependsOn,
      })),
    });
    const zone = createTypeRegistry();
    const before = zone.list().length;
    expect(() => new KindAgreement(zone, 'zone "z"').agree(broken, 'global "g"')).toThrow(
      /cannot be used: .*"Mesh" depends on "Gateway"/,
    );
    expect(zone.list()).toHaveLength(before);
  });
});
