/**
 * The sync engine: snapshot cache, store sinks, the kind catalog and agreement, the wire form of resources, zone status records and observers.
 *
 * @module
 */
export {
  KIND_CATALOG_KEY,
  KIND_CATALOG_TYPE_URL,
  catalogOf,
  catalogResource,
  declarationsOf,
  kindCatalog,
} from "./kind-catalog.ts";
export { KindAgreement } from "./kind-agreement.ts";
export {
  SnapshotCache,
  type ServedKindState,
  type SnapshotCacheOptions,
} from "./snapshot-cache.ts";
export {
  StoreSink,
  mirrorMapping,
  zoneMapping,
  type SinkMapping,
} from "./store-sink.ts";
export {
  KDS_RESOURCE_TYPE_URL,
  fromWire,
  toWire,
  type DecodedResource,
} from "./wire.ts";
export { ZoneStatusRecord } from "./status.ts";
export {
  DEFAULT_RESET_GUARD,
  ResetGuard,
  nextKindState,
  resolveResetGuard,
  type DeletionGate,
  type KindGuardEvent,
  type KindGuardState,
  type ResetGuardInit,
  type ResetGuardOptions,
  type ResolvedResetGuardOptions,
} from "./reset-guard.ts";
export {
  SyncEngine,
  type SyncEngineOptions,
  type SyncPeer,
} from "./engine.ts";
export {
  combineClientObservers,
  combineServerObservers,
  streamObservers,
  type StreamObservers,
} from "./sync-observers.ts";
export type { KnownZones, ZoneFacts } from "./cross-zone.ts";
export type { StoreSinkOptions } from "./store-sink.ts";
