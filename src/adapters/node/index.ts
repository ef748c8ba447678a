/**
 * The Node adapter entry point: serving the global and admin APIs on node:http2,
 * and the embedded PostgreSQL (a durable store with nothing to install).
 *
 * @module
 */
export { DEFAULT_LISTEN_BACKLOG, serveGlobal, serveRoutes, type ListenOptions, type ServeGlobalOptions, type ServedGlobal } from "./serve-global.ts";
export { METRIC_NAMES, PrometheusMetrics } from "../../observe/prometheus.ts";
export { fetchFallback, type NodeFallback, type OptionalFetchHandler } from "./fetch-fallback.ts";
export { startEmbeddedPostgres, type EmbeddedPostgres, type EmbeddedPostgresOptions } from "./embedded-postgres.ts";
