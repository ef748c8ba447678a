/**
 * The kind model: resource types and their registry, built-in kinds, kinds from protobuf descriptor sets, resource keys, labels and zone selectors.
 *
 * @module
 */
export { muxJsonRegistry } from "./json-registry.ts";
export {
  KIND_PATTERN,
  LABELS,
  RESOURCE_NAME_PATTERN,
  RESOURCE_SCOPES,
  SYNC_DIRECTIONS,
  TYPE_URL_PREFIX,
  TypeRegistry,
  WHEN_STALE,
  parseResourceKey,
  resourceKey,
  type StoredResourceMeta,
  type ResourceScope,
  type ResourceType,
  type ResourceTypeInit,
  type StoredResource,
  type SyncDirection,
  type WhenStale,
} from "./resource-types.ts";
export {
  CERTIFICATE_REVOCATION_KIND,
  SIGNING_KEY_KIND,
  TOKEN_REVOCATION_KIND,
  ZONE_INSIGHT_KIND,
  ZONE_KIND,
  authTypes,
  createTypeRegistry,
  zoneInsightType,
  zoneType,
} from "./builtin-types.ts";
export {
  declarationOf,
  describeDeclaration,
  descriptorRegistry,
  filesDefining,
  messageIn,
  parseDescriptorSet,
  typesFromDescriptors,
  type KindDeclaration,
} from "./descriptor-types.ts";
export type { ZoneRequirement, ZoneSelector } from "./zone-selector.ts";
