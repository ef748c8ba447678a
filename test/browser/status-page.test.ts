// The live status page in headless Chromium: what it shows after a zone
// connects, a resource changes and a zone goes offline, updated through its
// event stream without a reload. Saves a screenshot in the test's temp folder
// (and to docs/status-page.png with KDS_UPDATE_SCREENSHOT=1). Then a third
// zone NACKs a resource: it shows degraded with the reason within 5 s in
// inspect zones (the CLI's own function, against the global's admin API), on
// the page and in kds_zones{state="degraded"}, and healthy again once the
// resource is fixed.
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fetchFallback } from "../../src/adapters/node/fetch-fallback.ts";
import { serveGlobal, type ServedGlobal } from "../../src/adapters/node/serve-global.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import { observeHandler } from "../../src/observe/http.ts";
import { fanOutMetrics } from "../../src/metrics.ts";
import { PrometheusMetrics } from "../../src/observe/prometheus.ts";
import { StatusFeed } from "../../src/observe/status-feed.ts";
import { STATUS_PAGE_HTML } from "../../src/observe/status-page-html.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { dataplane, mesh } from "../sync/helpers.ts";
import { launchChromium } from "../support/chromium.ts";
import { serveRoutes } from "../../src/adapters/node/serve-global.ts";
import { registerAdminRoutes } from "../../src/admin/admin-routes.ts";
import { globalAdminBackend } from "../../src/admin/role-backends.ts";
import { inspectZones } from "../../src/cli/resource-commands.ts";
import { KdsError } from "../../src/errors.ts";
import type { ResourceStore, WriteOp } from "../../src/store/contract.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { parseMetrics } from "../observe/scrape.ts";

/** The Mesh description a zone's {@link refusingStore} refuses. */
const REFUSED = "refused by zone-north";

/** A zone's store that refuses any Mesh described {@link REFUSED}: the zone NACKs the response carrying it. */
function refusingStore(): ResourceStore {
  const inner = new InMemoryStore(createTypeRegistry(exampleTypes));
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === "apply")
        return (ops: readonly WriteOp[], options?: { signal?: AbortSignal }) => {
          for (const op of ops)
            if (
              op.op === "put" &&
              op.input.kind === "Mesh" &&
              (op.input.spec as { description?: string }).description === REFUSED
            )
              throw new KdsError(
                "invalid_resource",
                `Mesh "${op.input.name}": this zone does not take a mesh described "${REFUSED}"`,
              );
          return target.apply(ops, options);
        };
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

