// A store that fails must never make sync lose or delete data. Each case is
// one of the data-loss scenarios found with a failing store wrapper; each
// must end converged, with nothing deleted that its origin did not delete.
import { create } from "@bufbuild/protobuf";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { MeshSpecSchema, exampleTypes } from "../../examples/example-kinds/index.ts";
import type { Logger } from "../../src/log.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { LABELS } from "../../src/kinds/resource-types.ts";
import { eventually } from "../contract/harness.ts";
import { FaultyStore, countDeletes } from "../support/faulty-store.ts";
import { dataplane, mesh, policy, startCluster, type Cluster } from "./helpers.ts";

const fast = {
  discovery: { nackBackoffMs: 10, nackBackoffCapMs: 50 },
  storeRetry: { baseMs: 5, capMs: 40 },
} as const;

/** A logger that keeps warnings and errors, to assert failures were reported. */
function recordingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const keep = (message: string): void => void lines.push(message);
  return { lines, debug: () => undefined, info: () => undefined, warn: keep, error: keep };
}

const stop = new AbortController();
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

async function cluster(options: Parameters<typeof startCluster>[1] = {}): Promise<Cluster> {
  const c = await startCluster("memory", { ...fast, ...options });
  cleanups.push(() => c.close());
  return c;
}

const names = (n: number, prefix: string): string[] =>
  Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

describe.each(["delta", "sotw"] as const)("a failed list never becomes deletions (%s)", (mode) => {
  it("the global's first list(Mesh) fails once: the zone's mirror keeps every Mesh", async () => {
    const types = createTypeRegistry(exampleTypes);
    const globalStore = new InMemoryStore(types);
    const first = await cluster({ store: globalStore, mode });
    await first.global.registerZone("zone-a");
    for (const n of names(5, "m")) await globalStore.put(mesh(n));
    const zone = first.startZone("zone-a", { ...fast, mode });
    await eventually(
      async () => (await zone.store.list("Mesh")).resources.length === 5,
      "5 meshes mirrored",
    );
    const zoneDeletes = countDeletes(zone.store, stop.signal);
    await first.stopZone("zone-a");
    // A new global over the same data, whose first list(Mesh) fails.
    const faulty = new FaultyStore(globalStore).failNext("list", 1, "Mesh");
    const logger = recordingLogger();
    const second = await cluster({ store: faulty, logger, mode });
    second.startZone("zone-a", { ...fast, mode, store: zone.store });
    await eventually(() => (faulty.failures.get("list") ?? 0) === 1, "the list failed");
    await eventually(
      () => second.global.sync.served().find((k) => k.kind === "Mesh")?.loaded === true,
      "Mesh loaded after the retry",
    );
    await globalStore.put(mesh("m-new"));
    await eventually(
      async () => (await zone.store.list("Mesh")).resources.length === 6,
      "6 meshes mirrored",
    );
    expect([...zoneDeletes.keys()]).toEqual([]);
    expect(logger.lines.some((l) => l.includes("in the store failed"))).toBe(true);
  });

  it("the zone's list(Dataplane) fails once: the global keeps every Dataplane of that zone", async () => {
    const c = await cluster({ mode });
    await c.global.registerZone("zone-a");
    const types = createTypeRegistry(exampleTypes);
    const zoneStore = new InMemoryStore(types);
    for (const n of names(5, "dp")) await zoneStore.put(dataplane("default", n));
    c.startZone("zone-a", { ...fast, mode, store: zoneStore });
    const copies = async (): Promise<number> =>
      (await c.global.store.list("Dataplane", { labels: { [LABELS.zone]: "zone-a" } })).resources
        .length;
    await eventually(async () => (await copies()) === 5, "5 dataplanes on the global");
    const globalDeletes = countDeletes(c.global.store, stop.signal);
    await c.stopZone("zone-a");
    c.zones.delete("zone-a");
    const faulty = new FaultyStore(zoneStore).failNext("list", 1, "Dataplane");
    const zone = c.startZone("zone-a", { ...fast, mode, store: faulty });
    await eventually(() => (faulty.failures.get("list") ?? 0) === 1, "the list failed");
    await eventually(
      () => zone.sync.served().find((k) => k.kind === "Dataplane")?.loaded === true,
      "Dataplane loaded after the retry",
    );
    await zoneStore.put(dataplane("default", "dp-new"));
    await eventually(async () => (await copies()) === 6, "the new dataplane arrives");
    expect([...globalDeletes.keys()]).toEqual([]);
  });
});

