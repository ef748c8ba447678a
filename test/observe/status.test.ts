// The status page's server side: the page itself, /status.json and the
// event stream it follows, as a zone connects, a resource changes and the
// zone goes offline.
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterEach, describe, expect, it } from "vitest";
import { fetchFallback } from "../../src/adapters/node/fetch-fallback.ts";
import { serveGlobal, type ServedGlobal } from "../../src/adapters/node/serve-global.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import { observeHandler } from "../../src/observe/http.ts";
import { StatusFeed, type StatusSnapshot } from "../../src/observe/status-feed.ts";
import { STATUS_PAGE_HTML } from "../../src/observe/status-page-html.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { mesh } from "../sync/helpers.ts";
import { nextMatching, serverEvents, type ServerEvent } from "./events.ts";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function startGlobal(): Promise<{ global: GlobalControlPlane; served: ServedGlobal }> {
  const stop = new AbortController();
  const status: StatusFeed = new StatusFeed({
    role: "global",
    name: "global",
    zones: () => global.zoneStatuses(),
  });
  const global: GlobalControlPlane = new GlobalControlPlane({
    types: createTypeRegistry(exampleTypes),
    logger: silentLogger,
    metrics: status.metrics,
  });
  global.start(stop.signal);
  const served = await serveGlobal(global.server, {
    httpVersion: "both",
    fallback: fetchFallback(observeHandler({ status, page: STATUS_PAGE_HTML, refreshMs: 500 })),
  });
  cleanups.push(async () => {
    stop.abort();
    await served.close();
  });
  return { global, served };
}

const parse = (e: ServerEvent): StatusSnapshot => {
  expect(e.event).toBe("status");
  return JSON.parse(e.data) as StatusSnapshot;
};

describe("status page endpoints", () => {
  it("serve the page, a snapshot, and 404 for other paths, over HTTP/1.1", async () => {
    const { served, global } = await startGlobal();
    await global.registerZone("zone-1");
    const page = await fetch(`${served.url}/`);
    expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
    const html = await page.text();
    expect(html).toContain("<script>");
    expect(html).toContain('id="zones"');
    const snapshot = (await (await fetch(`${served.url}/status.json`)).json()) as StatusSnapshot;
    expect(snapshot.role).toBe("global");
    expect(snapshot.zones.map((z) => [z.zone, z.online])).toEqual([["zone-1", false]]);
    expect((await fetch(`${served.url}/nope`)).status).toBe(404);
    expect((await fetch(`${served.url}/status.json`, { method: "POST" })).status).toBe(405);
  });

  it("stream a fresh snapshot as a zone connects, a resource changes and the zone goes offline", async () => {
    const { served, global } = await startGlobal();
    await global.registerZone("zone-1");
    const stream = new AbortController();
    cleanups.push(async () => stream.abort());
    const response = await fetch(`${served.url}/status/events`, { signal: stream.signal });
    expect(response.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
    const events = serverEvents(response);

    const first = await nextMatching(events, parse, () => true, "a first snapshot");
    expect(first.zones).toMatchObject([{ zone: "zone-1", online: false, connectedAt: null }]);

    const zoneStop = new AbortController();
    const zone = new ZoneControlPlane({
      name: "zone-1",
      token: async () => (await global.tokens.issueZoneToken("zone-1")).token,
      transport: connectMuxTransport(createGrpcTransport({ baseUrl: served.url })),
      logger: silentLogger,
    });
    const running = zone.run(zoneStop.signal);
    cleanups.push(async () => {
      zoneStop.abort();
      await running;
    });
    const online = await nextMatching(
      events,
      parse,
      (s) => s.zones[0]?.online === true,
      "zone-1 online",
    );
    expect(online.sessions[0]).toMatchObject({ peer: "zone-1" });
    expect(online.sessions[0]?.endedAt).toBeUndefined();

    await global.store.put(mesh("default", "changed while the page watches"));
    const synced = await nextMatching(
      events,
      parse,
      (s) =>
        (s.lag["zone-1"]?.length ?? 0) > 0 &&
        (s.zones[0]?.types.find((t) => t.kind === "Mesh")?.acked ?? 0) > 0,
      "a lag point and an ACKed Mesh for zone-1",
    );
    expect(synced.lag["zone-1"]?.[0]?.ms).toBeGreaterThanOrEqual(0);

    zoneStop.abort();
    await running;
    const offline = await nextMatching(
      events,
      parse,
      (s) => s.zones[0]?.online === false,
      "zone-1 offline",
    );
    // The zone's abort also cancels its stream, so the global sees its goaway or the stream's end, whichever lands first.
    const code = offline.zones[0]?.lastEnd?.code;
    expect(["shutdown", "peer_eof", "transport"]).toContain(code);
    expect(offline.zones[0]?.disconnectedAt).toBeGreaterThan(0);
    expect(offline.sessions[0]).toMatchObject({ peer: "zone-1", endCode: code });
    await events.return(undefined);
  });
});
