// /metrics end to end, on whichever runtime runs this file: vitest on Node
// (test/observe/metrics.test.ts), Deno and Bun through test/runtime/contract.ts.
// A global with Prometheus metrics serves them on its listener (node:http2
// with HTTP/1.1 beside h2c on Node, Deno.serve or Bun.serve on those), a zone
// syncs both ways with it, and the scrape is read by a real parser.
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { fetchFallback } from "../../src/adapters/node/fetch-fallback.ts";
import { serveGlobal } from "../../src/adapters/node/serve-global.ts";
import { serveGlobalBun } from "../../src/adapters/bun/serve-global.ts";
import { serveGlobalDeno } from "../../src/adapters/deno/serve-global.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import { observeHandler } from "../../src/observe/http.ts";
import { METRIC_NAMES, PrometheusMetrics } from "../../src/observe/prometheus.ts";
import { SOFTWARE_VERSION } from "../../src/mux/negotiation.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import type { MuxTransport } from "../../src/transport/transport.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { check, eventually, rejects } from "../contract/harness.ts";
import type { Scenario } from "../contract/scenarios.ts";
import { dataplane, mesh } from "../sync/helpers.ts";
import { parseMetrics, scrape, type Scrape } from "./scrape.ts";

const runtime = "Deno" in globalThis ? "deno" : "Bun" in globalThis ? "bun" : "node";

interface Served {
  readonly url: string;
  transport(): MuxTransport;
  close(): Promise<void>;
}

/** Serves `global` with `/metrics` on this runtime's server. */
async function serve(global: GlobalControlPlane, metrics: PrometheusMetrics): Promise<Served> {
  const observe = observeHandler({ metrics });
  if (runtime === "deno" || runtime === "bun") {
    const served =
      runtime === "deno"
        ? serveGlobalDeno(global.server, { fallback: observe })
        : serveGlobalBun(global.server, { fallback: observe });
    // The Connect protocol over HTTP/1.1 works on both (Bun.serve speaks no h2c).
    return {
      url: served.url,
      transport: () =>
        connectMuxTransport(createConnectTransport({ baseUrl: served.url, httpVersion: "1.1" }), {
          name: "connect",
        }),
      close: () => served.close(),
    };
  }
  const served = await serveGlobal(global.server, {
    httpVersion: "both",
    fallback: fetchFallback(observe),
  });
  return {
    url: served.url,
    transport: () =>
      connectMuxTransport(createGrpcTransport({ baseUrl: served.url }), { name: "grpc" }),
    close: () => served.close(),
  };
}

async function scrapeZone(metrics: PrometheusMetrics): Promise<Scrape> {
  const response = await observeHandler({ metrics })(new Request("http://zone.invalid/metrics"));
  check(response !== undefined && response.status === 200, "the zone's handler serves /metrics");
  return parseMetrics(await response.text());
}

