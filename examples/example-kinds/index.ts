/**
 * The example kinds of kds-mux (Mesh and TrafficPolicy flow global -> zone,
 * Dataplane flows zone -> global, ZoneIngress flows from its zone to every
 * other zone through the global), for code: the tests, the benchmarks and
 * the examples import them from here. The CLI and the demo load the same
 * kinds from kinds.yaml next to this file.
 *
 * @module
 */
import type { ResourceTypeInit } from "../../src/index.ts";
import {
  DataplaneSpecSchema,
  MeshSpecSchema,
  TrafficPolicySpecSchema,
  ZoneIngressSpecSchema,
} from "./gen/kds/example/v1/example_pb.ts";

export * from "./gen/kds/example/v1/example_pb.ts";

/** Mesh (cluster-scoped) and TrafficPolicy flow global -> zone; Dataplane flows zone -> global; ZoneIngress (cluster-scoped) flows zone -> every other zone. */
export const exampleTypes: readonly ResourceTypeInit[] = Object.freeze([
  { kind: "Mesh", schema: MeshSpecSchema, direction: "global-to-zone", scope: "cluster" },
  {
    kind: "TrafficPolicy",
    schema: TrafficPolicySpecSchema,
    direction: "global-to-zone",
    scope: "mesh",
  },
  { kind: "Dataplane", schema: DataplaneSpecSchema, direction: "zone-to-global", scope: "mesh" },
  {
    kind: "ZoneIngress",
    schema: ZoneIngressSpecSchema,
    direction: "zone-to-zones",
    scope: "cluster",
  },
]);