describe("sync over a failing store", () => {
  it("the store's change feed breaks mid-stream: the change still reaches the zone", async () => {
    const types = createTypeRegistry(exampleTypes);
    const faulty = new FaultyStore(new InMemoryStore(types));
    const c = await cluster({ store: faulty });
    await c.global.registerZone("zone-a");
    const zone = c.startZone("zone-a", fast);
    await faulty.put(mesh("m-0"));
    await eventually(
      async () => (await zone.store.get("Mesh", "", "m-0")) !== undefined,
      "first mesh mirrored",
    );
    faulty.breakWatchAfter(0);
    await faulty.put(mesh("m-1"));
    await faulty.put(mesh("m-0", "changed"));
    await eventually(() => (faulty.failures.get("watch") ?? 0) >= 1, "the watch broke");
    await eventually(
      async () => (await zone.store.get("Mesh", "", "m-1")) !== undefined,
      "m-1 mirrored after the break",
    );
    await eventually(
      async () =>
        ((await zone.store.get("Mesh", "", "m-0"))?.spec as { description?: string } | undefined)
          ?.description === "changed",
      "m-0 update mirrored",
    );
  });

  it("a change feed that can no longer resume (compacted) makes the cache list again", async () => {
    const types = createTypeRegistry(exampleTypes);
    const store = new InMemoryStore(types, { historyLimit: 2 });
    const faulty = new FaultyStore(store);
    const logger = recordingLogger();
    const c = await cluster({ store: faulty, logger });
    await c.global.registerZone("zone-a");
    const zone = c.startZone("zone-a", fast);
    await store.put(mesh("m-0"));
    await eventually(
      async () => (await zone.store.list("Mesh")).resources.length === 1,
      "first mesh",
    );
    // Break the feed, then write far more than the history keeps before it resumes.
    faulty.failNext("watch", 3);
    faulty.breakWatchAfter(0);
    for (const n of names(20, "m")) await store.put(mesh(n, "again"));
    await store.delete("Mesh", "", "m-3");
    await eventually(
      async () => (await zone.store.list("Mesh")).resources.length === 19,
      "19 meshes after relisting",
    );
    expect(logger.lines.some((l) => l.includes("in the store failed"))).toBe(true);
    expect(faulty.callsByKind.get("list:Mesh")).toBe(2); // listed again after the compaction, once
  });

  it("a user onSession callback that throws stops nothing: sync runs both ways", async () => {
    let thrown = 0;
    const c = await cluster({
      onSession: () => {
        thrown++;
        throw new Error("user callback failed");
      },
    });
    await c.global.registerZone("zone-a");
    await c.global.store.put(mesh("m-0"));
    const zone = c.startZone("zone-a", {
      ...fast,
      onSession: () => {
        throw new Error("zone user callback failed");
      },
    });
    await zone.store.put(dataplane("default", "web"));
    await eventually(
      async () => (await zone.store.get("Mesh", "", "m-0")) !== undefined,
      "mesh down",
    );
    await eventually(
      async () => (await c.global.store.get("Dataplane", "default", "zone-a.web")) !== undefined,
      "dataplane up",
    );
    expect(thrown).toBe(1);
    expect(c.global.sync.status("zone-a").online).toBe(true);
    expect(zone.status().online).toBe(true);
  });

  it("one failed write: nothing of the response is written, then it is resent and all 10 land", async () => {
    const c = await cluster();
    await c.global.registerZone("zone-a");
    const types = createTypeRegistry(exampleTypes);
    const zoneStore = new FaultyStore(new InMemoryStore(types)).failNext(
      "apply",
      1,
      "TrafficPolicy",
    );
    const zone = c.startZone("zone-a", { ...fast, store: zoneStore });
    await eventually(() => zone.status().online, "zone online");
    await c.global.store.apply(
      names(10, "p").map((n) => ({ op: "put" as const, input: policy("default", n) })),
    );
    await eventually(() => (zoneStore.failures.get("apply") ?? 0) === 1, "the write failed");
    // The failed response was NACKed and wrote nothing; the resend wrote all ten at once.
    await eventually(
      async () => (await zone.store.list("TrafficPolicy")).resources.length === 10,
      "10 policies",
    );
    const status = c.global.sync.status("zone-a").types.find((t) => t.kind === "TrafficPolicy");
    expect(status?.nacked).toBe(1);
    expect(status?.lastNackError).toContain("injected apply failure");
    expect(zone.status().types.find((t) => t.kind === "TrafficPolicy")?.rejected).toBe(1);
  });

  it("2% of writes failing: 500 resources converge", async () => {
    const c = await cluster();
    await c.global.registerZone("zone-a");
    const types = createTypeRegistry(exampleTypes);
    let seed = 7;
    const random = (): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const inner = new InMemoryStore(types);
    const zoneStore = new FaultyStore(inner, random).failRate("apply", 0.02);
    c.startZone("zone-a", {
      ...fast,
      store: zoneStore,
      discovery: { ...fast.discovery, maxMessageBytes: 8 * 1024 },
    });
    for (const batch of [0, 1, 2, 3, 4]) {
      await c.global.store.apply(
        names(100, `p${batch}`).map((n) => ({ op: "put" as const, input: policy("default", n) })),
      );
    }
    await eventually(
      async () => (await inner.list("TrafficPolicy")).resources.length === 500,
      "500 policies",
      30_000,
    );
    expect(zoneStore.calls.get("apply") ?? 0).toBeLessThan(500); // whole responses, not one write per resource
  });

  it("a zone resource whose global name would be too long is left out alone, with a clear reason", async () => {
    const logger = recordingLogger();
    const c = await cluster({ logger });
    await c.global.registerZone("zone-a");
    const zone = c.startZone("zone-a", fast);
    const long = "x".repeat(250); // "zone-a." + 250 > 253
    await zone.store.put(dataplane("default", long));
    for (const n of names(3, "ok")) await zone.store.put(dataplane("default", n));
    await eventually(
      async () => (await c.global.store.list("Dataplane")).resources.length === 3,
      "the 3 valid dataplanes",
    );
    await zone.store.put(dataplane("default", "later"));
    await eventually(
      async () => (await c.global.store.get("Dataplane", "default", "zone-a.later")) !== undefined,
      "a later dataplane is not blocked",
    );
    const status = c.global.sync.status("zone-a").types.find((t) => t.kind === "Dataplane");
    expect(status?.rejected).toBe(0); // no NACK loop
    expect(status?.rejectedResources.map((r) => r.key)).toEqual([`default/${long}`]);
    expect(status?.rejectedResources[0]?.reason).toContain("a name is 1 to 253");
    expect(logger.lines.some((l) => l.includes("was left out") && l.includes(long))).toBe(true);
  });

  it("responses fit the max message size the zone announced (64 KiB), not the global's", async () => {
    const c = await cluster();
    await c.global.registerZone("zone-a");
    const description = "d".repeat(1000);
    await c.global.store.apply(
      names(200, "m").map((n) => ({
        op: "put" as const,
        input: { kind: "Mesh", name: n, spec: create(MeshSpecSchema, { description }) },
      })),
    );
    let sessions = 0;
    const zone = c.startZone("zone-a", {
      ...fast,
      session: { maxMessageBytes: 64 * 1024 },
      onSession: () => void sessions++,
    });
    await eventually(
      async () => (await zone.store.list("Mesh")).resources.length === 200,
      "200 meshes",
    );
    expect(sessions).toBe(1);
    expect(
      c.global.sync.status("zone-a").types.find((t) => t.kind === "Mesh")?.sent,
    ).toBeGreaterThan(2);
  });

  it("a slow store still converges", async () => {
    const types = createTypeRegistry(exampleTypes);
    const faulty = new FaultyStore(new InMemoryStore(types));
    faulty.delayMs = 15;
    const c = await cluster({ store: faulty });
    await c.global.registerZone("zone-a");
    const zone = c.startZone("zone-a", fast);
    for (const n of names(5, "m")) await faulty.put(mesh(n));
    await zone.store.put(dataplane("default", "web"));
    await eventually(
      async () => (await zone.store.list("Mesh")).resources.length === 5,
      "meshes over a slow store",
    );
    await eventually(
      async () => (await faulty.inner.get("Dataplane", "default", "zone-a.web")) !== undefined,
      "dataplane into a slow store",
    );
  });
});

afterAll(() => stop.abort());
