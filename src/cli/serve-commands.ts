/**
 * `kds-mux global` and `kds-mux zone`: the two control planes as processes.
 *
 * @module
 */
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import type { Transport } from "@connectrpc/connect";
import { registerAdmin } from "../admin/admin-service.ts";
import { serveGlobal, serveRoutes } from "../adapters/node/serve-global.ts";
import { fetchFallback, type NodeFallback } from "../adapters/node/fetch-fallback.ts";
import { observeHandler } from "../observe/http.ts";
import { fanOutMetrics, type Metrics } from "../observe/metrics.ts";
import { PrometheusMetrics } from "../observe/prometheus.ts";
import { StatusFeed } from "../observe/status-feed.ts";
import { STATUS_PAGE_HTML } from "../observe/status-page-html.ts";
import type { ZoneStatus } from "../sync/status.ts";
import { KdsError } from "../errors.ts";
import { GlobalControlPlane } from "../global/global-control-plane.ts";
import type { Logger } from "../log.ts";
import { connectMuxTransport } from "../transport/connect.ts";
import { failoverMuxTransport } from "../transport/failover.ts";
import { halfDuplexMuxTransport } from "../transport/half-duplex.ts";
import type { MuxTransport } from "../transport/transport.ts";
import { ZoneControlPlane } from "../zone/zone-control-plane.ts";
import { parseListen } from "./address.ts";
import { aborted } from "./signals.ts";
import { openCliStore, type StoreChoice } from "./store-option.ts";
import { createTypeRegistry } from "../sync/builtin-types.ts";

/** Options of `kds-mux global`. */
export interface GlobalCommandOptions extends StoreChoice {
  readonly listen: string;
  readonly name: string;
  readonly logger: Logger;
  readonly signal: AbortSignal;
}

/** Runs a global control plane until `signal` aborts. */
export async function runGlobal(options: GlobalCommandOptions): Promise<void> {
  const { host, port } = parseListen(options.listen);
  let url = "<global-admin-url>";
  const types = createTypeRegistry();
  const opened = await openCliStore(options, { name: options.name, types, logger: options.logger, signal: options.signal });
  try {
    options.logger.info(`global "${options.name}" keeps its state in ${opened.description}`);
    const observe = observation("global", options.name, () => global.zoneStatuses());
    const global: GlobalControlPlane = new GlobalControlPlane({ id: options.name, types, store: opened.store, logger: options.logger, adminUrl: () => url, metrics: observe.metrics });
    global.start(options.signal);
    const served = await serveGlobal(global.server, {
      host,
      port,
      // h2c for zones and the CLI; HTTP/1.1 for browsers and Prometheus on the same port.
      httpVersion: "both",
      routes: (router) => registerAdmin(router, global.admin()),
      fallback: observe.fallback,
    });
    url = served.url;
    options.logger.info(`global "${options.name}" listening on ${served.url} (zones dial it; the admin API, the status page at ${served.url}/ and metrics at ${served.url}/metrics are on the same address)`);
    await aborted(options.signal);
    options.logger.info("shutting down: telling every zone (goaway) and closing connections");
    await served.close();
  } finally {
    await opened.close();
  }
  options.logger.info("stopped");
}

/**
 * What a control plane's admin listener adds beside the admin API: Prometheus
 * metrics at /metrics and the live status page at / (with /status/events).
 * The listener serves HTTP/1.1 beside h2c so browsers and Prometheus reach it.
 */
function observation(role: "global" | "zone", name: string, zones: () => Promise<readonly ZoneStatus[]>): { metrics: Metrics; fallback: NodeFallback } {
  const prometheus = new PrometheusMetrics({ labels: role === "zone" ? { role, zone: name } : { role } });
  const status = new StatusFeed({ role, name, zones, zone: role === "zone" ? name : undefined });
  return {
    metrics: fanOutMetrics(prometheus, status.metrics),
    fallback: fetchFallback(observeHandler({ metrics: prometheus, status, page: STATUS_PAGE_HTML })),
  };
}

/** The transports `kds-mux zone --transport` offers. */
export const zoneTransports = ["grpc", "grpc-web", "connect", "half-duplex"] as const;

/** Options of `kds-mux zone`. */
export interface ZoneCommandOptions extends StoreChoice {
  readonly name: string;
  readonly global: string;
  readonly transport: string;
  readonly listen: string;
  readonly logger: Logger;
  readonly signal: AbortSignal;
}

function connectTransport(kind: string, baseUrl: string): Transport {
  switch (kind) {
    case "grpc":
      return createGrpcTransport({ baseUrl });
    case "grpc-web":
      return createGrpcWebTransport({ baseUrl, httpVersion: "2" });
    case "connect":
      return createConnectTransport({ baseUrl, httpVersion: "2" });
    default:
      throw new KdsError("invalid_argument", `--transport must be one of ${zoneTransports.join(", ")}, got "${kind}"`);
  }
}

/** Runs a zone control plane until `signal` aborts. */
export async function runZone(options: ZoneCommandOptions): Promise<void> {
  const { host, port } = parseListen(options.listen);
  // Several global instances: "--global URL1,URL2" fails over between them.
  const urls = options.global.split(",").map((u) => u.trim()).filter((u) => u !== "");
  for (const url of urls) {
    try {
      new URL(url);
    } catch {
      throw new KdsError("invalid_argument", `--global "${url}" is not a URL; use for example http://127.0.0.1:5685 (or several, comma-separated)`);
    }
  }
  if (urls.length === 0) throw new KdsError("invalid_argument", "--global needs at least one URL, for example http://127.0.0.1:5685");
  const dial = (url: string): MuxTransport =>
    options.transport === "half-duplex"
      ? // Unary and server-streaming calls only: for proxies that break bidi streams.
        halfDuplexMuxTransport(createConnectTransport({ baseUrl: url, httpVersion: "2" }), { target: url })
      : connectMuxTransport(connectTransport(options.transport, url), { name: options.transport, target: url });
  const transport = urls.length === 1 ? dial(urls[0] as string) : failoverMuxTransport(urls.map(dial));
  const types = createTypeRegistry();
  const opened = await openCliStore(options, { name: options.name, types, logger: options.logger, signal: options.signal });
  try {
    options.logger.info(`zone "${options.name}" keeps its state in ${opened.description}`);
    const observe = observation("zone", options.name, () => Promise.resolve([zone.status()]));
    const zone: ZoneControlPlane = new ZoneControlPlane({
      name: options.name,
      transport,
      types,
      store: opened.store,
      logger: options.logger,
      metrics: observe.metrics,
      // The global may call the zone's own admin API inside the session (get --zone, inspect zone).
      reverseCalls: (router) => registerAdmin(router, zone.admin()),
    });
    const served = await serveRoutes((router) => registerAdmin(router, zone.admin()), {
      host,
      port,
      httpVersion: "both",
      fallback: observe.fallback,
    });
    options.logger.info(`zone "${options.name}" admin API listening on ${served.url} (status page at ${served.url}/, metrics at ${served.url}/metrics); dialing the global at ${options.global}`);
    await zone.run(options.signal);
    options.logger.info("shutting down");
    await served.close();
  } finally {
    await opened.close();
  }
  options.logger.info("stopped");
}
