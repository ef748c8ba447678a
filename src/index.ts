/**
 * kds-mux: bidirectional zone <-> global resource sync over one zone-dialed
 * Connect stream. This entry point is runtime-neutral (web standards only);
 * the node:http2 server helper lives in `kds-mux/node`. The layers are also
 * entry points of their own, for bundles that want only one of them:
 * `kds-mux/mux`, `kds-mux/transport`, `kds-mux/zone` and `kds-mux/fetch`.
 *
 * The mux frame type is `Frame` (schema `FrameSchema`), so `Message` stays
 * protobuf-es's type.
 *
 * @module
 */
export { KDS_ERROR_CODES, KdsError, type KdsErrorCode, type KdsErrorOptions } from "./errors.ts";
export { consoleLogger, silentLogger, type Logger, type LogFields, type LogLevel } from "./log.ts";
export { CLIENT_ID_HEADER, ZONE_NAME_PATTERN, assertZoneName } from "./names.ts";
export { systemClock, type Clock } from "./util/clock.ts";
export * from "./mux/index.ts";
export * from "./transport/index.ts";
export {
  HalfDuplexHub,
  registerHalfDuplex,
  type HalfDuplexHubOptions,
} from "./transport/half-duplex/server.ts";
export * from "./gen/kds/mux/v1/half_duplex_pb.ts";
export {
  DEFAULT_DRAIN_MAX_GAP_MS,
  DEFAULT_MAX_HANDSHAKES,
  DEFAULT_MAX_HANDSHAKES_PER_ZONE,
  GlobalServer,
  sessionEndError,
  type DrainOptions,
  type GlobalServerOptions,
} from "./global/global-server.ts";
export { muxJsonRegistry } from "./kinds/json-registry.ts";
export { multiplexServiceImpl, registerGlobal } from "./global/connect-service.ts";
export * from "./adapters/fetch/index.ts";
export {
  InMemoryZoneRegistry,
  type ZoneRecord,
  type ZoneRegistry,
} from "./global/zone-registry.ts";
export { registerCommand, zoneResourceYaml } from "./global/registration.ts";
export * from "./zone/index.ts";
export { DiscoveryServer, type DiscoveryServerInit } from "./discovery/server.ts";
export { DiscoveryClient, type DiscoveryClientInit } from "./discovery/client.ts";
export { SetDigest, digestOf } from "./discovery/digest.ts";
export { fetchOnce, type FetchOnceInit } from "./discovery/fetch-once.ts";
export { mergeSources, staticSource } from "./discovery/static-source.ts";
export {
  defaultDiscoveryOptions,
  type ClientObserver,
  type DiscoveryOptions,
  type ReceivedResource,
  type RejectedResource,
  type ResourceSet,
  type ResourceSink,
  type SinkResult,
  type ServerObserver,
  type Snapshot,
  type SnapshotSource,
  type WireResource,
} from "./discovery/types.ts";
export {
  KIND_PATTERN,
  LABELS,
  RESOURCE_NAME_PATTERN,
  RESOURCE_SCOPES,
  SYNC_DIRECTIONS,
  TYPE_URL_PREFIX,
  TypeRegistry,
  parseResourceKey,
  resourceKey,
  type ResourceMeta,
  type ResourceScope,
  type ResourceType,
  type ResourceTypeInit,
  type StoredResource,
  type SyncDirection,
} from "./kinds/resource-types.ts";
export type {
  ApplyResult,
  ListOptions,
  ListResult,
  ResourceInput,
  ResourceRef,
  ResourceStore,
  StoreChange,
  WatchOptions,
  WriteOp,
  WriteOptions,
} from "./store/contract.ts";
export { InMemoryStore, type InMemoryStoreOptions } from "./store/memory.ts";
export { validateInput } from "./store/validate.ts";
export { followStore, type FollowOptions } from "./store/follow.ts";
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
} from "./kinds/builtin-types.ts";
export {
  declarationOf,
  describeDeclaration,
  descriptorRegistry,
  filesDefining,
  messageIn,
  parseDescriptorSet,
  typesFromDescriptors,
  type KindDeclaration,
} from "./kinds/descriptor-types.ts";
export {
  KIND_CATALOG_KEY,
  KIND_CATALOG_TYPE_URL,
  catalogOf,
  catalogResource,
  declarationsOf,
  kindCatalog,
} from "./sync/kind-catalog.ts";
export { KindAgreement } from "./sync/kind-agreement.ts";
export {
  SnapshotCache,
  type ServedKindState,
  type SnapshotCacheOptions,
} from "./sync/snapshot-cache.ts";
export { StoreSink, mirrorMapping, zoneMapping, type SinkMapping } from "./sync/store-sink.ts";
export { KDS_RESOURCE_TYPE_URL, fromWire, toWire, type DecodedResource } from "./sync/wire.ts";
export { ZoneStatusRecord } from "./sync/status.ts";
export { sideOf, type TypeSyncStatus, type ZoneStatus } from "./observe/zone-status.ts";
export { SyncEngine, type SyncEngineOptions, type SyncPeer } from "./sync/engine.ts";
export { ZoneLifecycle, type ZoneLifecycleOptions } from "./global/zone-lifecycle.ts";
export {
  ZoneOwnership,
  type ZoneLease,
  type ZoneOwnershipOptions,
} from "./global/zone-ownership.ts";
export {
  GlobalControlPlane,
  type GlobalControlPlaneOptions,
} from "./global/global-control-plane.ts";
export { StoreZoneRegistry } from "./global/store-zone-registry.ts";
export {
  fanOutMetrics,
  noopMetrics,
  type AdmissionResult,
  type DiscoveryEvent,
  type MetricLane,
  type Metrics,
} from "./metrics.ts";
export { instrumentStore } from "./observe/store.ts";
export {
  combineClientObservers,
  combineServerObservers,
  streamObservers,
  type StreamObservers,
} from "./sync/sync-observers.ts";
export { observeHandler, type MetricsText, type ObserveOptions } from "./observe/http.ts";
export {
  StatusFeed,
  type LagPoint,
  type SessionEntry,
  type StatusFeedOptions,
  type StatusSnapshot,
  type ZoneStatusJson,
} from "./observe/status-feed.ts";
export { STATUS_PAGE_HTML } from "./observe/status-page-html.ts";
export {
  CALLER_HEADER,
  CallEndpoint,
  callEndpoint,
  type CallEndpointOptions,
} from "./rpc/endpoint.ts";
export { reverseCallTransport, type ReverseCallTransportOptions } from "./rpc/transport.ts";
export { ZoneControlPlane, type ZoneControlPlaneOptions } from "./zone/zone-control-plane.ts";
export {
  adminServiceImpl,
  adminType,
  registerAdmin,
  toAdminResource,
  fromAdminResource,
  assertWritable,
  logWrite,
  type AdminBackend,
} from "./admin/admin-service.ts";
export { globalAdminBackend, zoneAdminBackend } from "./admin/role-backends.ts";
export {
  registerTokenService,
  tokenServiceImpl,
  type TokenBackend,
} from "./admin/token-service.ts";
export {
  ADMIN_READ_METHODS,
  adminListenerInterceptor,
  registerAdminRoutes,
} from "./admin/admin-routes.ts";
export { peerInfoKey, type PeerCertificate, type PeerInfo } from "./auth/peer.ts";
export {
  TokenZoneAuthenticator,
  insecureZoneAuthenticator,
  missingTokenMessage,
  zoneTokenCommand,
  type RevokedMatcher,
  type TokenZoneAuthenticatorOptions,
  type ZoneAuthenticator,
  type ZoneCredentials,
  type ZoneIdentity,
} from "./auth/zone-authenticator.ts";
export {
  DEFAULT_TOKEN_VALIDITY_MS,
  TokenAuthority,
  type AuthChange,
  type TokenAuthorityOptions,
} from "./auth/token-authority.ts";
export {
  ADMIN_ROLES,
  ADMIN_TOKEN_AUDIENCE,
  ZONE_TOKEN_AUDIENCE,
  bearerToken,
  type AdminRole,
  type AdminTokenClaims,
  type IssuedToken,
  type TokenClaims,
  type ZoneTokenClaims,
} from "./auth/tokens.ts";
export { SIGNING_ALGORITHM, SigningKeys, type ActiveSigningKey } from "./auth/signing-keys.ts";
export { Revocations, revokes, type RevocableToken, type Revocation } from "./auth/revocations.ts";
export { CERTIFICATE_IDENTITY_RULE, certificateZone } from "./auth/certificate-identity.ts";
export {
  CertificateRevocations,
  certificateKeys,
  normalizeFingerprint,
  normalizeSerial,
  revokesCertificate,
  type CertificateRevocation,
  type CertificateTarget,
  type RevocableCertificate,
} from "./auth/certificate-revocations.ts";
export {
  TokenAdminAuthorizer,
  adminInterceptor,
  adminPrincipalKey,
  describePrincipal,
  isLoopback,
  type AdminAuthorizer,
  type AdminPrincipal,
  type TokenAdminAuthorizerOptions,
} from "./auth/admin-authorizer.ts";
export * from "./gen/kds/admin/v1/admin_pb.ts";
export * from "./gen/kds/admin/v1/tokens_pb.ts";
export * from "./gen/kds/v1/auth_pb.ts";
export * from "./gen/kds/mux/v1/mux_pb.ts";
export * from "./gen/kds/v1/resource_pb.ts";
export * from "./gen/kds/v1/kinds_pb.ts";
export * from "./gen/kds/v1/discovery_pb.ts";

// Types the API above takes or returns, exported so a caller can name them.
export type { KnownZones, ZoneFacts } from "./sync/cross-zone.ts";
export type { RebalanceOptions } from "./global/rebalancer.ts";
export type { ZoneRequirement, ZoneSelector } from "./kinds/zone-selector.ts";
export type { SyncError } from "./observe/zone-status.ts";
export type { ConnectionEvent, ListenerName, PeerVersion } from "./metrics.ts";
export type { TypeSyncStatusJson } from "./observe/status-feed.ts";
export type { Readiness } from "./observe/probes.ts";
export type { ResourceName } from "./store/contract.ts";
export type { StoreSinkOptions } from "./sync/store-sink.ts";
