// Review of the grouped zone lists (src/store/postgres/zone-lists.ts) on PostgreSQL: zone names that
// need quoting in an array literal, the zone label empty or absent, and closing the store while lists
// wait behind a statement that cannot finish.
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ListResult } from "../../src/store/contract.ts";
import { dataplane, postgresServerVariant, type StoreSpace } from "./fixtures.ts";

const variant = postgresServerVariant;
const spaces: StoreSpace[] = [];
beforeAll(() => variant.setup());
afterAll(async () => {
  for (const s of spaces) await s.close();
  await variant.teardown();
});

const shape = (r: ListResult): string[] =>
  r.resources.map((x) => `${x.meta.mesh}/${x.meta.name}:${x.meta.labels["kds.io/zone"] ?? "-"}`);

describe("PostgreSQL store: grouped zone lists, review", () => {
  it("give zones that need quoting, and the empty zone, what they read alone", async () => {
    const space = await variant.fresh();
    spaces.push(space);
    const { store } = space;
    const zones = ['a"b', "a,b", "{x}", "NULL", "a\\b", "", " z ", "ζώνη", "a'b", "null", "{}"];
    await store.apply([
      ...zones.map((zone, i) => ({
        op: "put" as const,
        input: dataplane("m", `dp-${i}`, { "kds.io/zone": zone, "kds.io/origin": "zone" }),
      })),
      { op: "put" as const, input: dataplane("m", "no-zone", { "kds.io/origin": "zone" }) },
      {
        op: "put" as const,
        input: dataplane("m", "other-origin", { "kds.io/zone": "", "kds.io/origin": "global" }),
      },
    ]);
    const filters = (zone: string) =>
      [
        { labels: { "kds.io/zone": zone } },
        { labels: { "kds.io/origin": "zone", "kds.io/zone": zone } },
        { labels: { "kds.io/zone": zone, "kds.io/origin": "zone" } },
      ] as const;
    const alone: string[][] = [];
    for (const z of zones)
      for (const f of filters(z)) alone.push(shape(await store.list("Dataplane", f)));
    // Each zone's own row, and the empty zone's list does not take the resource without the label.
    expect(alone[0]).toEqual(['m/dp-0:a"b']);
    expect(alone[5 * 3]).toEqual(["m/dp-5:", "m/other-origin:"]);
    expect(alone[5 * 3 + 1]).toEqual(["m/dp-5:"]);
    // Together: a first list goes alone, the rest wait and go in one statement.
    const together = await Promise.all(
      [zones[0] as string, ...zones, ...zones].flatMap((z) =>
        filters(z).map((f) => store.list("Dataplane", f)),
      ),
    );
    expect(together.map(shape)).toEqual([...alone.slice(0, 3), ...alone, ...alone]);
  });

  it("rejects lists waiting behind a statement when the store closes, without hanging", async () => {
    const space = await variant.fresh();
    spaces.push(space);
    const { store } = space;
    await store.put(dataplane("m", "dp", { "kds.io/zone": "z1" }));
    const pg = space.postgres as { url: string; schema: string };
    const locker = postgres(pg.url, { max: 1, onnotice: () => undefined });
    try {
      const locked = locker.begin(async (tx) => {
        await tx.unsafe(`LOCK TABLE "${pg.schema}".kds_resources IN ACCESS EXCLUSIVE MODE`);
        await new Promise((r) => setTimeout(r, 6_000));
      });
      await new Promise((r) => setTimeout(r, 200));
      const lists = ["z1", "z2", "z3", "z1"].map((z) =>
        store.list("Dataplane", { labels: { "kds.io/zone": z } }).then(
          () => "resolved",
          (e: { code?: string; message?: string }) => `${e.code}: ${e.message}`,
        ),
      );
      await new Promise((r) => setTimeout(r, 200));
      const started = Date.now();
      await store.close?.();
      const outcomes = await Promise.all(lists);
      expect(Date.now() - started).toBeLessThan(7_000);
      for (const o of outcomes) expect(o).toMatch(/^store_unavailable: /);
      // The waiting ones say the store was closed.
      expect(outcomes.slice(1).every((o) => o.includes("was closed"))).toBe(true);
      await locked; // the lock's own transaction commits after its 6 s
    } finally {
      await locker.end({ timeout: 1 });
    }
  }, 20_000);
});

describe("PostgreSQL store: a grouped list's filter is the one of its call", () => {
  it("does not read another mesh when the first caller's options object changes after its call", async () => {
    const space = await variant.fresh();
    spaces.push(space);
    const { store } = space;
    await store.apply(
      ["a", "b"].flatMap((m) =>
        ["z1", "z2"].map((z) => ({
          op: "put" as const,
          input: dataplane(m, `dp.${z}`, { "kds.io/zone": z }),
        })),
      ),
    );
    const options: { mesh: string; labels: Record<string, string> } = {
      mesh: "a",
      labels: { "kds.io/zone": "z1" },
    };
    const first = store.list("Dataplane", options);
    options.mesh = "b"; // the caller reuses its options object: its own call is made
    const second = store.list("Dataplane", { mesh: "a", labels: { "kds.io/zone": "z2" } });
    expect(shape(await first)).toEqual(["a/dp.z1:z1"]);
    expect(shape(await second)).toEqual(["a/dp.z2:z2"]);
  });
});

describe("PostgreSQL store: a zone value the server refuses", () => {
  it("fails its own list only, not the lists read in the same statement", async () => {
    const space = await variant.fresh();
    spaces.push(space);
    const { store } = space;
    await store.put(dataplane("m", "dp", { "kds.io/zone": "z1" }));
    const alone = await store
      .list("Dataplane", { labels: { "kds.io/zone": "bad\u0000zone" } })
      .then(
        () => "resolved",
        (e: { code?: string }) => e.code,
      );
    const outcome = (p: Promise<ListResult>) =>
      p.then(
        (r) => shape(r).join(","),
        (e: { code?: string }) => `error ${e.code}`,
      );
    const first = outcome(store.list("Dataplane", { labels: { "kds.io/zone": "z0" } }));
    const good = outcome(store.list("Dataplane", { labels: { "kds.io/zone": "z1" } }));
    const bad = outcome(store.list("Dataplane", { labels: { "kds.io/zone": "bad\u0000zone" } }));
    expect(await first).toBe("");
    expect(await good).toBe("m/dp:z1");
    expect(await bad).toBe(`error ${alone}`);
  });
});
