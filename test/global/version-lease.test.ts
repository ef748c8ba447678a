// Several global instances on one store: what a zone's session agreed on
// (software version, protocol version, features) travels in the zone's lease,
// so an instance that does not hold the zone shows it too.
import { afterEach, describe, expect, it } from "vitest";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import { SOFTWARE_VERSION } from "../../src/mux/negotiation.ts";
import type { SessionOptions } from "../../src/mux/options.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { memoryMuxTransport } from "../../src/transport/memory.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { eventually } from "../contract/harness.ts";

const stops: AbortController[] = [];
afterEach(() => {
  for (const s of stops.splice(0)) s.abort();
});

describe("the lease carries what a zone's session agreed on", () => {
  for (const [what, session, expected] of [
    [
      "a zone limited to version 2 without batching",
      { protocolVersions: { min: 2, max: 2 }, features: ["calls"] },
      { protocolVersion: 2, features: ["calls"], softwareVersion: "" },
    ],
    [
      "a current zone",
      {},
      { protocolVersion: 3, features: ["batching", "calls"], softwareVersion: SOFTWARE_VERSION },
    ],
  ] as const) {
    it(`${what}: the instance that does not hold it shows its versions and features, online and after it left`, async () => {
      const types = createTypeRegistry(exampleTypes);
      const store = new InMemoryStore(types);
      const [a, b] = ["g0", "g1"].map((instance) => {
        const g = new GlobalControlPlane({
          types,
          store,
          id: "global",
          instance,
          logger: silentLogger,
          leaseRenewMs: 50,
        });
        const stop = new AbortController();
        stops.push(stop);
        g.start(stop.signal);
        return g;
      }) as [GlobalControlPlane, GlobalControlPlane];
      await a.registerZone("zone-1");
      const zone = new ZoneControlPlane({
        name: "zone-1",
        token: async () => (await a.tokens.issueZoneToken("zone-1")).token,
        transport: memoryMuxTransport(a.server),
        types: createTypeRegistry(exampleTypes),
        session: session as SessionOptions,
        logger: silentLogger,
      });
      const stop = new AbortController();
      const running = zone.run(stop.signal);
      await eventually(
        async () => (await b.zoneStatus("zone-1"))?.online === true,
        "b shows zone-1 online",
      );
      expect((await b.zoneStatus("zone-1"))?.peer).toEqual(expected);
      expect((await a.zoneStatus("zone-1"))?.peer).toEqual(expected);
      stop.abort();
      await running.catch(() => undefined); // the run ends with the abort; nothing else is checked here
      await eventually(
        async () => (await b.zoneStatus("zone-1"))?.online === false,
        "b shows zone-1 offline",
      );
      expect((await b.zoneStatus("zone-1"))?.peer).toEqual(expected);
    });
  }
});
