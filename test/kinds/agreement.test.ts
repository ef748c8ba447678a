// The kind catalog and how a zone squares it with its own kinds.
import { create, fromBinary, toBinary, type Message } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { KindDirection } from "../../src/gen/kds/v1/kinds_pb.ts";
import { KindAgreement } from "../../src/sync/kind-agreement.ts";
import {
  KIND_CATALOG_TYPE_URL,
  catalogOf,
  catalogResource,
  kindCatalog,
} from "../../src/sync/kind-catalog.ts";
import type { ResourceTypeInit } from "../../src/kinds/resource-types.ts";
import { acmeKinds } from "./acme.ts";
import { exampleTypes } from "../../examples/example-kinds/index.ts";

/** The catalog a global with `kinds` sends, as the zone decodes it from the wire. */
function sent(kinds: ResourceTypeInit[]) {
  const wire = catalogResource(kindCatalog(createTypeRegistry(kinds).list()));
  expect(wire.any.typeUrl).toBe(KIND_CATALOG_TYPE_URL);
  return catalogOf([wire.any]);
}

function refusal(work: () => unknown): KdsError {
  try {
    work();
  } catch (error) {
    expect(KdsError.is(error, "kinds_mismatch")).toBe(true);
    return error as KdsError;
  }
  throw new Error("expected a kinds_mismatch");
}

describe("kind catalog", () => {
  it("carries the flowing kinds and descriptors that rebuild working messages, not local kinds", () => {
    const catalog = sent(acmeKinds(1));
    expect(catalog.kinds.map((k) => k.kind)).toEqual(["Gateway", "Workload"]); // Zone (local) stays out
    const zone = createTypeRegistry();
    const learned = new KindAgreement(zone, 'zone "z"').agree(catalog, 'global "g"');
    expect(learned.map((t) => [t.kind, t.schema.typeName, t.direction, t.scope])).toEqual([
      ["Gateway", "acme.v1.GatewaySpec", "global-to-zone", "cluster"],
      ["Workload", "acme.v1.WorkloadSpec", "zone-to-global", "mesh"],
    ]);
    // The learned message encodes exactly like the global's.
    const [globalGateway] = acmeKinds(1);
    const spec = create(globalGateway!.schema, {
      hosts: ["a.example"],
      port: 443,
    } as never) as Message;
    const bytes = toBinary(globalGateway!.schema, spec);
    const learnedGateway = zone.get("Gateway").schema;
    expect(toBinary(learnedGateway, fromBinary(learnedGateway, bytes))).toEqual(bytes);
  });

  it("includes imported files, each once and after its imports", () => {
    const catalog = kindCatalog(createTypeRegistry([...exampleTypes]).list());
    const names = catalog.files.map((f) => f.name);
    expect(new Set(names).size).toBe(names.length);
    expect(names).toContain("kds/example/v1/example.proto");
    const zone = createTypeRegistry();
    expect(
      new KindAgreement(zone, "zone")
        .agree(catalogOf([catalogResource(catalog).any]), "global")
        .map((t) => t.kind),
    ).toEqual(["Mesh", "TrafficPolicy", "Dataplane", "ZoneIngress"]);
  });

  it("changes version when the catalog changes, and only then", () => {
    const v1 = catalogResource(kindCatalog(createTypeRegistry(acmeKinds(1)).list())).version;
    expect(catalogResource(kindCatalog(createTypeRegistry(acmeKinds(1)).list())).version).toBe(v1);
    expect(catalogResource(kindCatalog(createTypeRegistry(acmeKinds(2)).list())).version).not.toBe(
      v1,
    );
  });
});

