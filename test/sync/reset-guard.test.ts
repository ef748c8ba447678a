// The reset guard: its state machine alone, then in process (a global and
// zones over the memory transport): a zone restarted on an empty store has
// its mass deletion held on the global (the copies stay, status and the
// gauge say so) until acceptReset, or until holdForMs passes on a stepped
// clock; a deletion below the threshold flows at once; and the same guard
// the other way, in a zone that the global would empty.
import { afterEach, describe, expect, it } from "vitest";
import { InMemoryStore } from "../../src/store/memory.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import {
  isReset,
  nextKindState,
  resolveResetGuard,
  type KindGuardState,
} from "../../src/sync/reset-guard.ts";
import { KdsError } from "../../src/errors.ts";
import { noopMetrics } from "../../src/metrics.ts";
import { ManualClock } from "../support/manual-clock.ts";
import { zoneAdminBackend } from "../../src/admin/role-backends.ts";
import { dataplane, mesh, startCluster, type Cluster } from "./helpers.ts";

const options = resolveResetGuard();

describe("the reset guard's state machine", () => {
  it("has documented defaults and refuses bad options", () => {
    expect(options).toEqual({ threshold: 0.5, minimum: 10, holdForMs: undefined });
    expect(() => resolveResetGuard({ threshold: 1 })).toThrow(/resetGuard.threshold/);
    expect(() => resolveResetGuard({ minimum: 0 })).toThrow(/resetGuard.minimum/);
    expect(() => resolveResetGuard({ holdForMs: 0 })).toThrow(/resetGuard.holdForMs/);
  });

  it("holds more than half and at least ten", () => {
    expect(isReset(10, 19, options)).toBe(true);
    expect(isReset(10, 20, options)).toBe(false); // exactly half
    expect(isReset(9, 9, options)).toBe(false); // fewer than ten
    expect(isReset(18_400, 18_400, options)).toBe(true);
  });

  it("lets the first response decide, keeps holding a split reset, and releases", () => {
    const armed: KindGuardState = { phase: "armed", total: undefined };
    const resumed = nextKindState(armed, { type: "resumed", total: 20 }, options);
    const response = (keys: string[], written: string[] = [], total?: number) =>
      ({ type: "response", keys, written, total }) as const;
    const ten = Array.from({ length: 12 }, (_, i) => `dp-${i}`);
    const held = nextKindState(resumed, response(ten), options);
    expect(held).toEqual({ phase: "holding", of: 20, keys: new Set(ten) });
    // The rest of the reset in a later response is held too; a resource sent again leaves the hold.
    const more = nextKindState(held, response(["dp-12"], ["dp-0"]), options);
    expect(more.phase === "holding" && [...more.keys].sort()).toEqual(
      [...ten.slice(1), "dp-12"].sort(),
    );
    expect(nextKindState(more, { type: "released" }, options)).toEqual({ phase: "open" });
    // Below the threshold the first response opens the kind: later deletions flow.
    const open = nextKindState(resumed, response(["dp-1"]), options);
    expect(open).toEqual({ phase: "open" });
    expect(nextKindState(open, response(ten), options)).toEqual({ phase: "open" });
    // SotW: the sink says how many it holds with the response.
    expect(nextKindState(armed, response(ten, [], 12), options).phase).toBe("holding");
  });
});

async function until(what: string, ok: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (let i = 0; !(await ok()); i++) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, Math.min(100, 5 * i)));
  }
}

