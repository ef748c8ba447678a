// Reverse calls on whichever runtime runs this file: vitest on Node
// (test/rpc/reverse-runtime.test.ts), Deno and Bun through test/runtime/contract.ts.
// A global over connect-node h2c and a zone serving its admin API: the global
// asks the zone what it holds, and a zone without a session is named.
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { registerAdmin } from "../../src/admin/admin-service.ts";
import { serveGlobal } from "../../src/adapters/node/serve-global.ts";
import { AdminService } from "../../src/gen/kds/admin/v1/admin_pb.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { check, eventually, rejects } from "../contract/harness.ts";
import type { Scenario } from "../contract/scenarios.ts";
import { dataplane } from "../sync/helpers.ts";
import { globalAdminBackend, zoneAdminBackend } from "../../src/admin/role-backends.ts";

const runtime = "Deno" in globalThis ? "deno" : "Bun" in globalThis ? "bun" : "node";

export const reverseCallScenarios: Scenario[] = [
  {
    name: `reverse calls on ${runtime}: the global asks a zone what it holds, inside the zone's session`,
    async run() {
      const stop = new AbortController();
      const global = new GlobalControlPlane({
        types: createTypeRegistry(exampleTypes),
        logger: silentLogger,
      });
      global.start(stop.signal);
      const served = await serveGlobal(global.server, {
        routes: (router) => registerAdmin(router, globalAdminBackend(global)),
      });
      await global.registerZone("zone-1");
      const zone: ZoneControlPlane = new ZoneControlPlane({
        name: "zone-1",
        token: async () => (await global.tokens.issueZoneToken("zone-1")).token,
        transport: connectMuxTransport(
          createConnectTransport({ baseUrl: served.url, httpVersion: "2" }),
        ),
        types: createTypeRegistry(exampleTypes),
        logger: silentLogger,
        reverseCalls: (router) => registerAdmin(router, zoneAdminBackend(zone)),
      });
      const running = zone.run(stop.signal);
      try {
        await zone.store.put(dataplane("default", "web-1"));
        await eventually(() => global.server.session("zone-1") !== undefined, "zone-1 connected");
        const admin = createClient(
          AdminService,
          createConnectTransport({ baseUrl: served.url, httpVersion: "2" }),
        );
        const held = await admin.get({ type: "Dataplane", zone: "zone-1" });
        check(
          held.resources.length === 1 && held.resources[0]?.name === "web-1",
          `the zone's own dataplane: ${JSON.stringify(held.resources.map((r) => r.name))}`,
        );
        const view = await admin.inspectZones({ zone: "zone-1" });
        check(
          view.zones.length === 1 && view.zones[0]?.zone === "zone-1" && view.zones[0].online,
          "the zone's own view of its sync",
        );
        const error = await rejects(
          admin.get({ type: "Dataplane", zone: "zone-2" }),
          "a call to a zone without a session",
        );
        check(
          String(error).includes('zone "zone-2" is offline'),
          `the error names the zone: ${String(error)}`,
        );
      } finally {
        stop.abort();
        await running;
        await served.close();
      }
    },
  },
];
