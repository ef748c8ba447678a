// Lists naming a zone, many at once, on PostgreSQL: they are read several zones to a statement
// (src/store/postgres/zone-lists.ts), and each must get exactly what it would get alone.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ListResult } from "../../src/store/contract.ts";
import { dataplane, postgresServerVariant, type StoreSpace } from "./fixtures.ts";

const variant = postgresServerVariant;
let space: StoreSpace | undefined;
beforeAll(() => variant.setup());
afterAll(async () => {
  await space?.close();
  await variant.teardown();
});

const ZONES = 300;
const shape = (r: ListResult): string[] =>
  r.resources.map(
    (x) => `${x.meta.mesh}/${x.meta.name}@${x.meta.version}:${x.meta.labels["kds.io/zone"]}`,
  );

describe("PostgreSQL store: lists of many zones at once", () => {
  it("give each list what it reads alone, at one revision, and fail only an aborted one", async () => {
    space = await variant.fresh();
    const { store } = space;
    // Zone i holds i % 3 Dataplanes in mesh "a" and one in mesh "b"; some carry another origin.
    for (let first = 0; first < ZONES; first += 100) {
      await store.apply(
        Array.from({ length: 100 }, (_, j) => first + j).flatMap((i) => {
          const zone = `zone-${i}`;
          const labels = { "kds.io/origin": i % 7 === 0 ? "global" : "zone", "kds.io/zone": zone };
          return [
            ...Array.from({ length: i % 3 }, (_, d) => ({
              op: "put" as const,
              input: dataplane("a", `dp-${d}.${zone}`, labels),
            })),
            { op: "put" as const, input: dataplane("b", `dp.${zone}`, labels) },
          ];
        }),
      );
    }
    const filters = (i: number) =>
      [
        { labels: { "kds.io/origin": "zone", "kds.io/zone": `zone-${i}` } },
        { labels: { "kds.io/zone": `zone-${i}` } },
        { mesh: "a", labels: { "kds.io/origin": "zone", "kds.io/zone": `zone-${i}` } },
      ] as const;
    const zones = Array.from({ length: ZONES + 5 }, (_, i) => i); // the last 5 hold nothing
    const alone: string[][] = [];
    for (const i of zones)
      for (const f of filters(i)) alone.push(shape(await store.list("Dataplane", f)));
    expect(alone.flat().length).toBeGreaterThan(ZONES * 2);

    const aborted = new AbortController();
    const together = zones.flatMap((i) => filters(i).map((f) => store.list("Dataplane", f)));
    const dropped = store.list("Dataplane", {
      labels: { "kds.io/zone": "zone-1" },
      signal: aborted.signal,
    });
    aborted.abort();
    await expect(dropped).rejects.toMatchObject({ code: "aborted" });
    const results = await Promise.all(together);
    expect(results.map(shape)).toEqual(alone);
    const revision = await store.revision();
    expect(results.every((r) => r.revision === revision)).toBe(true);
  });
});
