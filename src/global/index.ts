/**
 * The global role, for advanced use: its server, admission, zone registries, lifecycle, ownership across instances. Most users need only `GlobalControlPlane` from the package root.
 *
 * @module
 */
export {
  GlobalServer,
  sessionEndError,
  type GlobalServerOptions,
} from "./global-server.ts";
export {
  multiplexServiceImpl,
  registerGlobal,
} from "./connect-service.ts";
export {
  InMemoryZoneRegistry,
  type ZoneRecord,
  type ZoneRegistry,
} from "./zone-registry.ts";
export {
  ZoneLifecycle,
  type ZoneLifecycleOptions,
} from "./zone-lifecycle.ts";
export {
  ZoneOwnership,
  type LiveInstance,
  type LeaseHolder,
  type ZoneLease,
  type ZoneOwnershipOptions,
} from "./zone-ownership.ts";
export {
  OfflineZones,
  nextOfflineState,
  type OfflineAction,
  type OfflineObservation,
  type OfflineState,
  type OfflineTimes,
  type OfflineZonesOptions,
  type ZonePresence,
} from "./offline-zones.ts";
export {
  GlobalControlPlane,
  type GlobalControlPlaneOptions,
} from "./global-control-plane.ts";
export { StoreZoneRegistry, type FollowedZones } from "./store-zone-registry.ts";
export {
  DEFAULT_DRAIN_MAX_GAP_MS,
  DEFAULT_MAX_HANDSHAKES,
  DEFAULT_MAX_HANDSHAKES_PER_ZONE,
  type DrainOptions,
} from "./global-server.ts";
export type { RebalanceOptions } from "./rebalancer.ts";
export {
  AdmissionPacer,
  DEFAULT_PACER_MAX_RETRY_AFTER_MS,
  DEFAULT_PACER_MIN_RATE,
  DEFAULT_PACER_WINDOW_MS,
  type AdmissionPacerOptions,
} from "./admission-pacer.ts";
