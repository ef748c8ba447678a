// Offline zones on the global, with a hand-stepped clock: the state machine
// alone, then OfflineZones over a real store: a zone offline past its stale
// time has its resources marked (and counted in the gauge), the marks go when
// it connects again, and past its expiry its resources are deleted; a stale
// zone-to-zones resource of a "withhold" kind no longer reaches other zones.
import { create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it } from "vitest";
import {
  DataplaneSpecSchema,
  exampleTypes,
  ZoneIngressSpecSchema,
} from "../../examples/example-kinds/index.ts";
import {
  nextDeadline,
  nextOfflineState,
  OfflineZones,
  type OfflineState,
  type ZonePresence,
} from "../../src/global/offline-zones.ts";
import { silentLogger } from "../../src/log.ts";
import { noopMetrics } from "../../src/metrics.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { crossZoneFilter } from "../../src/sync/cross-zone.ts";
import { LABELS } from "../../src/kinds/resource-types.ts";
import { KdsError } from "../../src/errors.ts";
import { ManualClock } from "../support/manual-clock.ts";

const times = { staleAfterMs: 60_000, expireAfterMs: 600_000 };

describe("the offline state of a zone", () => {
  const seen = (online: boolean, now: number, offlineForMs?: number) => ({
    online,
    now,
    lastOnline: online ? undefined : 5,
    offlineForMs,
  });

  it("goes offline, stale, expired by time, and back online clearing its marks", () => {
    let s: OfflineState = { state: "online" };
    let r = nextOfflineState(s, seen(false, 1000), times);
    expect(r).toEqual({
      state: { state: "offline", since: 1000, lastOnline: 5 },
      action: undefined,
    });
    s = r.state;
    expect(nextDeadline(s, times)).toBe(61_000);
    expect(nextOfflineState(s, seen(false, 60_999), times).action).toBeUndefined();
    r = nextOfflineState(s, seen(false, 61_000), times);
    expect(r.action).toBe("mark");
    expect(r.state.state).toBe("stale");
    expect(nextDeadline(r.state, times)).toBe(601_000);
    // Stale stays stale (no second mark) until the expiry.
    expect(nextOfflineState(r.state, seen(false, 100_000), times).action).toBeUndefined();
    const expired = nextOfflineState(r.state, seen(false, 601_000), times);
    expect(expired).toEqual({ state: { state: "expired" }, action: "expire" });
    expect(nextOfflineState(expired.state, seen(false, 999_999), times).action).toBeUndefined();
    expect(nextOfflineState(r.state, seen(true, 100_000), times)).toEqual({
      state: { state: "online" },
      action: "clear",
    });
    expect(nextOfflineState(expired.state, seen(true, 999_999), times).action).toBeUndefined();
  });

  it("counts the time a zone was offline before this instance looked, and clears leftovers of an earlier run", () => {
    const r = nextOfflineState({ state: "unknown" }, seen(false, 1000, 70_000), times);
    expect(r.action).toBe("mark");
    expect(nextOfflineState({ state: "unknown" }, seen(true, 1000), times).action).toBe("clear");
    // Without times nothing ever happens.
    const none = { staleAfterMs: undefined, expireAfterMs: undefined };
    expect(nextOfflineState({ state: "unknown" }, seen(false, 1000, 1e12), none).action).toBe(
      undefined,
    );
  });
});

