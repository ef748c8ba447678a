// Zone ownership across instances: liveness is ONE GlobalInstance record per
// instance, announced every period; the leases (ZoneInsight) are written when
// a session starts or ends, plus a capped slow refresh of their details
// (RENEW_BATCH a period, oldest first, with the version last written, so a
// takeover shows up as a conflict). A lease reads online while its
// instance's record is fresh; a claim that failed is written again.
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { afterEach, describe, expect, it } from "vitest";
import {
  type GlobalInstanceSpec,
  ZoneInsightSpecSchema,
  type ZoneInsightSpec,
} from "../../src/gen/kds/v1/resource_pb.ts";
import { KdsError } from "../../src/errors.ts";
import {
  DEFAULT_REFRESH_PERIODS,
  RENEW_BATCH,
  ZoneOwnership,
  type ZoneOwnershipOptions,
  PRUNE_AFTER_PERIODS,
} from "../../src/global/zone-ownership.ts";
import { silentLogger } from "../../src/log.ts";
import type { SessionEnd } from "../../src/mux/state.ts";
import type { Session } from "../../src/mux/views.ts";
import type { ResourceInput, ResourceStore, WriteOp } from "../../src/store/contract.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import {
  GLOBAL_INSTANCE_KIND,
  ZONE_INSIGHT_KIND,
  createTypeRegistry,
  globalInstanceType,
  zoneInsightType,
} from "../../src/kinds/builtin-types.ts";
import { sleep } from "../../src/util/abort.ts";
import { deferred } from "../../src/util/deferred.ts";
import { eventually } from "../contract/harness.ts";
import { ManualClock } from "../support/manual-clock.ts";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

function stopper(): AbortController {
  const stop = new AbortController();
  cleanups.push(() => stop.abort());
  return stop;
}

/** The part of a session the ownership uses; `closedWith` records a close. */
function fakeSession(zone: string): Session & { closedWith: string | undefined } {
  let end: (e: SessionEnd) => void = () => undefined;
  const closed = new Promise<SessionEnd>((resolve) => (end = resolve));
  const session = {
    peerId: zone,
    closed,
    closedWith: undefined as string | undefined,
    stats: () => ({ heartbeatRttMs: 1 }),
    close: (options?: { code?: string; message?: string }) => {
      session.closedWith = options?.code;
      const e = {
        code: options?.code ?? "shutdown",
        message: options?.message ?? "",
        initiator: "local",
        graceful: true,
      } as SessionEnd;
      end(e);
      return Promise.resolve(e);
    },
  };
  return session as unknown as Session & { closedWith: string | undefined };
}

/** `inner` with the methods in `overrides` replaced; every other method is `inner`'s own, bound to it. */
function overriding<T extends object>(inner: T, overrides: Partial<Record<keyof T, unknown>>): T {
  return new Proxy(inner, {
    get(target, key) {
      if (Object.hasOwn(overrides, key)) return overrides[key as keyof T];
      const value = Reflect.get(target, key, target) as unknown;
      return typeof value === "function"
        ? (value as (...a: unknown[]) => unknown).bind(target)
        : value;
    },
  });
}

/** What a {@link countingStore} saw. */
interface Counts {
  /** Resources written, by kind (a batch counts each of its puts). */
  readonly writes: Map<string, number>;
  /** Sizes of the ZoneInsight batches (`apply`), in order. */
  readonly batches: number[];
}

/**
 * An in-memory store (ZoneInsight and GlobalInstance) that counts the
 * resources written by kind and the batch sizes; `idle()` resolves once no
 * call is in flight (the memory store answers without timers, so a period's
 * work is done then).
 */
