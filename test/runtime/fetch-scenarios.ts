// Scenarios for the fetch-server adapters: the global on Deno.serve or
// Bun.serve, zones dialing with connect-node's Connect and gRPC-web
// transports. Only the runtime that has the server runs its list.
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { serveGlobalBun } from "../../src/adapters/bun/serve-global.ts";
import { serveGlobalDeno } from "../../src/adapters/deno/serve-global.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import { LABELS } from "../../src/kinds/resource-types.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { halfDuplexMuxTransport } from "../../src/transport/half-duplex/client.ts";
import { createConnectTransport as createWebConnectTransport } from "@connectrpc/connect-web";
import type { MuxTransport } from "../../src/transport/transport.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { KdsError } from "../../src/errors.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { check, eventually, rejects, settle } from "../contract/harness.ts";
import type { Scenario } from "../contract/scenarios.ts";
import { dataplane, mesh } from "../sync/helpers.ts";

type Runtime = "deno" | "bun";
const runtime: Runtime | undefined =
  "Deno" in globalThis ? "deno" : "Bun" in globalThis ? "bun" : undefined;

/** Transports each fetch server carries (Bun.serve speaks HTTP/1.1 only). */
const transports: Record<Runtime, Record<string, (url: string) => MuxTransport>> = {
  deno: {
    "half-duplex (connect-web on fetch)": (url) =>
      halfDuplexMuxTransport(createWebConnectTransport({ baseUrl: url, useBinaryFormat: true })),
    "Connect h2c": (url) =>
      connectMuxTransport(createConnectTransport({ baseUrl: url, httpVersion: "2" }), {
        name: "connect",
      }),
    "gRPC-web h2c": (url) =>
      connectMuxTransport(createGrpcWebTransport({ baseUrl: url, httpVersion: "2" }), {
        name: "grpc-web",
      }),
    "Connect HTTP/1.1": (url) =>
      connectMuxTransport(createConnectTransport({ baseUrl: url, httpVersion: "1.1" }), {
        name: "connect",
      }),
  },
  bun: {
    "half-duplex (connect-web on fetch)": (url) =>
      halfDuplexMuxTransport(createWebConnectTransport({ baseUrl: url, useBinaryFormat: true })),
    "Connect HTTP/1.1": (url) =>
      connectMuxTransport(createConnectTransport({ baseUrl: url, httpVersion: "1.1" }), {
        name: "connect",
      }),
    "gRPC-web HTTP/1.1": (url) =>
      connectMuxTransport(createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1" }), {
        name: "grpc-web",
      }),
  },
};

async function withFetchGlobal(
  work: (global: GlobalControlPlane, url: string) => Promise<void>,
): Promise<void> {
  const stop = new AbortController();
  const global = new GlobalControlPlane({
    types: createTypeRegistry(exampleTypes),
    logger: silentLogger,
  });
  global.start(stop.signal);
  const served =
    runtime === "deno" ? serveGlobalDeno(global.server) : serveGlobalBun(global.server);
  try {
    await work(global, served.url);
  } finally {
    stop.abort();
    await served.close();
  }
}

async function syncBothWays(
  global: GlobalControlPlane,
  transport: MuxTransport,
  session = {},
): Promise<void> {
  await global.registerZone("zone-1");
  await global.store.put(mesh("default", "from the global"));
  const token = (await global.tokens.issueZoneToken("zone-1")).token;
  const zone = new ZoneControlPlane({
    name: "zone-1",
    transport,
    token,
    types: createTypeRegistry(exampleTypes),
    logger: silentLogger,
    session,
  });
  const stop = new AbortController();
  const running = zone.run(stop.signal);
  try {
    await zone.store.put(dataplane("default", "web-1"));
    await eventually(
      async () =>
        (await zone.store.get("Mesh", "", "default")) !== undefined &&
        (await global.store.get("Dataplane", "default", "zone-1.web-1")) !== undefined,
      "resources both ways",
    );
    const attributed = await global.store.get("Dataplane", "default", "zone-1.web-1");
    check(attributed?.meta.labels[LABELS.zone] === "zone-1", "attributed to the zone");
  } finally {
    stop.abort();
    await running;
  }
}

/** The scenarios for this runtime's fetch server (none on Node). */
export const fetchScenarios: Scenario[] =
  runtime === undefined
    ? []
    : [
        ...Object.entries(transports[runtime]).map<Scenario>(([name, make]) => ({
          name: `global on ${runtime === "deno" ? "Deno.serve" : "Bun.serve"}: resources sync both ways over ${name}`,
          run: () => withFetchGlobal((global, url) => syncBothWays(global, make(url))),
        })),
        ...(runtime === "bun"
          ? [
              {
                name: "Bun.serve speaks no HTTP/2: a zone dialing it over h2c gets a transport error (docs/transports.md table)",
                run: () =>
                  withFetchGlobal(async (global, url) => {
                    await global.registerZone("zone-1");
                    const token = (await global.tokens.issueZoneToken("zone-1")).token;
                    const zone = new ZoneClient({
                      name: "zone-1",
                      token,
                      transport: connectMuxTransport(
                        createConnectTransport({ baseUrl: url, httpVersion: "2" }),
                      ),
                      logger: silentLogger,
                    });
                    const error = await rejects(
                      zone.dial(AbortSignal.timeout(10_000)),
                      "h2c dial to Bun.serve",
                    );
                    check(KdsError.is(error, "transport"), `a transport error: ${String(error)}`);
                  }),
              },
            ]
          : []),
        {
          name: `a quiet mux stream outlives ${runtime === "deno" ? "Deno.serve" : "Bun.serve"}'s idle timeouts (16 s without a frame; Bun.serve cuts at 10 s by default)`,
          run: () =>
            withFetchGlobal(async (global, url) => {
              const make = Object.values(transports[runtime])[0] as (url: string) => MuxTransport;
              await global.registerZone("zone-1");
              const token = (await global.tokens.issueZoneToken("zone-1")).token;
              const zone = new ZoneControlPlane({
                name: "zone-1",
                transport: make(url),
                token,
                logger: silentLogger,
                session: { heartbeatIntervalMs: 60_000, heartbeatTimeoutMs: 120_000 },
              });
              const stop = new AbortController();
              const running = zone.run(stop.signal);
              try {
                await eventually(() => zone.client.session !== undefined, "connected");
                const session = zone.client.session;
                await settle(16_000);
                check(
                  session?.end === undefined,
                  `the quiet session is still up: ${JSON.stringify(session?.end)}`,
                );
                await global.store.put(mesh("late", "after the quiet period"));
                await eventually(
                  async () => (await zone.store.get("Mesh", "", "late")) !== undefined,
                  "a change after the quiet period arrives",
                );
              } finally {
                stop.abort();
                await running;
              }
            }),
        },
      ];