describe("OfflineZones over a store", () => {
  const controllers: AbortController[] = [];
  afterEach(() => {
    for (const c of controllers.splice(0)) c.abort();
  });

  async function setup() {
    const types = createTypeRegistry(exampleTypes);
    const store = new InMemoryStore(types);
    const zoneLabels = (zone: string, name: string) => ({
      [LABELS.origin]: "zone",
      [LABELS.zone]: zone,
      [LABELS.displayName]: name,
      [LABELS.originVersion]: "1",
    });
    for (const zone of ["a", "b"])
      for (let i = 0; i < 3; i++) {
        await store.put({
          kind: "Dataplane",
          mesh: "default",
          name: `${zone}.dp-${i}`,
          labels: zoneLabels(zone, `dp-${i}`),
          spec: create(DataplaneSpecSchema, { address: "10.0.0.1" }),
        });
        await store.put({
          kind: "ZoneIngress",
          name: `${zone}.in-${i}`,
          labels: zoneLabels(zone, `in-${i}`),
          spec: create(ZoneIngressSpecSchema, { address: "10.0.0.2" }),
        });
      }
    const presence = new Map<string, ZonePresence>([
      ["a", { online: true, lastOnline: undefined }],
      ["b", { online: true, lastOnline: undefined }],
    ]);
    const clock = new ManualClock();
    const gauge = new Map<string, number>();
    const wall = Date.parse("2026-12-01T10:00:00.000Z");
    const offline = new OfflineZones({
      store,
      types,
      ...times,
      clock,
      now: () => wall + clock.now(),
      presence: () => Promise.resolve(new Map(presence)),
      metrics: {
        ...noopMetrics,
        staleResources: (zone, kind, count) => gauge.set(`${zone}/${kind}`, count),
      },
      logger: silentLogger,
    });
    const c = new AbortController();
    controllers.push(c);
    offline.start(c.signal);
    const step = async (ms: number): Promise<void> => {
      clock.advance(ms);
      await offline.settled();
    };
    await step(0);
    const marked = async (zone: string): Promise<string[]> =>
      [
        ...(await store.list("Dataplane", { labels: { [LABELS.zone]: zone } })).resources,
        ...(await store.list("ZoneIngress", { labels: { [LABELS.zone]: zone } })).resources,
      ]
        .filter((r) => r.meta.labels[LABELS.originLastOnline] !== undefined)
        .map((r) => `${r.meta.name}@${r.meta.labels[LABELS.originLastOnline]}`)
        .sort();
    return { store, presence, clock, gauge, offline, step, marked, wall, signal: c.signal };
  }

  it("marks a zone offline past its stale time, clears the marks when it connects, and deletes past the expiry", async () => {
    const { store, presence, clock, gauge, offline, step, marked, wall, signal } = await setup();
    presence.set("a", { online: false, lastOnline: undefined });
    offline.poke();
    await step(0);
    const wentOffline = clock.now();
    await step(59_999);
    expect(await marked("a")).toEqual([]);
    expect(offline.stale("a")).toBeUndefined();
    await step(1);
    const since = new Date(wall + wentOffline).toISOString();
    expect(await marked("a")).toEqual(
      ["a.dp-0", "a.dp-1", "a.dp-2", "a.in-0", "a.in-1", "a.in-2"].map((n) => `${n}@${since}`),
    );
    expect(await marked("b")).toEqual([]);
    expect(offline.stale("a")).toEqual({ since: new Date(since), resources: 6 });
    expect(gauge.get("a/Dataplane")).toBe(3);
    expect(gauge.get("a/ZoneIngress")).toBe(3);

    // Back online: the marks go, the gauge drops, nothing else of the resources changes.
    const before = (await store.list("Dataplane", { labels: { [LABELS.zone]: "a" } })).resources;
    presence.set("a", { online: true, lastOnline: undefined });
    await offline.connected("a", signal);
    expect(await marked("a")).toEqual([]);
    expect(offline.stale("a")).toBeUndefined();
    expect(gauge.get("a/Dataplane")).toBe(0);
    const after = (await store.list("Dataplane", { labels: { [LABELS.zone]: "a" } })).resources;
    expect(after.map((r) => r.meta.labels[LABELS.originVersion])).toEqual(
      before.map((r) => r.meta.labels[LABELS.originVersion]),
    );

    // Offline again, past the expiry this time: deleted.
    presence.set("a", { online: false, lastOnline: undefined });
    offline.poke();
    await step(0);
    await step(599_999);
    expect(
      (await store.list("Dataplane", { labels: { [LABELS.zone]: "a" } })).resources,
    ).toHaveLength(3);
    await step(1);
    expect(
      (await store.list("Dataplane", { labels: { [LABELS.zone]: "a" } })).resources,
    ).toHaveLength(0);
    expect(
      (await store.list("ZoneIngress", { labels: { [LABELS.zone]: "a" } })).resources,
    ).toHaveLength(0);
    expect(
      (await store.list("ZoneIngress", { labels: { [LABELS.zone]: "b" } })).resources,
    ).toHaveLength(3);
  });

  it("takes the time a zone went offline from its lease", async () => {
    const { presence, clock, step, marked, wall } = await setup();
    // Offline for 50 s already when this instance next looks (its periodic check, 10 s on): stale 10 s after that.
    presence.set("b", { online: false, lastOnline: wall + clock.now() + 10_000 - 50_000 });
    await step(10_000);
    await step(9_999);
    expect(await marked("b")).toEqual([]);
    await step(1);
    expect(await marked("b")).toHaveLength(6);
  });

  it("refuses a duration that is not positive, naming the option", () => {
    expect(
      () =>
        new OfflineZones({
          store: new InMemoryStore(createTypeRegistry(exampleTypes)),
          types: createTypeRegistry(exampleTypes),
          staleAfterMs: 0,
          expireAfterMs: undefined,
          presence: () => Promise.resolve(new Map()),
          logger: silentLogger,
        }),
    ).toThrow(/zoneStaleAfterMs must be a positive number/);
  });
});

describe("whenStale", () => {
  const types = createTypeRegistry(
    exampleTypes.map((t) =>
      t.kind === "ZoneIngress" ? { ...t, whenStale: "withhold" as const } : t,
    ),
  );
  const resource = (kind: string, stale: boolean) =>
    ({
      kind,
      meta: {
        name: "a.x",
        mesh: "",
        labels: {
          [LABELS.zone]: "a",
          ...(stale ? { [LABELS.originLastOnline]: "2026-12-01T10:00:00.000Z" } : {}),
        },
        version: "1",
        creationTime: new Date(),
        modificationTime: new Date(),
      },
      spec: create(ZoneIngressSpecSchema),
    }) as const;

  it("withholds a stale resource of a withhold kind from the other zones, and serves the rest", () => {
    const filter = crossZoneFilter(
      "b",
      () => false,
      (kind) => types.find(kind)?.whenStale === "withhold",
    );
    expect(filter(resource("ZoneIngress", false))).toBe(true);
    expect(filter(resource("ZoneIngress", true))).toBe(false);
    expect(filter(resource("ServedKind", true))).toBe(true);
  });

  it("is only for zone-to-zones kinds, and only serve or withhold", () => {
    const attempt = (init: Record<string, unknown>): unknown => {
      try {
        createTypeRegistry(exampleTypes.map((t) => (t.kind === init.kind ? { ...t, ...init } : t)));
      } catch (error) {
        return error;
      }
      return undefined;
    };
    const onDataplane = attempt({ kind: "Dataplane", whenStale: "withhold" });
    expect(KdsError.is(onDataplane, "invalid_argument")).toBe(true);
    expect((onDataplane as Error).message).toMatch(/only zone-to-zones kinds/);
    expect((attempt({ kind: "ZoneIngress", whenStale: "drop" }) as Error).message).toMatch(
      /must be one of serve, withhold/,
    );
    expect(types.get("ZoneIngress").whenStale).toBe("withhold");
    expect(types.get("Dataplane").whenStale).toBe("serve");
  });
});
