// Rebalancing across global instances on one store: two instances hold every
// zone; a third joins, and the others ask zones to move to it (goaway
// RECONNECT naming its address) a bounded number per round, until each holds
// its share. The zones resume by versions: nothing is resent to them. A round
// on its own: it counts only the live instances ZoneOwnership gives it.
import { create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it } from "vitest";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { KdsError } from "../../src/errors.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { Rebalancer } from "../../src/global/rebalancer.ts";
import type { LiveInstance, ZoneLease } from "../../src/global/zone-ownership.ts";
import { ZoneInsightSpecSchema } from "../../src/gen/kds/v1/resource_pb.ts";
import type { Session } from "../../src/mux/views.ts";
import { silentLogger } from "../../src/log.ts";
import { noopMetrics } from "../../src/metrics.ts";
import { ManualClock } from "../support/manual-clock.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { failoverMuxTransport } from "../../src/transport/failover.ts";
import { memoryMuxTransport } from "../../src/transport/memory.ts";
import type { MuxTransport } from "../../src/transport/transport.ts";
import type { RetryInfo } from "../../src/zone/zone-client.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { eventually } from "../contract/harness.ts";
import { mesh } from "../sync/helpers.ts";

const stops: AbortController[] = [];
afterEach(() => {
  for (const s of stops.splice(0)) s.abort();
});
function stopper(): AbortSignal {
  const stop = new AbortController();
  stops.push(stop);
  return stop.signal;
}

const ZONES = 30;
const MOVES = 4;

describe("rebalancing zones across global instances", () => {
  it("a third instance joins: the others shed toward it, a few per round, to an even split, with nothing resent", async () => {
    const types = createTypeRegistry(exampleTypes);
    const store = new InMemoryStore(types);
    const urls = ["mem://g0", "mem://g1", "mem://g2"];
    const globals: (GlobalControlPlane | undefined)[] = [undefined, undefined, undefined];
    const start = (i: number): GlobalControlPlane => {
      const g = new GlobalControlPlane({
        types,
        store,
        id: "global",
        instance: `g${i}`,
        logger: silentLogger,
        leaseRenewMs: 100,
        storeRetry: { baseMs: 5, capMs: 20 },
        rebalance: { intervalMs: 100, maxMovesPerRound: MOVES },
        zoneUrl: () => urls[i],
      });
      g.start(stopper());
      globals[i] = g;
      return g;
    };
    const a = start(0);
    start(1);
    for (let i = 0; i < 3; i++) await store.put(mesh(`m-${i}`));
    // A transport to instance i: refused while it is not running.
    const to = (i: number): MuxTransport => ({
      name: "memory",
      open: (request) => {
        const g = globals[i];
        return g === undefined
          ? Promise.reject(new KdsError("transport", `instance ${i} is not running`))
          : memoryMuxTransport(g.server).open(request);
      },
    });
    const retries: RetryInfo[] = [];
    const zones: ZoneControlPlane[] = [];
    for (let z = 0; z < ZONES; z++) {
      const name = `zone-${z}`;
      await a.registerZone(name);
      // Half start at g0, half at g1; every zone knows all three addresses.
      const order = z % 2 === 0 ? [0, 1, 2] : [1, 2, 0];
      const zone = new ZoneControlPlane({
        name,
        token: async () => (await a.tokens.issueZoneToken(name)).token,
        transport: failoverMuxTransport(order.map(to), {
          targets: order.map((i) => urls[i] as string),
        }),
        types: createTypeRegistry(exampleTypes),
        logger: silentLogger,
        backoff: { baseMs: 60_000, capMs: 60_000 },
        reconnectJitterMs: 20,
        onRetry: (info) => retries.push(info),
      });
      void zone.run(stopper());
      zones.push(zone);
    }
    for (const zone of zones)
      await eventually(
        async () => (await zone.store.list("Mesh")).resources.length === 3,
        `${zone.client.name} holds the meshes`,
      );
    const received = (): number[] =>
      zones.map((z) => z.status().types.find((t) => t.kind === "Mesh")?.resourcesReceived ?? 0);
    const before = received();
    const counts = (): number[] => globals.map((g) => g?.server.sessions().length ?? 0);
    await eventually(
      () => counts()[0] === ZONES / 2 && counts()[1] === ZONES / 2,
      "15 zones on each of the first two instances",
      10_000,
    );

    // The third instance joins.
    const c = start(2);
    const joined = performance.now();
    await eventually(
      () => counts().every((k) => k === ZONES / 3),
      "every instance holds its share of 10",
      20_000,
    );
    console.log(
      `rebalance: ${ZONES} zones on 2 instances, a third joined; even (${counts().join("/")}) after ${Math.round(performance.now() - joined)} ms, ${retries.length} moves`,
    );
    // Every move was asked (no failure), and no zone was sent a Mesh again.
    expect(retries.every((r) => r.asked)).toBe(true);
    expect(retries.length).toBeGreaterThanOrEqual(ZONES / 3);
    expect(received()).toEqual(before);
    for (let z = 0; z < ZONES; z++)
      expect(
        c.sync.status(`zone-${z}`).types.find((t) => t.kind === "Mesh")?.resourcesSent ?? 0,
      ).toBe(0);
  });
});

