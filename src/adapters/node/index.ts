/**
 * The Node adapter entry point: serving the global and admin APIs on node:http2
 * (with connection limits and a gate that checks credentials on headers),
 * HTTP/2 windows for a zone's connect-node transport, and the embedded
 * PostgreSQL (a durable store with nothing to install).
 *
 * @module
 */
export {
  DEFAULT_LISTEN_BACKLOG,
  serveGlobal,
  serveRoutes,
  type ListenOptions,
  type NodeRequest,
  type ServeGlobalOptions,
  type ServedGlobal,
} from "./serve-global.ts";
export type { GateDecision, GateRequest, RequestGate } from "./request-gate.ts";
export {
  DEFAULT_AUTH_TIMEOUT_MS,
  DEFAULT_MAX_CONNECTIONS_PER_ADMIN_TOKEN,
  DEFAULT_MAX_CONNECTIONS_PER_ZONE,
  DEFAULT_MAX_STREAMS_PER_CONNECTION,
  DEFAULT_REQUEST_TIMEOUT_MS,
  type ConnectionLimits,
} from "./connection-limits.ts";
export { DEFAULT_HTTP2_WINDOW_BYTES, windowedSessionManager } from "./http2-windows.ts";
export {
  METRIC_NAMES,
  PrometheusMetrics,
  type PrometheusMetricsOptions,
} from "../../observe/prometheus.ts";
export { fetchFallback, type NodeFallback, type OptionalFetchHandler } from "./fetch-fallback.ts";
export {
  startEmbeddedPostgres,
  type EmbeddedPostgres,
  type EmbeddedPostgresOptions,
} from "./embedded-postgres.ts";
export {
  grpcMuxTransport,
  type GrpcMuxTransport,
  type GrpcMuxTransportOptions,
} from "./grpc-mux-client.ts";
export type { GuardedConnection } from "./connection-guard.ts";
