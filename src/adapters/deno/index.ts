/**
 * The Deno adapter entry point: serving the global on `Deno.serve`.
 *
 * @module
 */
export {
  serveGlobalDeno,
  type ServeGlobalDenoOptions,
  type ServedGlobalDeno,
} from "./serve-global.ts";
export {
  METRIC_NAMES,
  PrometheusMetrics,
  type PrometheusMetricsOptions,
} from "../../observe/prometheus.ts";