describe("kind agreement", () => {
  it("accepts a zone with the same kinds and learns nothing", () => {
    const zone = createTypeRegistry(acmeKinds(1));
    expect(new KindAgreement(zone, 'zone "z"').agree(sent(acmeKinds(1)), 'global "g"')).toEqual([]);
  });

  it("accepts fields added on the global: kinds agree by message name, direction and scope", () => {
    const zone = createTypeRegistry(acmeKinds(1));
    expect(new KindAgreement(zone, 'zone "z"').agree(sent(acmeKinds(2)), 'global "g"')).toEqual([]);
    expect(zone.get("Gateway").schema.fields.map((f) => f.name)).toEqual(["hosts", "port"]); // the zone keeps its own message
  });

  it("refuses a kind with another message, naming the kind and both definitions", () => {
    const zone = createTypeRegistry(
      acmeKinds(1, { Gateway: { message: "acme.v1.WorkloadSpec" } }).slice(0, 1),
    );
    const error = refusal(() =>
      new KindAgreement(zone, 'zone "z"').agree(sent(acmeKinds(1)), 'global "g"'),
    );
    expect(error.message).toContain('zone "z" refuses the kinds of global "g"');
    expect(error.message).toContain(
      'kind "Gateway": global "g" defines acme.v1.GatewaySpec, global-to-zone, cluster-scoped; zone "z" defines acme.v1.WorkloadSpec, global-to-zone, cluster-scoped',
    );
    expect(error.message).toContain(
      'kind "Workload": global "g" defines acme.v1.WorkloadSpec, zone-to-global, mesh-scoped; zone "z" defines that message as kind "Gateway"',
    );
    expect(zone.find("Workload")).toBeUndefined(); // nothing was learned
  });

  it("refuses a kind with another direction or scope", () => {
    const zone = createTypeRegistry(
      acmeKinds(1, { Workload: { direction: "global-to-zone" }, Gateway: { scope: "mesh" } }),
    );
    const error = refusal(() =>
      new KindAgreement(zone, 'zone "z"').agree(sent(acmeKinds(1)), 'global "g"'),
    );
    expect(error.message).toContain(
      'kind "Workload": global "g" defines acme.v1.WorkloadSpec, zone-to-global, mesh-scoped; zone "z" defines acme.v1.WorkloadSpec, global-to-zone, mesh-scoped',
    );
    expect(error.message).toContain(
      'kind "Gateway": global "g" defines acme.v1.GatewaySpec, global-to-zone, cluster-scoped; zone "z" defines acme.v1.GatewaySpec, global-to-zone, mesh-scoped',
    );
  });

  it("carries zone-to-zones kinds: a zone learns them as such, and refuses one it defines with another direction", () => {
    const catalog = kindCatalog(createTypeRegistry([...exampleTypes]).list());
    expect(catalog.kinds.find((k) => k.kind === "ZoneIngress")?.direction).toBe(
      KindDirection.ZONE_TO_ZONES,
    );
    const learner = createTypeRegistry();
    new KindAgreement(learner, "zone").agree(catalogOf([catalogResource(catalog).any]), "global");
    expect(learner.get("ZoneIngress").direction).toBe("zone-to-zones");
    expect(learner.sentBy("zone").map((t) => t.kind)).toEqual(["Dataplane", "ZoneIngress"]);
    expect(learner.receivedBy("zone").map((t) => t.kind)).toEqual([
      "Mesh",
      "TrafficPolicy",
      "ZoneIngress",
    ]);
    const other = createTypeRegistry(
      exampleTypes.map((t) =>
        t.kind === "ZoneIngress" ? { ...t, direction: "zone-to-global" as const } : t,
      ),
    );
    const error = refusal(() =>
      new KindAgreement(other, 'zone "z"').agree(
        catalogOf([catalogResource(catalog).any]),
        'global "g"',
      ),
    );
    expect(error.message).toContain(
      'kind "ZoneIngress": global "g" defines kds.example.v1.ZoneIngressSpec, zone-to-zones, cluster-scoped; zone "z" defines kds.example.v1.ZoneIngressSpec, zone-to-global, cluster-scoped',
    );
  });

  it("refuses a message the zone knows as another kind", () => {
    const zone = createTypeRegistry(acmeKinds(1, { Gateway: { kind: "Edge" } }));
    const error = refusal(() =>
      new KindAgreement(zone, 'zone "z"').agree(sent(acmeKinds(1)), 'global "g"'),
    );
    expect(error.message).toContain(
      'kind "Gateway": global "g" defines acme.v1.GatewaySpec, global-to-zone, cluster-scoped; zone "z" defines that message as kind "Edge"',
    );
  });

  it("refuses a zone that syncs a kind the global does not", () => {
    const zone = createTypeRegistry([
      ...acmeKinds(1),
      ...exampleTypes.filter((t) => t.kind === "Dataplane"),
    ]);
    const error = refusal(() =>
      new KindAgreement(zone, 'zone "z"').agree(sent(acmeKinds(1)), 'global "g"'),
    );
    expect(error.message).toContain(
      `kind "Dataplane": zone "z" syncs it (kds.example.v1.DataplaneSpec, zone-to-global, mesh-scoped), but global "g" does not`,
    );
  });

  it("lets a zone keep local kinds of its own", () => {
    const zone = createTypeRegistry([...acmeKinds(1), { ...exampleTypes[0]!, direction: "local" }]);
    expect(new KindAgreement(zone, 'zone "z"').agree(sent(acmeKinds(1)), 'global "g"')).toEqual([]);
  });

  it("learns kinds the global adds later, and refuses a learned kind the global changed", () => {
    const zone = createTypeRegistry();
    const agreement = new KindAgreement(zone, 'zone "z"');
    agreement.agree(sent(acmeKinds(1).slice(0, 1)), 'global "g"');
    expect(zone.visible().map((t) => t.kind)).toEqual(["Zone", "Gateway"]);
    expect(agreement.agree(sent(acmeKinds(1)), 'global "g"').map((t) => t.kind)).toEqual([
      "Workload",
    ]);
    const changed = refusal(() =>
      agreement.agree(
        sent(acmeKinds(1, { Gateway: { direction: "zone-to-global" } })),
        'global "g"',
      ),
    );
    expect(changed.message).toContain(
      'zone "z" learned earlier acme.v1.GatewaySpec, global-to-zone, cluster-scoped (restart zone "z" to learn the new definition)',
    );
    const dropped = refusal(() => agreement.agree(sent(acmeKinds(1).slice(0, 1)), 'global "g"'));
    expect(dropped.message).toContain(
      'kind "Workload": zone "z" learned it (acme.v1.WorkloadSpec, zone-to-global, mesh-scoped) in an earlier session, but global "g" no longer syncs it',
    );
  });

  it("refuses a catalog whose descriptors cannot build its messages", () => {
    const catalog = sent(acmeKinds(1));
    catalog.files = [];
    const error = (() => {
      try {
        new KindAgreement(createTypeRegistry(), 'zone "z"').agree(catalog, 'global "g"');
      } catch (e) {
        return e as KdsError;
      }
      throw new Error("expected a refusal");
    })();
    expect(error.code).toBe("invalid_resource");
    expect(error.message).toContain(
      'the kinds sent by global "g" cannot be used: message acme.v1.GatewaySpec is not in the descriptors',
    );
  });
});