function countingStore(): {
  store: ResourceStore;
  inner: InMemoryStore;
  counts: Counts;
  idle: () => Promise<void>;
} {
  const types = createTypeRegistry();
  types.register(zoneInsightType);
  types.register(globalInstanceType);
  const inner = new InMemoryStore(types);
  const counts: Counts = { writes: new Map(), batches: [] };
  const count = (input: ResourceInput): void => {
    counts.writes.set(input.kind, (counts.writes.get(input.kind) ?? 0) + 1);
  };
  let inFlight = 0;
  const track = <T>(p: Promise<T>): Promise<T> => {
    inFlight++;
    return p.finally(() => inFlight--);
  };
  const store = new Proxy(inner, {
    get(target, key) {
      if (key === "put")
        return (input: ResourceInput, options?: Parameters<InMemoryStore["put"]>[1]) => {
          count(input);
          return track(target.put(input, options));
        };
      if (key === "apply")
        return (ops: readonly WriteOp[], options?: { signal?: AbortSignal }) => {
          for (const op of ops) if (op.op === "put") count(op.input);
          counts.batches.push(ops.length);
          return track(target.apply(ops, options));
        };
      const value = Reflect.get(target, key, target) as unknown;
      return typeof value === "function"
        ? (...args: unknown[]) => {
            const out = (value as (...a: unknown[]) => unknown).apply(target, args);
            return out instanceof Promise ? track(out) : out;
          }
        : value;
    },
  });
  const idle = async (): Promise<void> => {
    for (let quiet = 0; quiet < 3; ) {
      await new Promise((r) => setImmediate(r));
      quiet = inFlight === 0 ? quiet + 1 : 0;
    }
  };
  return { store, inner, counts, idle };
}

const PERIOD = 1_000;
const WALL = Date.parse("2026-01-01T00:00:00Z");

/** Ownerships on one store whose wall time and timers follow one hand-stepped clock. */
function handClocked() {
  const clock = new ManualClock(0);
  const setup = countingStore();
  const make = (instance: string, options: Partial<ZoneOwnershipOptions> = {}): ZoneOwnership =>
    new ZoneOwnership({
      store: setup.store,
      instance,
      renewMs: PERIOD,
      now: () => WALL + clock.now(),
      clock,
      logger: silentLogger,
      ...options,
    });
  /** Moves time on by `ms` one period boundary at a time, letting each period's work finish. */
  const advance = async (ms: number): Promise<void> => {
    for (let left = ms; left > 0; ) {
      const step = Math.min(left, PERIOD - (clock.now() % PERIOD) || PERIOD);
      clock.advance(step);
      left -= step;
      await setup.idle();
    }
  };
  return { ...setup, clock, make, advance };
}

const writes = (counts: Counts, kind: string): number => counts.writes.get(kind) ?? 0;