/** A session the Rebalancer can ask to move; `asked` records where to. */
function movable(zone: string): Session & { asked: string | undefined } {
  const session = {
    peerId: zone,
    end: undefined,
    asked: undefined as string | undefined,
    close: (options?: { reconnectTo?: string }) => {
      session.asked = options?.reconnectTo;
      return Promise.resolve({
        code: "reconnect",
        message: "",
        initiator: "local",
        graceful: true,
      });
    },
  };
  return session as unknown as Session & { asked: string | undefined };
}

/** Leases of `count` online zones held by `instance`. */
function held(instance: string, count: number, from = 0): [string, ZoneLease][] {
  return Array.from({ length: count }, (_, i) => [
    `${instance}-zone-${from + i}`,
    { instance, online: true, insight: create(ZoneInsightSpecSchema, { instance, online: true }) },
  ]);
}

describe("a rebalancing round", () => {
  const live = (instance: string, zoneUrl: string, draining = false): LiveInstance => ({
    instance,
    zoneUrl,
    draining,
    renewedAt: new Date(),
  });

  it("counts only the live instances it is given, not a draining one, and moves its excess to the least loaded", async () => {
    const sessions = Array.from({ length: 6 }, (_, i) => movable(`g0-zone-${i}`));
    const rebalancer = new Rebalancer({
      instance: "g0",
      // g3 holds zones but is not live (its record lapsed): it is neither counted nor a target.
      instances: async () => [
        live("g0", "mem://g0"),
        live("g1", "mem://g1", true),
        live("g2", "mem://g2"),
      ],
      leases: async () => new Map([...held("g0", 6), ...held("g1", 5), ...held("g3", 9)]),
      sessions: () => sessions,
      draining: () => false,
      logger: silentLogger,
    });
    // Live and not draining: g0 with 6 and g2 with 0, so a share of 3: three move to g2, the newest first.
    expect(await rebalancer.round(new AbortController().signal)).toBe(3);
    expect(sessions.map((s) => s.asked ?? "-")).toEqual([
      "-",
      "-",
      "-",
      "mem://g2",
      "mem://g2",
      "mem://g2",
    ]);
  });

  /** g0 beside g2, whose record gives `g2Zones()` as its count. */
  const g0BesideG2 = (o: {
    g2Zones: () => number | undefined;
    leases: () => Map<string, ZoneLease>;
    sessions: () => Session[];
    clock?: ManualClock;
  }): Rebalancer =>
    new Rebalancer({
      instance: "g0",
      instances: async () => [
        live("g0", "mem://g0"),
        { ...live("g2", "mem://g2"), zones: o.g2Zones() },
      ],
      leases: async () => o.leases(),
      sessions: o.sessions,
      draining: () => false,
      logger: silentLogger,
      clock: o.clock,
    });

  it("reads every lease only when the records' counts say it may be over its share, a move is in flight, or a record gives no count", async () => {
    const clock = new ManualClock();
    let sessions = Array.from({ length: 3 }, (_, i) => movable(`g0-zone-${i}`));
    let leaseReads = 0;
    let leases = new Map([...held("g0", 3), ...held("g2", 3)]);
    let g2Zones: number | undefined = 3;
    const rebalancer = g0BesideG2({
      g2Zones: () => g2Zones,
      leases: () => {
        leaseReads++;
        return leases;
      },
      sessions: () => sessions,
      clock,
    });
    const signal = new AbortController().signal;
    const round = async (): Promise<number> => {
      clock.advance(10_000);
      return rebalancer.round(signal);
    };
    // Even by the records (3 and 3): no lease is read.
    expect(await round()).toBe(0);
    expect(leaseReads).toBe(0);
    // g2's record says 0 (it lost zones): g0 may be over; the leases (3 and 1) decide: one moves.
    g2Zones = 0;
    leases = new Map([...held("g0", 3), ...held("g2", 1)]);
    expect(await round()).toBe(1);
    expect(leaseReads).toBe(1);
    // The zone left; g2 announced 2. Even by the records, but the move is in flight: its lease is read.
    const moved = sessions.find((s) => s.asked !== undefined)?.peerId as string;
    sessions = sessions.filter((s) => s.asked === undefined);
    g2Zones = 2;
    leases = new Map([...held("g0", 2), ...held("g2", 1), ...held("g2", 1, 1)]);
    leases.set(moved, {
      instance: "g2",
      online: true,
      insight: create(ZoneInsightSpecSchema, { instance: "g2", online: true }),
    });
    expect(await round()).toBe(0);
    expect(leaseReads).toBe(2);
    expect(rebalancer.zoneMoves(moved)).toBeUndefined(); // landed, and forgotten
    // Nothing in flight, even by the records: no read.
    expect(await round()).toBe(0);
    expect(leaseReads).toBe(2);
    // A record without a count (an instance that does not announce one): its leases are counted.
    g2Zones = undefined;
    expect(await round()).toBe(0);
    expect(leaseReads).toBe(3);
  });

  it("tolerates 1% above the share, and then sheds down to the share", async () => {
    let sessions = Array.from({ length: 202 }, (_, i) => movable(`g0-zone-${i}`));
    let leaseReads = 0;
    let g2Zones = 198;
    const rebalancer = g0BesideG2({
      g2Zones: () => g2Zones,
      leases: () => {
        leaseReads++;
        return new Map([...held("g0", sessions.length), ...held("g2", g2Zones)]);
      },
      sessions: () => sessions,
    });
    const signal = new AbortController().signal;
    // 202 and 198: a share of 200, and 2 above it is within 1%.
    expect(await rebalancer.round(signal)).toBe(0);
    expect(leaseReads).toBe(0);
    // 204 and 196: 4 above; the leases confirm it, and all 4 move.
    sessions = Array.from({ length: 204 }, (_, i) => movable(`g0-zone-${i}`));
    g2Zones = 196;
    expect(await rebalancer.round(signal)).toBe(4);
    expect(leaseReads).toBe(1);
  });

  it("within 1% above the share, still sheds toward an instance more than 1% under it", async () => {
    const sessions = Array.from({ length: 202 }, (_, i) => movable(`g0-zone-${i}`));
    let leaseReads = 0;
    let g2Zones = 199;
    const rebalancer = new Rebalancer({
      instance: "g0",
      instances: async () => [
        live("g0", "mem://g0"),
        { ...live("g1", "mem://g1"), zones: 202 },
        { ...live("g2", "mem://g2"), zones: g2Zones },
      ],
      leases: async () => {
        leaseReads++;
        return new Map([...held("g0", 202), ...held("g1", 202), ...held("g2", g2Zones)]);
      },
      sessions: () => sessions,
      draining: () => false,
      logger: silentLogger,
    });
    const signal = new AbortController().signal;
    // 202, 202, 199: a share of 201, everyone within 2 of it: nothing read, nothing moved.
    expect(await rebalancer.round(signal)).toBe(0);
    expect(leaseReads).toBe(0);
    // 202, 202, 196: a share of 200; g0 is only 2 over, but g2 is 4 under: g0 and g1 each send 2.
    g2Zones = 196;
    expect(await rebalancer.round(signal)).toBe(2);
    expect(leaseReads).toBe(1);
  });

  it("a draining instance sheds nothing itself", async () => {
    const sessions = Array.from({ length: 6 }, (_, i) => movable(`g0-zone-${i}`));
    const rebalancer = new Rebalancer({
      instance: "g0",
      instances: async () => [live("g0", "mem://g0"), live("g2", "mem://g2")],
      leases: async () => new Map(held("g0", 6)),
      sessions: () => sessions,
      draining: () => true,
      logger: silentLogger,
    });
    expect(await rebalancer.round(new AbortController().signal)).toBe(0);
    expect(sessions.every((s) => s.asked === undefined)).toBe(true);
  });
});

