// Several global instances over one shared store: a zone's session is held by
// one instance at a time (a lease in the store), every instance reports every
// zone (online while its holder announces itself), and a zone fails over
// between instances.
import { afterEach, describe, expect, it } from "vitest";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { LABELS } from "../../src/kinds/resource-types.ts";
import { failoverMuxTransport } from "../../src/transport/failover.ts";
import { memoryMuxTransport } from "../../src/transport/memory.ts";
import type { MuxTransport } from "../../src/transport/transport.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { eventually } from "../contract/harness.ts";
import { dataplane, mesh } from "../sync/helpers.ts";
import { KdsError } from "../../src/errors.ts";

const stops: AbortController[] = [];
afterEach(() => {
  for (const s of stops.splice(0)) s.abort();
});

function instances(n: number) {
  const types = createTypeRegistry(exampleTypes);
  const store = new InMemoryStore(types);
  const running: AbortController[] = [];
  const globals = Array.from({ length: n }, (_, i) => {
    const g = new GlobalControlPlane({
      types,
      store,
      id: "global",
      instance: `g${i}`,
      logger: silentLogger,
      leaseRenewMs: 50,
      storeRetry: { baseMs: 5, capMs: 20 },
    });
    const stop = new AbortController();
    stops.push(stop);
    running.push(stop);
    g.start(stop.signal);
    return g;
  });
  return { types, store, globals, running };
}

/** Zone-1's token, issued by `global` before each dial (every instance sharing the store verifies it). */
function zoneToken(global: GlobalControlPlane): () => Promise<string> {
  return async () => (await global.tokens.issueZoneToken("zone-1")).token;
}

/** Zone-1 dialing through `transport` with a token from `issuer`, run until the test's end. */
function runZone(
  issuer: GlobalControlPlane,
  transport: MuxTransport,
  backoffMs: { baseMs: number; capMs: number },
): ZoneControlPlane {
  const zone = new ZoneControlPlane({
    name: "zone-1",
    token: zoneToken(issuer),
    transport,
    types: createTypeRegistry(exampleTypes),
    logger: silentLogger,
    backoff: backoffMs,
  });
  const stop = new AbortController();
  stops.push(stop);
  void zone.run(stop.signal);
  return zone;
}

/** A transport to `global` that can be switched off (an instance that is down). */
function switchable(global: GlobalControlPlane): { transport: MuxTransport; up: boolean } {
  const inner = memoryMuxTransport(global.server);
  const state: { transport: MuxTransport; up: boolean } = {
    up: true,
    transport: {
      name: "memory",
      open: (request: Parameters<MuxTransport["open"]>[0]) =>
        state.up
          ? inner.open(request)
          : Promise.reject(new KdsError("transport", "instance is down")),
    } satisfies MuxTransport,
  };
  return state;
}

describe("several global instances on one store", () => {
  it("any instance shows every zone, and resources flow through whichever instance holds the zone", async () => {
    const { globals } = instances(2);
    const [a, b] = globals as [GlobalControlPlane, GlobalControlPlane];
    await a.registerZone("zone-1");
    await b.store.put(mesh("from-b"));
    const zone = runZone(a, memoryMuxTransport(a.server), { baseMs: 5, capMs: 20 });
    await zone.store.put(dataplane("default", "web"));
    await eventually(
      async () => (await zone.store.get("Mesh", "", "from-b")) !== undefined,
      "a mesh written through b reaches a zone on a",
    );
    await eventually(
      async () => (await b.store.get("Dataplane", "default", "zone-1.web")) !== undefined,
      "the zone's dataplane visible through b",
    );
    await eventually(
      async () => (await b.zoneStatus("zone-1"))?.online === true,
      "b shows zone-1 online",
    );
    expect((await b.zoneStatus("zone-1"))?.instance).toBe("g0");
    expect((await a.zoneStatus("zone-1"))?.instance).toBe("g0");
  });

  it("a newer session on another instance replaces the older one, and the zone fails over", async () => {
    const { globals, store } = instances(2);
    const [a, b] = globals as [GlobalControlPlane, GlobalControlPlane];
    await a.registerZone("zone-1");
    const toA = switchable(a);
    const toB = switchable(b);
    const zone = runZone(a, failoverMuxTransport([toA.transport, toB.transport]), {
      baseMs: 5,
      capMs: 20,
    });
    await eventually(() => a.server.session("zone-1") !== undefined, "zone-1 on a");
    await zone.store.put(dataplane("default", "web"));
    await eventually(
      async () => (await store.get("Dataplane", "default", "zone-1.web")) !== undefined,
      "dataplane stored",
    );

    // Instance a goes down for new dials, and its session drops: the zone moves to b.
    toA.up = false;
    await a.server.session("zone-1")?.close({ message: "a is going away" });
    await eventually(() => b.server.session("zone-1") !== undefined, "zone-1 on b");
    await eventually(
      async () => (await a.zoneStatus("zone-1"))?.instance === "g1",
      "a reports that b holds zone-1",
    );
    await zone.store.put(dataplane("default", "api"));
    await eventually(
      async () => (await store.get("Dataplane", "default", "zone-1.api")) !== undefined,
      "sync goes on through b",
    );
    expect(
      (await store.list("Dataplane", { labels: { [LABELS.zone]: "zone-1" } })).resources,
    ).toHaveLength(2);
  });

  it("two sessions of one zone on two instances: the older one is closed through the lease", async () => {
    const { globals } = instances(2);
    const [a, b] = globals as [GlobalControlPlane, GlobalControlPlane];
    await a.registerZone("zone-1");
    const first = runZone(a, memoryMuxTransport(a.server), { baseMs: 1_000, capMs: 1_000 });
    await eventually(
      () => a.server.session("zone-1") !== undefined && first.status().online,
      "first session on a",
    );
    const older = a.server.session("zone-1");
    runZone(a, memoryMuxTransport(b.server), { baseMs: 1_000, capMs: 1_000 });
    await eventually(() => older?.end !== undefined, "a closed its older session");
    expect(older?.end?.code).toBe("replaced");
    expect(older?.end?.message).toContain('instance "g1"');
    expect(b.server.session("zone-1")?.end).toBeUndefined();
  });

  it("a zone held by an instance that stops announcing itself reads offline on the others, though its lease says online", async () => {
    const { globals, store, running } = instances(2);
    const [a, b] = globals as [GlobalControlPlane, GlobalControlPlane];
    await a.registerZone("zone-1");
    runZone(a, memoryMuxTransport(a.server), { baseMs: 1_000, capMs: 1_000 });
    await eventually(
      async () => (await b.zoneStatus("zone-1"))?.online === true,
      "b shows zone-1 online",
    );
    // Instance a's loops stop (as if hung): it announces itself no more, and its session of zone-1 stays up.
    running[0]?.abort();
    await eventually(
      async () => (await b.zoneStatus("zone-1"))?.online === false,
      "b shows zone-1 offline once a's record is 3 periods old",
    );
    expect((await b.zoneStatus("zone-1"))?.instance).toBe("g0");
    expect((await store.get("ZoneInsight", "", "zone-1"))?.spec).toMatchObject({
      instance: "g0",
      online: true,
    });
    expect(a.server.session("zone-1")?.end).toBeUndefined();
    expect((await a.zoneStatus("zone-1"))?.online).toBe(true);
  });
});
