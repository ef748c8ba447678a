/**
 * Resource types kds-mux ships: the system kind Zone, the internal identity
 * kinds (signing keys, revocations), and example kinds the
 * demo and the tests use (library users register their own the same way).
 *
 * @module
 */
import { DataplaneSpecSchema, MeshSpecSchema, TrafficPolicySpecSchema } from "../gen/kds/example/v1/example_pb.ts";
import { ZoneInsightSpecSchema, ZoneSpecSchema } from "../gen/kds/v1/resource_pb.ts";
import { SigningKeySpecSchema, TokenRevocationSpecSchema } from "../gen/kds/v1/auth_pb.ts";
import { TypeRegistry, type ResourceTypeInit } from "./resource-types.ts";

/** Kind of the system resource that registers a zone on the global. */
export const ZONE_KIND = "Zone";

/** Zone: cluster-scoped, lives only on the global (never synced). */
export const zoneType: ResourceTypeInit = { kind: ZONE_KIND, schema: ZoneSpecSchema, direction: "local", scope: "cluster" };

/** Kind of the system resource that records which global instance holds a zone's session (see `ZoneInsightSpec`). */
export const ZONE_INSIGHT_KIND = "ZoneInsight";

/** ZoneInsight: cluster-scoped, lives only in the global's store (never synced). */
export const zoneInsightType: ResourceTypeInit = { kind: ZONE_INSIGHT_KIND, schema: ZoneInsightSpecSchema, direction: "local", scope: "cluster" };
/** Kind of the internal resource holding a token signing key (see src/auth). */
export const SIGNING_KEY_KIND = "SigningKey";

/** Kind of the internal resource recording a revoked token (see src/auth). */
export const TOKEN_REVOCATION_KIND = "TokenRevocation";

/** The internal kinds identity needs: cluster-scoped, never synced, hidden from the admin API. */
export const authTypes: readonly ResourceTypeInit[] = Object.freeze([
  { kind: SIGNING_KEY_KIND, schema: SigningKeySpecSchema, direction: "local", scope: "cluster", internal: true },
  { kind: TOKEN_REVOCATION_KIND, schema: TokenRevocationSpecSchema, direction: "local", scope: "cluster", internal: true },
]);

/** Example kinds: Mesh and TrafficPolicy flow global -> zone, Dataplane flows zone -> global. */
export const exampleTypes: readonly ResourceTypeInit[] = Object.freeze([
  { kind: "Mesh", schema: MeshSpecSchema, direction: "global-to-zone", scope: "cluster" },
  { kind: "TrafficPolicy", schema: TrafficPolicySpecSchema, direction: "global-to-zone", scope: "mesh" },
  { kind: "Dataplane", schema: DataplaneSpecSchema, direction: "zone-to-global", scope: "mesh" },
]);

/** A registry holding Zone, the internal identity kinds, and `types` (the example kinds when omitted). */
export function createTypeRegistry(types: Iterable<ResourceTypeInit> = exampleTypes): TypeRegistry {
  return new TypeRegistry([zoneType, ...authTypes, ...types]);
}
