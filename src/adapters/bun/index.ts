/**
 * The Bun adapter entry point: serving the global on `Bun.serve`.
 *
 * @module
 */
export {
  serveGlobalBun,
  type ServeGlobalBunOptions,
  type ServedGlobalBun,
} from "./serve-global.ts";
export {
  METRIC_NAMES,
  PrometheusMetrics,
  type PrometheusMetricsOptions,
} from "../../observe/prometheus.ts";
