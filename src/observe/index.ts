/**
 * Observing a control plane: the `Metrics` interface, store instrumentation, the status feed and page, the HTTP handler that serves them, and the names of the trace spans it records.
 *
 * @module
 */
export {
  sideOf,
  type HeldKind,
  type HeldReset,
  type SyncError,
  type TypeSyncStatus,
  type ZoneLeadership,
  type ZoneReplacements,
  type ZoneStatus,
} from "./zone-status.ts";
export {
  fanOutMetrics,
  noopMetrics,
  type AdmissionResult,
  type DiscoveryEvent,
  type ConnectionEvent,
  type ListenerName,
  type MetricLane,
  type Metrics,
  type PeerVersion,
} from "../metrics.ts";
export { instrumentStore } from "./store.ts";
export {
  observeHandler,
  type MetricsText,
  type ObserveOptions,
} from "./http.ts";
export {
  StatusFeed,
  type LagPoint,
  type SessionEntry,
  type StatusFeedOptions,
  type StatusSnapshot,
  type TypeSyncStatusJson,
  type ZoneStatusJson,
} from "./status-feed.ts";
export { STATUS_PAGE_HTML } from "./status-page-html.ts";
export type { Readiness } from "./probes.ts";
export { SPAN_ATTRIBUTES, SPAN_NAMES, TRACER_NAME } from "./tracing.ts";
export {
  countByState,
  directionTimes,
  isZoneState,
  ZONE_STATES,
  zoneVerdict,
  type DirectionTimes,
  type ZoneState,
  type ZoneVerdict,
} from "./zone-health.ts";
export type { TypeSyncTimes } from "./zone-status.ts";