describe("ZoneOwnership: one liveness record per instance", () => {
  it("holding many zones, the periods write the instance record, not the leases", async () => {
    // Real timers: 10 periods pass. The leases were written once each (the claims) and are not due for a refresh (the next test is
    // about the refresh; set far here so a loaded machine cannot make them due).
    const { store, counts } = countingStore();
    const renewMs = 40;
    const ownership = new ZoneOwnership({
      store,
      instance: "g0",
      renewMs,
      refreshAfterMs: 60_000,
      logger: silentLogger,
    });
    const zones = 2 * RENEW_BATCH + 50;
    for (let i = 0; i < zones; i++) await ownership.claim(fakeSession(`zone-${i}`));
    const claimed = writes(counts, ZONE_INSIGHT_KIND);
    expect(claimed).toBe(zones);
    const stop = stopper();
    ownership.start(stop.signal);
    await sleep(10 * renewMs);
    stop.abort();
    // Ten periods of the old per-zone renewal wrote every lease every period: thousands of writes.
    expect(writes(counts, ZONE_INSIGHT_KIND) - claimed).toBe(0);
    expect(writes(counts, GLOBAL_INSTANCE_KIND)).toBeGreaterThanOrEqual(2);
  });

  it("refreshes the leases' details once they are refreshAfterMs old: at most RENEW_BATCH a period, oldest first, each once", async () => {
    const { make, advance, counts, inner, clock } = handClocked();
    const ownership = make("g0");
    const stop = stopper();
    ownership.start(stop.signal);
    const zones = 2 * RENEW_BATCH + 50;
    // Claimed in three groups a period apart (150, 50, 50), the newest first in name order, so oldest-first is not name order.
    const names = Array.from({ length: zones }, (_, i) => `zone-${String(i).padStart(3, "0")}`);
    const groups = [names.slice(100), names.slice(50, 100), names.slice(0, 50)];
    for (const group of groups) {
      for (const zone of group) await ownership.claim(fakeSession(zone));
      await advance(PERIOD);
    }
    const claimed = writes(counts, ZONE_INSIGHT_KIND);
    expect(claimed).toBe(zones);
    const periods = DEFAULT_REFRESH_PERIODS + 10;
    const perPeriod: number[] = [];
    for (let k = 0; k < periods; k++) {
      const before = writes(counts, ZONE_INSIGHT_KIND);
      await advance(PERIOD);
      perPeriod.push(writes(counts, ZONE_INSIGHT_KIND) - before);
    }
    stop.abort();
    // Every period announced the instance; no period wrote more than RENEW_BATCH leases; each lease was refreshed once.
    expect(writes(counts, GLOBAL_INSTANCE_KIND)).toBe(1 + 3 + periods);
    expect(Math.max(...perPeriod)).toBe(RENEW_BATCH);
    expect(perPeriod.reduce((a, b) => a + b, 0)).toBe(zones);
    expect(counts.batches.every((n) => n <= RENEW_BATCH)).toBe(true);
    // Oldest first: the first group's leases were refreshed before any of the last group's.
    const refreshedAt = new Map(
      (await inner.list(ZONE_INSIGHT_KIND)).resources.map((r) => {
        const at = (r.spec as ZoneInsightSpec).renewedAt;
        return [r.meta.name, at === undefined ? 0 : timestampDate(at).getTime()];
      }),
    );
    const first = Math.max(...(groups[0] ?? []).map((z) => refreshedAt.get(z) ?? 0));
    const last = Math.min(...(groups[2] ?? []).map((z) => refreshedAt.get(z) ?? 0));
    expect(first).toBeLessThanOrEqual(last);
    expect(Math.min(...refreshedAt.values())).toBeGreaterThan(
      WALL + clock.now() - periods * PERIOD,
    );
  });

  it("a zone reads offline 3 periods after its instance stopped announcing, though its lease still says online", async () => {
    const { make, advance, inner } = handClocked();
    const a = make("g0");
    const b = make("g1"); // only reads
    const stopA = stopper();
    a.start(stopA.signal);
    await advance(PERIOD / 2);
    await a.claim(fakeSession("zone-1"));
    const claimed = (await inner.get(ZONE_INSIGHT_KIND, "", "zone-1"))?.meta.version;
    // While a announces, the zone reads online long past 3 periods, its lease never written again.
    for (let k = 0; k < 10; k++) {
      await advance(PERIOD);
      expect((await b.leases()).get("zone-1")).toMatchObject({ instance: "g0", online: true });
    }
    expect((await inner.get(ZONE_INSIGHT_KIND, "", "zone-1"))?.meta.version).toBe(claimed);
    // Instance a crashes just after an announcement.
    await advance(PERIOD / 2 + PERIOD / 20);
    stopA.abort();
    await advance(3 * PERIOD - PERIOD / 10);
    expect((await b.leases()).get("zone-1")?.online).toBe(true);
    await advance(PERIOD / 10);
    expect((await b.leases()).get("zone-1")).toMatchObject({ instance: "g0", online: false });
    expect((await inner.get(ZONE_INSIGHT_KIND, "", "zone-1"))?.spec).toMatchObject({
      instance: "g0",
      online: true,
    });
    expect((await b.instances()).map((i) => i.instance)).toEqual([]);
  });

  it("holders() says what leases() says of every zone, from the watch: no lease read from the store after its first call", async () => {
    const { make, advance, store, inner } = handClocked();
    const a = make("g0");
    const stopA = stopper();
    a.start(stopA.signal);
    await advance(PERIOD / 2);
    await a.claim(fakeSession("zone-0")); // before b started: b's first holders() reads it
    let leaseLists = 0;
    const counted = overriding(store, {
      list: (kind: string, options?: Parameters<ResourceStore["list"]>[1]) => {
        if (kind === ZONE_INSIGHT_KIND) leaseLists++;
        return store.list(kind, options);
      },
    });
    const b = make("g1", { store: counted });
    b.start(stopper().signal);
    await advance(PERIOD / 2);
    const holding = (leases: ReadonlyMap<string, { instance: string; online: boolean }>) =>
      new Map([...leases].map(([zone, l]) => [zone, { instance: l.instance, online: l.online }]));
    const agree = async (): Promise<void> => {
      const before = leaseLists;
      const holders = await b.holders();
      expect(leaseLists).toBe(before);
      expect(holding(holders)).toEqual(holding(await b.leases()));
    };
    expect(leaseLists).toBe(0); // nothing kept until asked (an instance that never rebalances keeps nothing)
    expect((await b.holders()).get("zone-0")).toEqual({ instance: "g0", online: true });
    expect(leaseLists).toBe(1);
    await agree();
    const ending = fakeSession("zone-1");
    await a.claim(ending);
    await a.claim(fakeSession("zone-2"));
    await b.claim(fakeSession("zone-3"));
    await advance(PERIOD);
    await agree();
    expect((await b.holders()).get("zone-2")).toEqual({ instance: "g0", online: true });
    expect((await b.holders()).get("zone-3")).toEqual({ instance: "g1", online: true });
    // A session that ends writes its lease offline; a deleted lease goes.
    await ending.close();
    await inner.delete(ZONE_INSIGHT_KIND, "", "zone-0");
    await advance(PERIOD);
    await agree();
    expect((await b.holders()).get("zone-1")).toEqual({ instance: "g0", online: false });
    expect((await b.holders()).has("zone-0")).toBe(false);
    // Instance a stops announcing: its zones read offline after 3 periods, as the leases say.
    stopA.abort();
    await advance(3 * PERIOD + PERIOD / 10);
    await agree();
    expect((await b.holders()).get("zone-2")).toEqual({ instance: "g0", online: false });
  });

  it("holders()' first read does not undo a write or a deletion the watch handed over while it ran", async () => {
    const { make, advance, store, inner } = handClocked();
    const a = make("g0");
    a.start(stopper().signal);
    await advance(PERIOD / 2);
    const moving = fakeSession("zone-1");
    await a.claim(moving);
    await a.claim(fakeSession("zone-2"));
    // b's first read of the leases is answered with what the store held when it was made, but only once `release` resolves.
    const release = deferred<void>();
    const b = make("g1", {
      store: overriding(store, {
        list: async (kind: string, options?: Parameters<ResourceStore["list"]>[1]) => {
          const read = await store.list(kind, options);
          if (kind === ZONE_INSIGHT_KIND) await release.promise;
          return read;
        },
      }),
    });
    b.start(stopper().signal);
    await advance(PERIOD / 2);
    const first = b.holders();
    await advance(PERIOD / 10);
    // Meanwhile zone-1 moves to b (a newer lease) and zone-2's lease is deleted; b's watch hands both over.
    await moving.close();
    await b.claim(fakeSession("zone-1"));
    await inner.delete(ZONE_INSIGHT_KIND, "", "zone-2");
    await advance(PERIOD / 10);
    release.resolve();
    const holders = await first;
    expect(holders.get("zone-1")).toEqual({ instance: "g1", online: true });
    expect(holders.has("zone-2")).toBe(false);
  });

  it("a lease left by an earlier run of an instance id reads offline once the id announces again", async () => {
    const { make, advance } = handClocked();
    const first = make("g0");
    const stop = stopper();
    first.start(stop.signal);
    await first.claim(fakeSession("zone-1"));
    await advance(PERIOD / 2);
    stop.abort(); // killed: the lease still says online, written half a period ago
    const again = make("g0");
    again.start(stopper().signal);
    await advance(PERIOD / 2);
    const reader = make("g1");
    expect((await reader.leases()).get("zone-1")).toMatchObject({ instance: "g0", online: false });
    // A session the new run holds reads online.
    await again.claim(fakeSession("zone-2"));
    expect((await reader.leases()).get("zone-2")?.online).toBe(true);
  });

  it("instances() lists the live instances with their address and whether they drain", async () => {
    const { make, advance } = handClocked();
    let draining = false;
    const a = make("g0", { zoneUrl: () => "https://g0:5685", draining: () => draining });
    const b = make("g1");
    const stopB = stopper();
    a.start(stopper().signal);
    b.start(stopB.signal);
    await advance(PERIOD);
    const live = async () =>
      (await a.instances()).map((i) => ({
        instance: i.instance,
        zoneUrl: i.zoneUrl,
        draining: i.draining,
      }));
    expect(await live()).toEqual([
      { instance: "g0", zoneUrl: "https://g0:5685", draining: false },
      { instance: "g1", zoneUrl: "", draining: false },
    ]);
    draining = true;
    await a.announce();
    expect((await b.instances()).find((i) => i.instance === "g0")?.draining).toBe(true);
    stopB.abort();
    await advance(3 * PERIOD);
    expect((await live()).map((i) => i.instance)).toEqual(["g0"]);
  });

  it("an instance's record gives how many zones it held when it last announced itself", async () => {
    const { make, advance } = handClocked();
    const a = make("g0");
    const b = make("g1");
    a.start(stopper().signal);
    await advance(PERIOD);
    const zonesOfG0 = async () => (await b.instances()).find((i) => i.instance === "g0")?.zones;
    expect(await zonesOfG0()).toBe(0);
    await a.claim(fakeSession("zone-1"));
    await a.claim(fakeSession("zone-2"));
    expect(await zonesOfG0()).toBe(0); // not announced yet
    await advance(PERIOD);
    expect(await zonesOfG0()).toBe(2);
  });

  it("a lease taken over by another instance: the refresh's conflict closes only that zone's session; the rest of its batch is refreshed", async () => {
    const { make, advance, counts, inner } = handClocked();
    // Due 1.5 periods after a write: the second period refreshes the first RENEW_BATCH leases, the third the 10 left.
    const ownership = make("g0", { refreshAfterMs: 1.5 * PERIOD });
    const sessions = Array.from({ length: RENEW_BATCH + 10 }, (_, i) =>
      fakeSession(`zone-${String(i).padStart(3, "0")}`),
    );
    for (const s of sessions) await ownership.claim(s);
    // Another instance writes a lease of the second batch behind this one's back (a newer session there).
    const taken = `zone-${RENEW_BATCH + 5}`;
    await inner.put({
      kind: ZONE_INSIGHT_KIND,
      name: taken,
      spec: create(ZoneInsightSpecSchema, { instance: "g1", session: "other", online: true }),
    });
    const before = new Map(
      (await inner.list(ZONE_INSIGHT_KIND)).resources.map((r) => [r.meta.name, r.meta.version]),
    );
    const batches = counts.batches.length;
    // Started only now, so the takeover is seen only by the refresh (its conflict), not by the change feed first.
    ownership.start(stopper().signal);
    await advance(3 * PERIOD);
    expect(counts.batches.slice(batches)).toEqual([RENEW_BATCH, 10]);
    expect(sessions.filter((s) => s.closedWith !== undefined).map((s) => s.peerId)).toEqual([
      taken,
    ]);
    expect(sessions.find((s) => s.peerId === taken)?.closedWith).toBe("replaced");
    const changed = (await inner.list(ZONE_INSIGHT_KIND)).resources.filter(
      (r) => r.meta.version !== before.get(r.meta.name),
    );
    expect(changed).toHaveLength(sessions.length - 1);
    expect((await inner.get(ZONE_INSIGHT_KIND, "", taken))?.spec).toMatchObject({ instance: "g1" });
  });

  it("the announcements go on every period while the lease work is stuck on a slow store", async () => {
    const clock = new ManualClock(0);
    const { store: counted, counts } = countingStore();
    let release: () => void = () => undefined;
    const stuck = new Promise<void>((resolve) => (release = resolve));
    let hanging = 0;
    cleanups.push(() => release());
    // Batches (the refresh) hang until released; single writes (the announcements) go through.
    const store = overriding(counted, {
      apply: async (...args: Parameters<InMemoryStore["apply"]>) => {
        hanging++;
        await stuck;
        return counted.apply(...args);
      },
    });
    const ownership = new ZoneOwnership({
      store,
      instance: "g0",
      renewMs: PERIOD,
      refreshAfterMs: 0,
      now: () => WALL + clock.now(),
      clock,
      logger: silentLogger,
    });
    await ownership.claim(fakeSession("zone-1"));
    ownership.start(stopper().signal);
    await eventually(() => writes(counts, GLOBAL_INSTANCE_KIND) === 1, "the announcement at start");
    for (let k = 1; k <= 5; k++) {
      clock.advance(PERIOD);
      await eventually(
        () => writes(counts, GLOBAL_INSTANCE_KIND) === 1 + k,
        `announcement ${k} while the refresh hangs`,
      );
    }
    expect(hanging).toBe(1); // the first period's refresh, still hanging; the later periods skipped theirs
  });

  it("a late write for an older session elsewhere does not end ours; the next period writes our lease again", async () => {
    const { make, advance, inner } = handClocked();
    const ownership = make("g0");
    ownership.start(stopper().signal);
    await advance(PERIOD / 2);
    const session = fakeSession("zone-1");
    await ownership.claim(session);
    // Another instance's claim for a session that began before ours lands after it.
    await inner.put({
      kind: ZONE_INSIGHT_KIND,
      name: "zone-1",
      spec: create(ZoneInsightSpecSchema, {
        instance: "g1",
        session: "older",
        online: true,
        connectedAt: timestampFromDate(new Date(WALL)),
      }),
    });
    await advance(PERIOD / 2);
    expect(session.closedWith).toBeUndefined();
    expect((await inner.get(ZONE_INSIGHT_KIND, "", "zone-1"))?.spec).toMatchObject({
      instance: "g0",
      online: true,
    });
  });

  it("a claim whose write failed is written at the next period", async () => {
    const types = createTypeRegistry();
    types.register(zoneInsightType);
    types.register(globalInstanceType);
    const inner = new InMemoryStore(types);
    let failing = true;
    const store = overriding(inner, {
      put: (...args: Parameters<InMemoryStore["put"]>) =>
        failing
          ? Promise.reject(new KdsError("store_unavailable", "the database is away"))
          : inner.put(...args),
    });
    const ownership = new ZoneOwnership({
      store,
      instance: "g0",
      renewMs: 50,
      logger: silentLogger,
    });
    const session = fakeSession("zone-1");
    await expect(ownership.claim(session)).rejects.toThrow(/the database is away/);
    expect(await inner.get(ZONE_INSIGHT_KIND, "", "zone-1")).toBeUndefined();
    failing = false;
    const stop = stopper();
    ownership.start(stop.signal);
    await eventually(
      async () => (await inner.get(ZONE_INSIGHT_KIND, "", "zone-1")) !== undefined,
      "the lease written by a later period",
    );
    expect((await inner.get(ZONE_INSIGHT_KIND, "", "zone-1"))?.spec).toMatchObject({
      instance: "g0",
      online: true,
    });
    expect(
      ((await inner.get(GLOBAL_INSTANCE_KIND, "", "g0"))?.spec as GlobalInstanceSpec | undefined)
        ?.renewedAt,
    ).toBeDefined();
    expect(session.closedWith).toBeUndefined();
  });

  it("deletes the record of an instance silent for PRUNE_AFTER_PERIODS periods, and only then", async () => {
    const { make, advance, inner } = handClocked();
    const gone = make("g-gone");
    const stopGone = stopper();
    gone.start(stopGone.signal);
    await gone.claim(fakeSession("zone-1"));
    await advance(PERIOD);
    stopGone.abort(); // a start with a fresh id, then a crash: its record stays behind
    const live = make("g-live");
    live.start(stopper().signal);
    await advance((PRUNE_AFTER_PERIODS - 30) * PERIOD);
    expect(await inner.get(GLOBAL_INSTANCE_KIND, "", "g-gone")).toBeDefined();
    expect((await live.leases()).get("zone-1")?.online).toBe(false);
    await advance(60 * PERIOD);
    expect(await inner.get(GLOBAL_INSTANCE_KIND, "", "g-gone")).toBeUndefined();
    expect(await inner.get(GLOBAL_INSTANCE_KIND, "", "g-live")).toBeDefined();
    // The lease naming it still reads offline (by its own renewedAt) and is kept as history.
    expect((await live.leases()).get("zone-1")).toMatchObject({
      instance: "g-gone",
      online: false,
    });
  });

  it("claims retried after a store outage go out RENEW_BATCH at a time, and all land", async () => {
    const clock = new ManualClock(0);
    const types = createTypeRegistry();
    types.register(zoneInsightType);
    types.register(globalInstanceType);
    const inner = new InMemoryStore(types);
    let down = true;
    let inFlight = 0;
    let most = 0;
    const store = overriding(inner, {
      put: async (...args: Parameters<InMemoryStore["put"]>) => {
        if (args[0].kind !== ZONE_INSIGHT_KIND) return inner.put(...args);
        if (down) throw new KdsError("store_unavailable", "the database is away");
        inFlight++;
        most = Math.max(most, inFlight);
        try {
          await new Promise((r) => setImmediate(r));
          return await inner.put(...args);
        } finally {
          inFlight--;
        }
      },
    });
    const ownership = new ZoneOwnership({
      store,
      instance: "g0",
      renewMs: PERIOD,
      now: () => WALL + clock.now(),
      clock,
      logger: silentLogger,
    });
    const zones = 2 * RENEW_BATCH + 50;
    for (let i = 0; i < zones; i++)
      await expect(ownership.claim(fakeSession(`zone-${i}`))).rejects.toThrow(/away/);
    ownership.start(stopper().signal);
    down = false;
    clock.advance(PERIOD);
    await eventually(
      async () => (await inner.list(ZONE_INSIGHT_KIND)).resources.length === zones,
      "every claim written at the period after the outage",
    );
    expect(most).toBe(RENEW_BATCH);
  });
});

