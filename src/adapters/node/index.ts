/**
 * The Node adapter entry point: serving the global and admin APIs on node:http2,
 * HTTP/2 windows for a zone's connect-node transport, and the embedded
 * PostgreSQL (a durable store with nothing to install).
 *
 * @module
 */
export { DEFAULT_LISTEN_BACKLOG, serveGlobal, serveRoutes, type ListenOptions, type ServeGlobalOptions, type ServedGlobal } from "./serve-global.ts";
export { DEFAULT_HTTP2_WINDOW_BYTES, windowedSessionManager } from "./http2-windows.ts";
export { METRIC_NAMES, PrometheusMetrics } from "../../observe/prometheus.ts";
export { fetchFallback, type NodeFallback, type OptionalFetchHandler } from "./fetch-fallback.ts";
export { startEmbeddedPostgres, type EmbeddedPostgres, type EmbeddedPostgresOptions } from "./embedded-postgres.ts";
export { grpcMuxTransport, type GrpcMuxTransport, type GrpcMuxTransportOptions } from "./grpc-mux-client.ts";
