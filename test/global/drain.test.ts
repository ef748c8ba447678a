// Draining a global instance: readiness flips first, no zone is admitted,
// every zone is asked to reconnect (goaway RECONNECT) one at a time over the
// spread, reconnects promptly to the other instance without counting it as a
// failure, and nothing is resent to it there (it resumes by versions).
import { getEventListeners } from "node:events";
import { afterEach, describe, expect, it } from "vitest";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { GLOBAL_INSTANCE_KIND, createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { failoverMuxTransport } from "../../src/transport/failover.ts";
import { memoryMuxTransport } from "../../src/transport/memory.ts";
import { ZoneClient, type RetryInfo } from "../../src/zone/zone-client.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { eventually } from "../contract/harness.ts";
import { mesh } from "../sync/helpers.ts";
import type { GlobalInstanceSpec } from "../../src/gen/kds/v1/resource_pb.ts";

const stops: AbortController[] = [];
afterEach(() => {
  for (const s of stops.splice(0)) s.abort();
});

function stopper(): AbortSignal {
  const stop = new AbortController();
  stops.push(stop);
  return stop.signal;
}

/** Instances g0 and g1 of one global on one in-memory store, started, each with `options(instance)`. */
function twoInstances(
  options: (instance: string) => Partial<ConstructorParameters<typeof GlobalControlPlane>[0]>,
) {
  const types = createTypeRegistry(exampleTypes);
  const store = new InMemoryStore(types);
  const globals = ["g0", "g1"].map((instance) => {
    const g = new GlobalControlPlane({
      types,
      store,
      id: "global",
      instance,
      logger: silentLogger,
      ...options(instance),
    });
    g.start(stopper());
    return g;
  }) as [GlobalControlPlane, GlobalControlPlane];
  return { store, globals };
}

describe("draining a global instance", () => {
  it("flips readiness, sends new zones on, and moves every zone to the other instance promptly, as asked, with nothing resent", async () => {
    const { store, globals } = twoInstances(() => ({
      leaseRenewMs: 50,
      storeRetry: { baseMs: 5, capMs: 20 },
    }));
    const [a, b] = globals;
    // Just started: the kinds are still loading from the store.
    expect((await a.readiness()).reasons.join("; ")).toMatch(
      /^starting: \d+ of \d+ kinds not loaded/,
    );
    await eventually(
      async () => (await a.readiness()).ready,
      "a is ready once its kinds are loaded",
    );
    for (let i = 0; i < 5; i++) await store.put(mesh(`m-${i}`));
    const names = Array.from({ length: 6 }, (_, i) => `zone-${i}`);
    const retries: RetryInfo[] = [];
    const zones = [];
    for (const name of names) {
      await a.registerZone(name);
      const zone = new ZoneControlPlane({
        name,
        token: async () => (await a.tokens.issueZoneToken(name)).token,
        transport: failoverMuxTransport([
          memoryMuxTransport(a.server),
          memoryMuxTransport(b.server),
        ]),
        types: createTypeRegistry(exampleTypes),
        logger: silentLogger,
        // A long backoff: a zone that waited for it would not be back in time.
        backoff: { baseMs: 60_000, capMs: 60_000 },
        reconnectJitterMs: 50,
        onRetry: (info) => retries.push(info),
      });
      void zone.run(stopper());
      zones.push(zone);
    }
    for (const zone of zones)
      await eventually(
        async () => (await zone.store.list("Mesh")).resources.length === 5,
        `${zone.client.name} holds the 5 meshes`,
      );
    expect(a.server.sessions()).toHaveLength(6);

    const spreadMs = 600;
    const started = performance.now();
    const drained = a.server.drain({ spreadMs });
    const readiness = await a.readiness();
    expect(readiness.ready).toBe(false);
    expect(readiness.reasons.join("; ")).toMatch(/^draining: /);
    // A zone dialing the draining instance (a rebalancing hint or a retry can still name it) is sent on at once, like the
    // zones it held: its session ends with RECONNECT, a move rather than a refusal, and it never becomes the zone's current one.
    await a.registerZone("zone-late");
    const late = await new ZoneClient({
      name: "zone-late",
      token: (await a.tokens.issueZoneToken("zone-late")).token,
      transport: memoryMuxTransport(a.server),
      logger: silentLogger,
    })
      .dial()
      .catch((e: unknown) => e);
    expect(late).not.toBeInstanceOf(Error);
    const lateEnd = await (late as Awaited<ReturnType<ZoneClient["dial"]>>).closed;
    expect(lateEnd).toMatchObject({ code: "reconnect", initiator: "peer", graceful: true });
    expect(lateEnd.message).toMatch(/draining/);
    expect(await drained).toBe(6);
    const tookMs = performance.now() - started;
    // Spread: the last zone was asked no earlier than 5/6 of the spread.
    expect(tookMs).toBeGreaterThanOrEqual((spreadMs * 5) / 6 - 20);
    for (const name of names)
      await eventually(
        async () => b.server.session(name) !== undefined,
        `${name} reconnected to the other instance`,
      );
    // Each zone was asked once, reconnected at once (not after its 60 s backoff), and saw no failure.
    expect(retries.map((r) => r.asked)).toEqual(names.map(() => true));
    expect(
      retries.every(
        (r) =>
          r.delayMs <= 50 &&
          r.error.cause !== undefined &&
          (r.error.cause as { code: string }).code === "reconnect",
      ),
    ).toBe(true);
    // Resumed by versions: the other instance sent none of the meshes again.
    for (const name of names) {
      const status = b.sync.status(name);
      expect(status.types.find((t) => t.kind === "Mesh")?.session.resourcesSent ?? 0).toBe(0);
      expect(status.lastError).toBeUndefined();
    }
  });

  it("a drain tells the other instances at once that this one drains, with rebalancing off", async () => {
    const { store, globals } = twoInstances((instance) => ({
      // An hour between announcements: only the drain itself can publish it.
      leaseRenewMs: 3_600_000,
      rebalance: false,
      zoneUrl: () => `mem://${instance}`,
    }));
    const [a, b] = globals;
    await eventually(async () => (await a.readiness()).ready, "a is ready");
    expect(await a.drain({ spreadMs: 0 })).toBe(0);
    // Written before the drain returned, not at a later announcement.
    expect((await store.get(GLOBAL_INSTANCE_KIND, "", "g0"))?.spec).toMatchObject({
      draining: true,
      zoneUrl: "mem://g0",
    });
    const seen = async () =>
      (await b.ownership.instances())
        .map((i) => `${i.instance} ${i.zoneUrl} ${i.draining ? "draining" : "serving"}`)
        .sort();
    await eventually(async () => (await seen()).length === 2, "b sees both instances");
    expect(await seen()).toEqual(["g0 mem://g0 draining", "g1 mem://g1 serving"]);
  });

  it("a drain whose deadline passed before its announcement was written still announces it, after it returned", async () => {
    const { store, globals } = twoInstances((instance) => ({
      leaseRenewMs: 3_600_000,
      rebalance: false,
      zoneUrl: () => `mem://${instance}`,
    }));
    const [a] = globals;
    await eventually(async () => (await a.readiness()).ready, "a is ready");
    const deadline = new AbortController();
    deadline.abort(new Error("the drain timeout passed"));
    await a.drain({ spreadMs: 0, signal: deadline.signal });
    // The drain no longer waits for it past its deadline; the write goes on and lands.
    await eventually(
      async () =>
        ((await store.get(GLOBAL_INSTANCE_KIND, "", "g0"))?.spec as GlobalInstanceSpec | undefined)
          ?.draining === true,
      "the record to say that g0 drains",
    );
  });

  it("a zone that stops tells the global, which marks it offline with a clean end, not a failure", async () => {
    const types = createTypeRegistry(exampleTypes);
    const global = new GlobalControlPlane({ types, id: "global", logger: silentLogger });
    global.start(stopper());
    await global.registerZone("zone-1");
    const stop = new AbortController();
    stops.push(stop);
    const zone = new ZoneControlPlane({
      name: "zone-1",
      token: async () => (await global.tokens.issueZoneToken("zone-1")).token,
      transport: memoryMuxTransport(global.server),
      types: createTypeRegistry(exampleTypes),
      logger: silentLogger,
    });
    const running = zone.run(stop.signal);
    await eventually(
      async () => (await global.zoneStatus("zone-1"))?.online === true,
      "zone-1 online",
    );
    stop.abort();
    await running;
    await eventually(
      async () => (await global.zoneStatus("zone-1"))?.online === false,
      "zone-1 offline",
    );
    const status = await global.zoneStatus("zone-1");
    expect(status?.lastEnd?.code).toBe("shutdown");
    expect(status?.lastError).toBeUndefined();
  });

  /** A global with 12 zones connected (dialed once each, no reconnects); `ends` collects "zone code" as their sessions end. */
  async function twelveZones(): Promise<{
    global: GlobalControlPlane;
    names: string[];
    ends: string[];
  }> {
    const types = createTypeRegistry(exampleTypes);
    const global = new GlobalControlPlane({ types, id: "global", logger: silentLogger });
    global.start(stopper());
    const names = Array.from({ length: 12 }, (_, i) => `zone-${i}`);
    const ends: string[] = [];
    for (const name of names) {
      await global.registerZone(name);
      const session = await new ZoneClient({
        name,
        token: (await global.tokens.issueZoneToken(name)).token,
        transport: memoryMuxTransport(global.server),
        logger: silentLogger,
      }).dial(stopper());
      void session.closed.then((end) => ends.push(`${name} ${end.code}`));
    }
    await eventually(async () => global.server.sessions().length === 12, "12 zones connected");
    return { global, names, ends };
  }

  it("a drain whose signal aborts mid-spread asks the zones left at once and returns", async () => {
    const { global, names, ends } = await twelveZones();
    const abort = new AbortController();
    // A spread of an hour: without the abort the drain would ask one zone every 250 ms (maxGapMs).
    const drained = global.server.drain({
      spreadMs: 3_600_000,
      maxGapMs: 3_600_000,
      signal: abort.signal,
    });
    await eventually(async () => ends.length === 1, "the first zone is asked at once");
    abort.abort();
    expect(await drained).toBe(12);
    await eventually(async () => ends.length === 12, "every zone's session ended");
    expect(ends.sort()).toEqual(names.map((n) => `${n} reconnect`).sort());
  });

  it("a drain holds one listener on its signal, not one per zone", async () => {
    const { global, names, ends } = await twelveZones();
    const stop = new AbortController();
    // No spread: all 12 are asked before the drain's first await; Node warned of a leak past 10 listeners.
    const drained = global.server.drain({ spreadMs: 0, signal: stop.signal });
    expect(getEventListeners(stop.signal, "abort").length).toBeLessThanOrEqual(1);
    expect(await drained).toBe(12);
    await eventually(async () => ends.length === 12, "every zone's session ended");
    expect(ends.sort()).toEqual(names.map((n) => `${n} reconnect`).sort());
    expect(getEventListeners(stop.signal, "abort")).toHaveLength(0);
  });
});
