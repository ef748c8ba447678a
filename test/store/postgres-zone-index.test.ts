// A zone's resources of one kind (what a global lists of each zone when its
// session starts) are read through the zone label's own index (migration 2),
// on a table filled since its last ANALYZE. Without it the planner scanned
// the whole kind and filtered the labels: 38 ms a list instead of 0.1 ms in a
// 10,000-zone restart storm (docs/stores.md).
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dataplane, postgresServerVariant, type StoreSpace } from "./fixtures.ts";

const variant = postgresServerVariant;
let space: StoreSpace | undefined;
beforeAll(() => variant.setup());
afterAll(async () => {
  await space?.close();
  await variant.teardown();
});

describe("PostgreSQL store: a zone's resources", () => {
  it("are listed through the zone label's index, without statistics on the table", async () => {
    space = await variant.fresh();
    const { store } = space;
    const where = space.postgres;
    if (where === undefined) throw new Error("a PostgreSQL space");
    // 2 Dataplanes for each of 500 zones, and 20 without a zone: no ANALYZE ran since.
    for (let first = 0; first < 500; first += 100) {
      await store.apply(
        Array.from({ length: 200 }, (_, i) => {
          const zone = `zone-${first + (i >> 1)}`;
          return {
            op: "put" as const,
            input: dataplane("default", `dp-${i & 1}.${zone}`, {
              "kds.io/origin": "zone",
              "kds.io/zone": zone,
            }),
          };
        }),
      );
    }
    await store.apply(
      Array.from({ length: 20 }, (_, i) => ({
        op: "put" as const,
        input: dataplane("default", `local-${i}`, { "kds.io/origin": "global" }),
      })),
    );

    const { resources } = await store.list("Dataplane", {
      labels: { "kds.io/origin": "zone", "kds.io/zone": "zone-7" },
    });
    expect(resources.map((r) => r.meta.name)).toEqual(["dp-0.zone-7", "dp-1.zone-7"]);
    // The other labels of the filter still apply.
    expect(
      (
        await store.list("Dataplane", {
          labels: { "kds.io/origin": "global", "kds.io/zone": "zone-7" },
        })
      ).resources,
    ).toEqual([]);

    // Closing the store ends its connections, which flushes their statistics; then the index's scans show.
    await space.close();
    space = undefined;
    const sql = postgres(where.url, { max: 1, onnotice: () => undefined });
    try {
      // Each list read its zone's entries of the index (2, then 2 filtered out), not the kind's 1,020: the index
      // answered both the kind and the zone. (Without the zone condition the planner reads the kind through this
      // index or the primary key, and these figures are 1,020-odd or 0.)
      let read = 0;
      for (let attempt = 0; attempt < 50 && read === 0; attempt++) {
        const [row] = await sql<{ read: string }[]>`
          SELECT idx_tup_read::text AS read FROM pg_stat_user_indexes
          WHERE schemaname = ${where.schema} AND indexrelname = 'kds_resources_zone'`;
        read = Number(row?.read ?? 0);
        if (read === 0) await new Promise((r) => setTimeout(r, 200));
      }
      expect(read).toBeGreaterThanOrEqual(2);
      expect(read).toBeLessThanOrEqual(10);
    } finally {
      await sql.end();
    }
  });
});