describe("ZoneOwnership: the offline records of ended sessions", () => {
  function insightStore(): InMemoryStore {
    const types = createTypeRegistry();
    types.register(zoneInsightType);
    types.register(globalInstanceType);
    return new InMemoryStore(types);
  }
  const online = async (store: ResourceStore, zone: string): Promise<boolean | undefined> =>
    ((await store.get(ZONE_INSIGHT_KIND, "", zone))?.spec as ZoneInsightSpec | undefined)?.online;

  it("released() waits for them to be written, or says how many were left when its signal aborts", async () => {
    const inner = insightStore();
    const gate = deferred<void>();
    const store = overriding(inner, {
      put: async (...args: Parameters<InMemoryStore["put"]>) => {
        const spec = args[0].spec as ZoneInsightSpec;
        if (!spec.online) await gate.promise;
        return inner.put(...args);
      },
    });
    const ownership = new ZoneOwnership({ store, instance: "g0", logger: silentLogger });
    const sessions = ["a", "b", "c"].map((zone) => fakeSession(zone));
    for (const s of sessions) await ownership.claim(s);
    expect(await ownership.released()).toBe(0); // nothing ended
    for (const s of sessions) await s.close({ code: "reconnect" });
    const deadline = new AbortController();
    const early = ownership.released(deadline.signal);
    deadline.abort();
    expect(await early).toBe(3);
    expect(await online(inner, "a")).toBe(true);
    const all = ownership.released();
    gate.resolve();
    expect(await all).toBe(0);
    for (const zone of ["a", "b", "c"]) expect(await online(inner, zone)).toBe(false);
  });

  it("failures are logged once, then counted in one line per burst", async () => {
    const inner = insightStore();
    const store = overriding(inner, {
      put: (...args: Parameters<InMemoryStore["put"]>) =>
        (args[0].spec as ZoneInsightSpec).online
          ? inner.put(...args)
          : Promise.reject(new KdsError("store_unavailable", "the store was closed")),
    });
    const clock = new ManualClock();
    const warnings: string[] = [];
    const ownership = new ZoneOwnership({
      store,
      instance: "g0",
      clock,
      logger: { ...silentLogger, warn: (message: string) => void warnings.push(message) },
    });
    const sessions = ["a", "b", "c", "d", "e"].map((zone) => fakeSession(zone));
    for (const s of sessions) await ownership.claim(s);
    for (const s of sessions) await s.close({ code: "reconnect" });
    await eventually(async () => warnings.length > 0, "the first failure logged");
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/recording that zone "a" went offline failed/);
    // The rest are counted, and said when a stopping instance has waited for them.
    expect(await ownership.released()).toBe(0);
    expect(warnings).toHaveLength(2);
    expect(warnings[1]).toMatch(/recording that 4 more zones went offline failed .*zone "e"/);
    clock.advance(20_000);
    expect(await ownership.released()).toBe(0);
    expect(warnings).toHaveLength(2);
  });
});