export const metricsScenarios: Scenario[] = [
  {
    name: `/metrics on ${runtime}: sessions, admissions, frames, discovery, sync lag and store latency, scraped and parsed`,
    async run() {
      const stop = new AbortController();
      const metrics = new PrometheusMetrics({ labels: { role: "global" } });
      const global = new GlobalControlPlane({
        types: createTypeRegistry(exampleTypes),
        logger: silentLogger,
        metrics,
      });
      global.start(stop.signal);
      const served = await serve(global, metrics);
      const zoneMetrics = new PrometheusMetrics({ labels: { role: "zone" } });
      const zone = new ZoneControlPlane({
        name: "zone-1",
        token: async () => (await global.tokens.issueZoneToken("zone-1")).token,
        transport: served.transport(),
        types: createTypeRegistry(exampleTypes),
        logger: silentLogger,
        metrics: zoneMetrics,
      });
      const zoneStop = new AbortController();
      let running: Promise<void> | undefined;
      try {
        // A refused zone counts as an admission refused (it proves its name, but is not registered).
        const stranger = new ZoneClient({
          name: "stranger",
          token: (await global.tokens.issueZoneToken("stranger")).token,
          transport: served.transport(),
          logger: silentLogger,
        });
        await rejects(stranger.dial(AbortSignal.timeout(10_000)), "an unregistered zone's dial");

        await global.registerZone("zone-1");
        await global.store.put(mesh("default", "from the global"));
        running = zone.run(zoneStop.signal);
        await zone.store.put(dataplane("default", "web-1"));
        await eventually(
          async () =>
            (await zone.store.get("Mesh", "", "default")) !== undefined &&
            (await global.store.get("Dataplane", "default", "zone-1.web-1")) !== undefined,
          "resources both ways",
        );
        // A change after the zone is connected: its lag runs from this put to the zone's ACK.
        await global.store.put(mesh("second", "while connected"));
        let s = await scrape(served.url);
        await eventually(async () => {
          s = await scrape(served.url);
          return (
            s.count("kds_sync_lag_seconds", { kind: "Mesh" }) >= 1 &&
            s.value("kds_discovery_responses_received_total", {
              kind: "Dataplane",
              result: "accepted",
            }) >= 1
          );
        }, "the global's lag histogram and accepted responses");

        for (const name of METRIC_NAMES) s.family(name);
        check(s.family("kds_sync_lag_seconds").type === "histogram", "sync lag is a histogram");
        check(
          s.family("kds_store_operation_seconds").type === "histogram",
          "store latency is a histogram",
        );
        check(
          s.value("kds_sessions_open") === 1,
          `one session open, got ${s.value("kds_sessions_open")}`,
        );
        // The session runs version 3 with both features, and the zone says it runs this kds-mux.
        check(
          s.value("kds_sessions_open_by_version", {
            protocol_version: "3",
            software_version: SOFTWARE_VERSION,
          }) === 1,
          "one open session of version 3 from this kds-mux",
        );
        for (const feature of ["batching", "calls"])
          check(
            s.value("kds_sessions_open_by_feature", { feature }) === 1,
            `one open session using ${feature}`,
          );
        check(
          s.value("kds_admissions_total", { result: "admitted" }) === 1,
          `one admission, got ${s.value("kds_admissions_total", { result: "admitted" })}`,
        );
        check(
          s.value("kds_admissions_total", { result: "not_registered" }) === 1,
          "one refusal of the unregistered zone",
        );
        for (const direction of ["sent", "received"]) {
          for (const lane of ["requests", "responses", "control"]) {
            check(
              s.value("kds_mux_frames_total", { direction, lane }) > 0,
              `frames ${direction} on ${lane}`,
            );
            check(
              s.value("kds_mux_frame_bytes_total", { direction, lane }) > 0,
              `bytes ${direction} on ${lane}`,
            );
          }
        }
        check(
          s.value("kds_discovery_responses_sent_total", { kind: "Mesh" }) >= 1,
          "Mesh responses sent",
        );
        check(s.value("kds_discovery_acks_total", { kind: "Mesh" }) >= 1, "Mesh responses ACKed");
        check(s.value("kds_discovery_nacks_total", { kind: "Mesh" }) === 0, "no Mesh NACKs");
        check(
          s.count("kds_store_operation_seconds", { op: "put", outcome: "ok" }) >= 2,
          "store puts timed",
        );
        check(
          s.samples("kds_sessions_open")[0]?.labels.role === "global",
          "default labels on every series",
        );

        const z = await scrapeZone(zoneMetrics);
        check(z.value("kds_sessions_open") === 1, "the zone counts its session");
        check(
          z.value("kds_discovery_responses_received_total", { kind: "Mesh", result: "accepted" }) >=
            1,
          "the zone accepted Mesh responses",
        );
        check(
          z.value("kds_discovery_acks_total", { kind: "Dataplane" }) >= 1,
          "the global ACKed the zone's Dataplane responses",
        );

        zoneStop.abort();
        await running;
        running = undefined;
        await eventually(
          async () => (await scrape(served.url)).value("kds_sessions_open") === 0,
          "the session closed",
        );
        const after = await scrape(served.url);
        check(
          after.value("kds_sessions_closed_total") === 1,
          `one session closed, got ${after.value("kds_sessions_closed_total")}`,
        );
      } finally {
        zoneStop.abort();
        await running;
        stop.abort();
        await served.close();
      }
    },
  },
];
