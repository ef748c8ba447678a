/**
 * kds-mux: bidirectional zone <-> global resource sync over one zone-dialed
 * Connect stream. The root holds what a library user needs to run a global
 * and a zone with kinds of their own: the two roles, the kind model, the
 * store contract with its in-memory store, the zone's transports, tokens,
 * errors and logging. It is runtime-neutral (web standards only).
 *
 * Everything else is an entry point of its own, one per layer:
 * `kds-mux/global`, `kds-mux/zone`, `kds-mux/admin`, `kds-mux/transport`,
 * `kds-mux/rpc`, `kds-mux/sync`, `kds-mux/auth`, `kds-mux/discovery`,
 * `kds-mux/mux`, `kds-mux/store`, `kds-mux/kinds`, `kds-mux/observe`, and the
 * generated wire messages in `kds-mux/schema`. Runtimes: `kds-mux/node`
 * (node:http2 servers), `kds-mux/deno`, `kds-mux/bun`, `kds-mux/fetch`; the
 * PostgreSQL store is `kds-mux/postgres`.
 *
 * @module
 */
export { KDS_ERROR_CODES, KdsError, type KdsErrorCode, type KdsErrorOptions } from "./errors.ts";
export { consoleLogger, silentLogger, type LogFields, type LogLevel, type Logger } from "./log.ts";
export type { Metrics } from "./metrics.ts";
export { systemClock, type Clock } from "./util/clock.ts";
export { KDS_MUX_VERSION } from "./version.ts";
export {
  GlobalControlPlane,
  type GlobalControlPlaneOptions,
} from "./global/global-control-plane.ts";
export { ZoneControlPlane, type ZoneControlPlaneOptions } from "./zone/zone-control-plane.ts";
export type { SessionOptions } from "./mux/options.ts";
export type { TypeSyncStatus, ZoneStatus } from "./observe/zone-status.ts";
export type { MuxTransport } from "./transport/transport.ts";
export { connectMuxTransport, type ConnectMuxTransportOptions } from "./transport/connect.ts";
export { failoverMuxTransport } from "./transport/failover.ts";
export { memoryMuxTransport } from "./transport/memory.ts";
export {
  LABELS,
  TypeRegistry,
  parseResourceKey,
  resourceKey,
  type ResourceScope,
  type ResourceType,
  type ResourceTypeInit,
  type StoredResource,
  type StoredResourceMeta,
  type SyncDirection,
} from "./kinds/resource-types.ts";
export { ZONE_KIND, createTypeRegistry } from "./kinds/builtin-types.ts";
export { parseDescriptorSet, typesFromDescriptors } from "./kinds/descriptor-types.ts";
export type {
  ApplyResult,
  ListOptions,
  ListResult,
  ResourceInput,
  ResourceRef,
  ResourceStore,
  StoreChange,
  WriteOp,
  WriteOptions,
} from "./store/contract.ts";
export { InMemoryStore, type InMemoryStoreOptions } from "./store/memory.ts";
export {
  TokenAuthority,
  type TokenAuthorityOptions,
} from "./auth/token-authority.ts";
export {
  TokenZoneAuthenticator,
  insecureZoneAuthenticator,
  type TokenZoneAuthenticatorOptions,
  type ZoneAuthenticator,
} from "./auth/zone-authenticator.ts";
export type { IssuedToken } from "./auth/tokens.ts";