describe("status page", () => {
  let browser: Browser;
  let global: GlobalControlPlane;
  let served: ServedGlobal;
  let adminApi: ServedGlobal;
  let prometheus: PrometheusMetrics;
  const stop = new AbortController();
  const zones = new Map<
    string,
    { stop: AbortController; running: Promise<void>; plane: ZoneControlPlane }
  >();

  beforeAll(async () => {
    prometheus = new PrometheusMetrics({ zones: () => global.zoneStatuses() });
    const status: StatusFeed = new StatusFeed({
      role: "global",
      name: "global",
      zones: () => global.zoneStatuses(),
    });
    global = new GlobalControlPlane({
      types: createTypeRegistry(exampleTypes),
      logger: silentLogger,
      metrics: fanOutMetrics(prometheus, status.metrics),
    });
    global.start(stop.signal);
    served = await serveGlobal(global.server, {
      httpVersion: "both",
      fallback: fetchFallback(
        observeHandler({
          metrics: prometheus,
          status,
          page: STATUS_PAGE_HTML,
          refreshMs: 500,
          minIntervalMs: 100,
        }),
      ),
    });
    await global.registerZone("zone-east");
    await global.registerZone("zone-west");
    await global.registerZone("zone-north");
    adminApi = await serveRoutes(
      (router) => registerAdminRoutes(router, globalAdminBackend(global)),
      {
        port: 0,
      },
    );
    browser = await launchChromium();
  }, 120_000);

  afterAll(async () => {
    for (const z of zones.values()) z.stop.abort();
    await Promise.all([...zones.values()].map((z) => z.running));
    await browser?.close();
    stop.abort();
    await served?.close();
    await adminApi?.close();
  });

  function startZone(name: string, store?: ResourceStore): ZoneControlPlane {
    const plane = new ZoneControlPlane({
      name,
      store,
      token: async () => (await global.tokens.issueZoneToken(name)).token,
      transport: connectMuxTransport(createGrpcTransport({ baseUrl: served.url })),
      types: createTypeRegistry(exampleTypes),
      logger: silentLogger,
    });
    const zoneStop = new AbortController();
    zones.set(name, { stop: zoneStop, running: plane.run(zoneStop.signal), plane });
    return plane;
  }

  it("shows a zone connecting, a change syncing with its lag, and the zone going offline, without reloading", async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`${served.url}/`);
    await page.waitForSelector('#live[data-live="true"]', { timeout: 20_000 });
    await page.waitForSelector('#zones tr[data-zone="zone-east"][data-online="false"]', {
      timeout: 20_000,
    });
    expect(await page.textContent('#zones tr[data-zone="zone-east"] .since')).toBe(
      "never connected",
    );
    const loads = await page.evaluate(() => performance.getEntriesByType("navigation").length);

    // A zone connects.
    const east = startZone("zone-east");
    await page.waitForSelector('#zones tr[data-zone="zone-east"][data-online="true"]', {
      timeout: 20_000,
    });
    expect(await page.textContent('#zones tr[data-zone="zone-east"] .badge')).toBe("online");
    // What its session agreed on: the zone's software version, protocol version 3 and both features.
    expect(await page.textContent('#zones tr[data-zone="zone-east"] .version')).toMatch(
      /^kds-mux\/\S+ · protocol 3 · batching, calls$/,
    );
    await page.waitForSelector('#sessions tr[data-peer="zone-east"][data-open="true"]', {
      timeout: 20_000,
    });
    startZone("zone-west");
    await page.waitForSelector('#zones tr[data-zone="zone-west"][data-online="true"]', {
      timeout: 20_000,
    });

    // A resource changes on the global, and one in a zone: both sync, and the lag chart draws a line per zone.
    for (let i = 0; i < 3; i++) {
      await global.store.put(mesh("default", `revision ${i}`));
      await new Promise((r) => setTimeout(r, 1100)); // points are per second: three seconds, three points
    }
    await east.store.put(dataplane("default", "web-1"));
    await page.waitForFunction(
      () =>
        document
          .querySelector('#types tr[data-zone="zone-east"][data-kind="Mesh"] .total')
          ?.textContent?.startsWith("sent 0,") === false,
      undefined,
      { timeout: 20_000 },
    );
    await page.waitForSelector('#lag polyline[data-zone="zone-east"]', { timeout: 20_000 });
    await page.waitForSelector('#lag polyline[data-zone="zone-west"]', { timeout: 20_000 });
    await page.waitForFunction(
      () =>
        Number(
          document
            .querySelector('#lag polyline[data-zone="zone-east"]')
            ?.getAttribute("data-points") ?? 0,
        ) >= 2,
      undefined,
      { timeout: 20_000 },
    );
    // The global sends Mesh: its counters say sent, acked, nacked, for this session and for all of them.
    expect(
      await page.getAttribute('#types tr[data-zone="zone-east"][data-kind="Mesh"]', "data-side"),
    ).toBe("sender");
    for (const column of ["session", "total"]) {
      const meshRow = await page.textContent(
        `#types tr[data-zone="zone-east"][data-kind="Mesh"] .${column}`,
      );
      const [, sent, acked] = (meshRow ?? "").match(/^sent (\d+), acked (\d+), nacked 0$/) ?? [];
      expect(Number(sent)).toBeGreaterThanOrEqual(1);
      expect(Number(acked)).toBeGreaterThanOrEqual(1);
    }
    // It receives Dataplane: received, accepted, rejected.
    expect(
      await page.getAttribute(
        '#types tr[data-zone="zone-east"][data-kind="Dataplane"]',
        "data-side",
      ),
    ).toBe("receiver");
    await page.waitForFunction(
      () =>
        /^received [1-9]\d*, accepted [1-9]\d*, rejected 0$/.test(
          document.querySelector('#types tr[data-zone="zone-east"][data-kind="Dataplane"] .total')
            ?.textContent ?? "",
        ),
      undefined,
      { timeout: 20_000 },
    );

    // The zone goes offline.
    const west = zones.get("zone-west");
    west?.stop.abort();
    await west?.running;
    await page.waitForSelector('#zones tr[data-zone="zone-west"][data-online="false"]', {
      timeout: 20_000,
    });
    expect(await page.textContent('#zones tr[data-zone="zone-west"] .badge')).toBe("offline");
    expect(await page.textContent('#zones tr[data-zone="zone-west"] .since')).toMatch(
      /^offline since /,
    );
    await page.waitForSelector('#sessions tr[data-peer="zone-west"][data-open="false"]', {
      timeout: 20_000,
    });
    expect(await page.textContent('#zones tr[data-zone="zone-east"] .badge')).toBe("online");

    // All of it arrived through the event stream: the page never reloaded.
    expect(await page.evaluate(() => performance.getEntriesByType("navigation").length)).toBe(
      loads,
    );
    expect(Number(await page.getAttribute("body", "data-version"))).toBeGreaterThan(3);
    expect(errors).toEqual([]);

    const shot = join(mkdtempSync(join(tmpdir(), "kds-mux-status-page-")), "status-page.png");
    await page.screenshot({ path: shot, fullPage: true });
    if (process.env.KDS_UPDATE_SCREENSHOT === "1") {
      await page.screenshot({
        path: fileURLToPath(new URL("../../docs/status-page.png", import.meta.url)),
        fullPage: true,
      });
    }
    console.log(`status page screenshot: ${shot}`);
    await page.close();
  }, 120_000);

  it("shows a zone that NACKs a resource as degraded with the reason within 5 s (inspect zones, page, kds_zones), and healthy once it is fixed", async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`${served.url}/`);
    await page.waitForSelector('#live[data-live="true"]', { timeout: 20_000 });
    startZone("zone-north", refusingStore());
    await page.waitForSelector('#zones tr[data-zone="zone-north"] .state[data-state="healthy"]', {
      timeout: 20_000,
    });
    expect(await inspectZones(adminApi.url, "table", "degraded")).toBe(
      "No zone is degraded (of 3 registered).",
    );
    const gauge = async (state: string): Promise<number> =>
      (await parseMetrics(await prometheus.text())).value("kds_zones", { state });
    expect(await gauge("degraded")).toBe(0);

    // The global serves a mesh zone-north refuses: the zone NACKs the response.
    const fedAt = Date.now();
    await global.store.put(mesh("north-only", REFUSED));
    const left = (): number => Math.max(1, fedAt + 5_000 - Date.now());
    const until = async (what: string, check: () => Promise<boolean>): Promise<void> => {
      for (let i = 0; i < 100; i++) {
        if (await check()) return;
        if (Date.now() - fedAt > 5_000) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error(`${what} did not show degraded within 5 s of the change`);
    };
    const reason =
      /Mesh: the peer NACKed it: .*this zone does not take a mesh described "refused by zone-north"/;
    let table = "";
    await until("inspect zones --state degraded", async () => {
      table = await inspectZones(adminApi.url, "table", "degraded");
      return table.includes("zone-north: DEGRADED");
    });
    expect(table).toMatch(/^zone-north +online +degraded +/m);
    expect(table).toMatch(reason);
    expect(table).not.toMatch(/^zone-east /m); // --state shows only the degraded zone
    await until("kds_zones", async () => (await gauge("degraded")) === 1);
    await page.waitForSelector('#zones tr[data-zone="zone-north"] .state[data-state="degraded"]', {
      timeout: left(),
    });
    expect(await page.textContent('#zones tr[data-zone="zone-north"] .state .reason')).toMatch(
      reason,
    );
    expect(await page.getAttribute('#zones tr[data-zone="zone-east"] .state', "data-state")).toBe(
      "healthy",
    );
    expect(await page.textContent('#zones tr[data-zone="zone-east"] .traffic')).toMatch(
      /global-to-zone: sent \d+s ago, received \d+s ago/,
    );
    console.log(
      `degraded shown in inspect zones, kds_zones and the page ${Date.now() - fedAt} ms after the change`,
    );
    const shot = join(mkdtempSync(join(tmpdir(), "kds-mux-status-page-")), "degraded.png");
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`status page screenshot (degraded): ${shot}`);
    const json = (await (await fetch(`${served.url}/status.json`)).json()) as {
      zones: { zone: string; verdict: { state: string; reason: string } }[];
    };
    expect(json.zones.find((z) => z.zone === "zone-north")?.verdict).toMatchObject({
      state: "degraded",
      reason: expect.stringMatching(reason),
    });
    expect(await gauge("offline")).toBe(1); // zone-west, since the first test
    expect(await gauge("healthy")).toBe(1); // zone-east

    // Fixed: the next version goes out (after the global's NACK backoff) and is ACKed.
    await global.store.put(mesh("north-only", "fine everywhere"));
    await page.waitForSelector('#zones tr[data-zone="zone-north"] .state[data-state="healthy"]', {
      timeout: 30_000,
    });
    expect(await inspectZones(adminApi.url, "table", "degraded")).toBe(
      "No zone is degraded (of 3 registered).",
    );
    expect(await inspectZones(adminApi.url, "table", "healthy")).toMatch(
      /^zone-north +online +healthy +/m,
    );
    expect(await gauge("degraded")).toBe(0);
    expect(await gauge("healthy")).toBe(2);
    expect(errors).toEqual([]);
    await page.close();
  }, 120_000);
});
