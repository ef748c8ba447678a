/**
 * The resource types kds-mux defines itself: Zone, which registers a zone on
 * the global, ZoneInsight, which records which global instance holds a zone's
 * session, and the internal identity kinds (signing keys, revoked tokens and certificates). Every
 * other kind comes from the user (generated code or a descriptor set); the
 * example kinds the demo uses live in examples/example-kinds.
 *
 * @module
 */
import {
  GlobalInstanceSpecSchema,
  ZoneInsightSpecSchema,
  ZoneSpecSchema,
} from "../gen/kds/v1/resource_pb.ts";
import {
  CertificateRevocationSpecSchema,
  SigningKeySpecSchema,
  TokenRevocationSpecSchema,
} from "../gen/kds/v1/auth_pb.ts";
import { TypeRegistry, type ResourceTypeInit } from "./resource-types.ts";

/** Kind of the system resource that registers a zone on the global. */
export const ZONE_KIND = "Zone";

/** Zone: cluster-scoped, lives only on the global (never synced). */
export const zoneType: ResourceTypeInit = {
  kind: ZONE_KIND,
  schema: ZoneSpecSchema,
  direction: "local",
  scope: "cluster",
};

/** Kind of the system resource that records which global instance holds a zone's session (see `ZoneInsightSpec`). */
export const ZONE_INSIGHT_KIND = "ZoneInsight";

/** ZoneInsight: cluster-scoped, internal (the admin API neither shows nor writes it; `inspect zones` reports it), lives only in the global's store. */
export const zoneInsightType: ResourceTypeInit = {
  kind: ZONE_INSIGHT_KIND,
  schema: ZoneInsightSpecSchema,
  direction: "local",
  scope: "cluster",
  internal: true,
};

/** Kind of the system resource by which a global instance announces itself to the others sharing its store (see `GlobalInstanceSpec`). */
export const GLOBAL_INSTANCE_KIND = "GlobalInstance";

/** GlobalInstance: cluster-scoped, internal, lives only in the global's store (each instance's liveness: the ownership leases and rebalancing read it). */
export const globalInstanceType: ResourceTypeInit = {
  kind: GLOBAL_INSTANCE_KIND,
  schema: GlobalInstanceSpecSchema,
  direction: "local",
  scope: "cluster",
  internal: true,
};
/** Kind of the internal resource holding a token signing key (see src/auth). */
export const SIGNING_KEY_KIND = "SigningKey";

/** Kind of the internal resource recording a revoked token (see src/auth). */
export const TOKEN_REVOCATION_KIND = "TokenRevocation";

/** Kind of the internal resource recording a revoked client certificate (see src/auth). */
export const CERTIFICATE_REVOCATION_KIND = "CertificateRevocation";

/** The internal kinds identity needs: cluster-scoped, never synced, hidden from the admin API. */
export const authTypes: readonly ResourceTypeInit[] = Object.freeze([
  {
    kind: SIGNING_KEY_KIND,
    schema: SigningKeySpecSchema,
    direction: "local",
    scope: "cluster",
    internal: true,
  },
  {
    kind: TOKEN_REVOCATION_KIND,
    schema: TokenRevocationSpecSchema,
    direction: "local",
    scope: "cluster",
    internal: true,
  },
  {
    kind: CERTIFICATE_REVOCATION_KIND,
    schema: CertificateRevocationSpecSchema,
    direction: "local",
    scope: "cluster",
    internal: true,
  },
]);

/**
 * A registry holding Zone, the internal identity kinds, and `types`. With no
 * `types` a global syncs nothing until kinds are registered, and a zone
 * learns its kinds from the global.
 */
export function createTypeRegistry(types: Iterable<ResourceTypeInit> = []): TypeRegistry {
  return new TypeRegistry([zoneType, ...authTypes, ...types]);
}