describe("moves that do not land", () => {
  const live = (instance: string, zoneUrl: string): LiveInstance => ({
    instance,
    zoneUrl,
    draining: false,
    renewedAt: new Date(),
  });
  const signal = new AbortController().signal;

  /**
   * g0 holding `count` zones beside an empty g1 (at `g1Url`), where every
   * zone asked to move comes straight back to g0 on a new session (a zone
   * that does not follow, or a balancer that routes it back).
   */
  function comingBack(count: number, g1Url: string) {
    const clock = new ManualClock();
    let sessions = Array.from({ length: count }, (_, i) => movable(`zone-${i}`));
    const outcomes: string[] = [];
    const logged: string[] = [];
    const rebalancer = new Rebalancer({
      instance: "g0",
      instances: async () => [live("g0", "http://lb:5685"), live("g1", g1Url)],
      leases: async () => new Map(held("g0", 0)),
      sessions: () => sessions,
      draining: () => false,
      logger: { ...silentLogger, info: (message: string) => logged.push(message) },
      metrics: { ...noopMetrics, rebalanceMove: (outcome) => outcomes.push(outcome) },
      clock,
      holdOff: { baseMs: 60_000, capMs: 240_000 },
    });
    /** Every zone asked to move reconnects here: a new session object for the same zone. */
    const comeBack = (): void => {
      sessions = sessions.map((s) => (s.asked === undefined ? s : movable(s.peerId)));
    };
    return { clock, rebalancer, outcomes, logged, comeBack, sessions: () => sessions };
  }

  it("does not ask a zone that came back again until its hold-off passed, which grows, and counts each", async () => {
    const { clock, rebalancer, outcomes, comeBack } = comingBack(2, "http://g1:5685");
    // 2 zones, share 1: one asked per round.
    expect(await rebalancer.round(signal)).toBe(1);
    comeBack();
    clock.advance(10_000);
    // zone-1 came back: held off; zone-0 is asked instead.
    expect(await rebalancer.round(signal)).toBe(1);
    expect(rebalancer.zoneMoves("zone-1")).toMatchObject({ asked: 1, unlanded: 1 });
    expect(rebalancer.zoneMoves("zone-1")?.heldUntil).toBeInstanceOf(Date);
    comeBack();
    clock.advance(10_000);
    // Both came back and are held off: nobody is asked.
    expect(await rebalancer.round(signal)).toBe(0);
    clock.advance(30_000); // 40 s after zone-1's return was seen: still held (60 s)
    expect(await rebalancer.round(signal)).toBe(0);
    clock.advance(20_001);
    expect(await rebalancer.round(signal)).toBe(1); // zone-1's first hold-off passed
    comeBack();
    clock.advance(10_000);
    expect(await rebalancer.round(signal)).toBe(1); // zone-0's passed too
    comeBack();
    // zone-1's second return holds it for 120 s: twice as long.
    clock.advance(110_000);
    expect(await rebalancer.round(signal)).toBe(0);
    expect(rebalancer.zoneMoves("zone-1")).toMatchObject({ asked: 2, unlanded: 2 });
    clock.advance(11_000);
    expect(await rebalancer.round(signal)).toBe(1);
    expect(outcomes.filter((o) => o === "asked")).toHaveLength(5);
    expect(outcomes.filter((o) => o === "unlanded")).toHaveLength(4);
  });

  it("behind one address every instance advertises, says why it stops asking", async () => {
    const { clock, rebalancer, logged, comeBack } = comingBack(4, "http://lb:5685");
    expect(await rebalancer.round(signal)).toBe(2);
    expect(logged.at(-1)).toMatch(/which every instance advertises: the load balancer there picks/);
    comeBack();
    clock.advance(10_000);
    expect(await rebalancer.round(signal)).toBe(2);
    comeBack();
    clock.advance(10_000);
    expect(await rebalancer.round(signal)).toBe(0);
    expect(logged.at(-1)).toMatch(
      /asking none to move: every zone beyond the share came back when asked before and is held off \(every instance advertises http:\/\/lb:5685/,
    );
    // Said once while nothing changes.
    const lines = logged.length;
    clock.advance(10_000);
    expect(await rebalancer.round(signal)).toBe(0);
    expect(logged).toHaveLength(lines);
  });

  it("a zone whose move landed (its lease online on the other instance) is not counted, and is forgotten", async () => {
    const clock = new ManualClock();
    let sessions = Array.from({ length: 2 }, (_, i) => movable(`zone-${i}`));
    const outcomes: string[] = [];
    let leases = new Map(held("g0", 0));
    const rebalancer = new Rebalancer({
      instance: "g0",
      instances: async () => [live("g0", "http://g0"), live("g1", "http://g1")],
      leases: async () => leases,
      sessions: () => sessions,
      draining: () => false,
      logger: silentLogger,
      metrics: { ...noopMetrics, rebalanceMove: (outcome) => outcomes.push(outcome) },
      clock,
    });
    expect(await rebalancer.round(signal)).toBe(1);
    const moved = sessions.find((s) => s.asked !== undefined)?.peerId as string;
    sessions = sessions.filter((s) => s.asked === undefined);
    leases = new Map([
      [
        moved,
        {
          instance: "g1",
          online: true,
          insight: create(ZoneInsightSpecSchema, { instance: "g1", online: true }),
        },
      ],
    ]);
    clock.advance(10_000);
    expect(await rebalancer.round(signal)).toBe(0);
    expect(outcomes).toEqual(["asked"]);
    expect(rebalancer.zoneMoves(moved)).toBeUndefined();
  });
});