describe("kind agreement with a zone given kinds", () => {
  it("learns a kind the global has and the zone was not given", () => {
    const zone = createTypeRegistry(acmeKinds(1).slice(0, 1)); // Gateway only
    expect(
      new KindAgreement(zone, 'zone "z"')
        .agree(sent(acmeKinds(1)), 'global "g"')
        .map((t) => t.kind),
    ).toEqual(["Workload"]);
    expect(zone.get("Workload").schema.typeName).toBe("acme.v1.WorkloadSpec");
  });
});

describe("kind agreement on a catalog as received", () => {
  it("the same catalog again agrees at once; after the zone's kinds changed, it is checked again", () => {
    const wire = catalogResource(kindCatalog(createTypeRegistry(acmeKinds(1)).list()));
    const again = () => [{ ...wire.any, value: wire.any.value.slice() }];
    const zone = createTypeRegistry();
    const agreement = new KindAgreement(zone, 'zone "z"');
    expect(agreement.agreeReceived(again(), 'global "g"').map((t) => t.kind)).toEqual([
      "Gateway",
      "Workload",
    ]);
    expect(agreement.agreeReceived(again(), 'global "g"')).toEqual([]);
    // A kind the zone now sends that the global's catalog lacks: the same bytes are refused this time.
    const dataplane = exampleTypes.find((t) => t.kind === "Dataplane");
    zone.register(dataplane!);
    const error = refusal(() => agreement.agreeReceived(again(), 'global "g"'));
    expect(error.message).toContain("Dataplane");
    // Another catalog is read and agreed as ever.
    const v2 = catalogResource(
      kindCatalog(createTypeRegistry([...acmeKinds(1), dataplane!]).list()),
    );
    expect(agreement.agreeReceived([v2.any], 'global "g"')).toEqual([]);
  });
});