describe("the reset guard in process", { timeout: 60_000 }, () => {
  let cluster: Cluster | undefined;
  afterEach(async () => {
    await cluster?.close();
    cluster = undefined;
  });

  const globalDataplanes = async (c: Cluster): Promise<number> =>
    (await c.global.store.list("Dataplane")).resources.length;

  /** Zone "a" publishes `n` dataplanes, they reach the global, the zone stops. */
  async function zoneWith(c: Cluster, n: number, store: InMemoryStore): Promise<void> {
    c.startZone("a", { store });
    await c.global.registerZone("a");
    for (let i = 0; i < n; i++) await store.put(dataplane("default", `dp-${i}`));
    await until(`${n} dataplanes on the global`, async () => (await globalDataplanes(c)) === n);
    await c.stopZone("a");
    c.zones.delete("a");
  }

  it("holds a zone's mass deletion after it comes back empty, until accepted", async () => {
    const gauge = new Map<string, number>();
    cluster = await startCluster("memory", {
      metrics: { ...noopMetrics, heldDeletions: (z, k, n) => gauge.set(`${z}/${k}`, n) },
    });
    const c = cluster;
    const types = createTypeRegistry(exampleTypes);
    await zoneWith(c, 20, new InMemoryStore(types));

    // Back on an empty store: the 20 deletions are held; the copies stay.
    const empty = new InMemoryStore(types);
    c.startZone("a", { store: empty });
    await until("a held reset", () => c.global.sync.status("a").heldReset !== undefined);
    const held = c.global.sync.status("a").heldReset;
    expect(held?.kinds).toEqual([{ kind: "Dataplane", held: 20, of: 20 }]);
    expect(held?.releaseAt).toBeUndefined();
    expect(gauge.get("a/Dataplane")).toBe(20);
    expect(await globalDataplanes(c)).toBe(20);
    expect((await c.global.zoneStatus("a"))?.heldReset?.kinds[0]?.held).toBe(20);

    // A resource the zone makes again leaves the hold; its new write flows.
    await empty.put(dataplane("default", "dp-3", "10.9.9.9"));
    await until("dp-3 rewritten", () => c.global.sync.status("a").heldReset?.kinds[0]?.held === 19);
    expect(await globalDataplanes(c)).toBe(20);

    expect(await c.global.acceptReset("a")).toBe(19);
    expect(await globalDataplanes(c)).toBe(1);
    expect(c.global.sync.status("a").heldReset).toBeUndefined();
    expect(gauge.get("a/Dataplane")).toBe(0);
    // Nothing held any more: accepting again says so.
    await expect(c.global.acceptReset("a")).rejects.toSatisfy((e) => KdsError.is(e, "not_found"));
    // Later deletions flow as usual.
    await empty.delete("Dataplane", "default", "dp-3");
    await until("dp-3 gone", async () => (await globalDataplanes(c)) === 0);
  });

  it("holds the same reset when the global subscribes in state-of-the-world form", async () => {
    cluster = await startCluster("memory", { mode: "sotw" });
    const c = cluster;
    const types = createTypeRegistry(exampleTypes);
    await zoneWith(c, 12, new InMemoryStore(types));
    const empty = new InMemoryStore(types);
    await empty.put(dataplane("default", "dp-0"));
    c.startZone("a", { store: empty });
    await until("a held reset", () => c.global.sync.status("a").heldReset !== undefined);
    expect(c.global.sync.status("a").heldReset?.kinds).toEqual([
      { kind: "Dataplane", held: 11, of: 12 },
    ]);
    expect(await globalDataplanes(c)).toBe(12);
    expect(await c.global.acceptReset("a")).toBe(11);
    expect(await globalDataplanes(c)).toBe(1);
  });

  it("lets deletions below the threshold flow, and applies a held reset once holdForMs passes", async () => {
    const clock = new ManualClock();
    cluster = await startCluster("memory", { resetGuard: { holdForMs: 60_000 }, clock });
    const c = cluster;
    const types = createTypeRegistry(exampleTypes);
    const store = new InMemoryStore(types);
    await zoneWith(c, 20, store);
    // 5 of 20 gone while away: fewer than 10, so they flow at once.
    for (let i = 0; i < 5; i++) await store.delete("Dataplane", "default", `dp-${i}`);
    c.startZone("a", { store });
    await until("15 dataplanes on the global", async () => (await globalDataplanes(c)) === 15);
    expect(c.global.sync.status("a").heldReset).toBeUndefined();
    await c.stopZone("a");
    c.zones.delete("a");

    c.startZone("a", { store: new InMemoryStore(types) });
    await until("a held reset", () => c.global.sync.status("a").heldReset !== undefined);
    expect(c.global.sync.status("a").heldReset?.releaseAt).toBeInstanceOf(Date);
    clock.advance(59_999);
    expect(await globalDataplanes(c)).toBe(15);
    clock.advance(1);
    await until("the held deletions applied", async () => (await globalDataplanes(c)) === 0);
    expect(c.global.sync.status("a").heldReset).toBeUndefined();
  });

  it("guards a zone the other way: the global's mass deletion is held in the zone until accepted", async () => {
    cluster = await startCluster("memory");
    const c = cluster;
    await c.global.registerZone("a");
    for (let i = 0; i < 12; i++) await c.global.store.put(mesh(`mesh-${i}`));
    const zone = c.startZone("a", { resetGuard: {} });
    const zoneMeshes = async (): Promise<number> =>
      (await zone.store.list("Mesh")).resources.length;
    await until("12 meshes in the zone", async () => (await zoneMeshes()) === 12);
    await c.stopZone("a");
    for (let i = 0; i < 12; i++) await c.global.store.delete("Mesh", "", `mesh-${i}`);
    c.startZone("a");
    await until("a held reset in the zone", () => zone.status().heldReset !== undefined);
    expect(zone.status().heldReset?.kinds).toEqual([{ kind: "Mesh", held: 12, of: 12 }]);
    expect(await zoneMeshes()).toBe(12);
    // Through the zone's admin API backend (kds-mux zone accept-reset NAME --server <the zone>): only its own name.
    const backend = zoneAdminBackend(zone);
    const signal = new AbortController().signal;
    expect(() => backend.acceptReset?.("zone-b", signal)).toThrow(
      /accepts only its own held reset/,
    );
    expect(await backend.acceptReset?.("a", signal)).toBe(12);
    expect(await zoneMeshes()).toBe(0);
    await expect(zone.acceptReset()).rejects.toSatisfy((e) => KdsError.is(e, "not_found"));
  });
});
