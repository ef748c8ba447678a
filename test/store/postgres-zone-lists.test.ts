// Lists of one zone's resources in the PostgreSQL store
// (src/store/postgres/zone-lists.ts): while ZONE_LISTS_IN_FLIGHT statements
// run, further lists wait and the next statement reads them all, by kind and
// other labels; each caller gets its own zone's rows. The coalescing is
// driven here through a reader under the test's control; the statement
// itself runs against PostgreSQL in the last test.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import {
  ZONE_LISTS_IN_FLIGHT,
  ZoneLists,
  type ZoneListQuery,
} from "../../src/store/postgres/zone-lists.ts";
import { deferred, type Deferred } from "../../src/util/deferred.ts";
import { dataplane, postgresServerVariant, type StoreSpace } from "./fixtures.ts";

interface Read {
  readonly query: ZoneListQuery;
  readonly zones: readonly string[];
  readonly signal: AbortSignal | undefined;
  readonly answer: Deferred<{ revision: number; byZone: ReadonlyMap<string, string[]> }>;
}

/** A ZoneLists whose reads wait until the test answers them. */
function held(): { lists: ZoneLists<string>; reads: Read[] } {
  const reads: Read[] = [];
  const lists = new ZoneLists<string>((query, zones, signal) => {
    const answer = deferred<{ revision: number; byZone: ReadonlyMap<string, string[]> }>();
    reads.push({ query, zones, signal, answer });
    return answer.promise;
  });
  return { lists, reads };
}

/** Answers `read` with one row per zone, named after it, at `revision`. */
function answer(read: Read, revision: number): void {
  read.answer.resolve({
    revision,
    byZone: new Map(read.zones.map((z) => [z, [`${read.query.kind}/${z}`]])),
  });
}

const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 0));
const dp: ZoneListQuery = { kind: "Dataplane", others: { "kds.io/origin": "zone" } };

describe("PostgreSQL store: a zone's lists", () => {
  it("goes at once and alone, with its signal, while a statement slot is free", async () => {
    const { lists, reads } = held();
    const signal = new AbortController().signal;
    const listed = lists.list(dp, "zone-1", signal);
    expect(reads).toHaveLength(1);
    expect(reads[0]?.zones).toEqual(["zone-1"]);
    expect(reads[0]?.signal).toBe(signal);
    answer(reads[0] as Read, 7);
    expect(await listed).toEqual({ revision: 7, resources: ["Dataplane/zone-1"] });
  });

  it("reads the lists that waited for a slot together, by kind and other labels, each caller its own zone", async () => {
    const { lists, reads } = held();
    const first = Array.from({ length: ZONE_LISTS_IN_FLIGHT }, (_, i) =>
      lists.list(dp, `zone-${i}`, undefined),
    );
    expect(reads).toHaveLength(ZONE_LISTS_IN_FLIGHT);
    // These wait: two kinds of query, one zone asked for twice.
    const waiting = [
      lists.list(dp, "zone-a", undefined),
      lists.list({ kind: "Dataplane", others: {} }, "zone-b", undefined),
      lists.list(dp, "zone-c", undefined),
      lists.list(dp, "zone-a", undefined),
    ];
    expect(reads).toHaveLength(ZONE_LISTS_IN_FLIGHT);
    answer(reads[0] as Read, 10);
    await settle();
    // The freed slot reads the oldest waiting list's query, every zone of it at once.
    const together = reads[ZONE_LISTS_IN_FLIGHT] as Read;
    expect(together.query).toEqual(dp);
    expect(together.zones).toEqual(["zone-a", "zone-c"]);
    expect(together.signal).toBeUndefined();
    answer(together, 11);
    await settle();
    const other = reads[ZONE_LISTS_IN_FLIGHT + 1] as Read;
    expect(other.zones).toEqual(["zone-b"]);
    answer(other, 12);
    for (const read of reads.slice(1, ZONE_LISTS_IN_FLIGHT)) answer(read, 10);
    expect(await Promise.all(waiting)).toEqual([
      { revision: 11, resources: ["Dataplane/zone-a"] },
      { revision: 12, resources: ["Dataplane/zone-b"] },
      { revision: 11, resources: ["Dataplane/zone-c"] },
      { revision: 11, resources: ["Dataplane/zone-a"] },
    ]);
    expect((await Promise.all(first)).map((r) => r.resources)).toEqual(
      Array.from({ length: ZONE_LISTS_IN_FLIGHT }, (_, i) => [`Dataplane/zone-${i}`]),
    );
    expect(reads).toHaveLength(ZONE_LISTS_IN_FLIGHT + 2);
  });

  it("rejects a waiting list at once when its signal aborts, and reads it not", async () => {
    const { lists, reads } = held();
    for (let i = 0; i < ZONE_LISTS_IN_FLIGHT; i++) void lists.list(dp, `zone-${i}`, undefined);
    const abort = new AbortController();
    const gone = lists.list(dp, "zone-gone", abort.signal);
    const kept = lists.list(dp, "zone-kept", undefined);
    abort.abort();
    await expect(gone).rejects.toMatchObject({ code: "aborted" });
    answer(reads[0] as Read, 3);
    await settle();
    const next = reads[ZONE_LISTS_IN_FLIGHT] as Read;
    expect(next.zones).toEqual(["zone-kept"]);
    answer(next, 4);
    expect(await kept).toEqual({ revision: 4, resources: ["Dataplane/zone-kept"] });
  });

  it("fails every list of a statement that fails, with its error", async () => {
    const { lists, reads } = held();
    for (let i = 0; i < ZONE_LISTS_IN_FLIGHT; i++) void lists.list(dp, `zone-${i}`, undefined);
    const waiting = [lists.list(dp, "zone-x", undefined), lists.list(dp, "zone-y", undefined)];
    answer(reads[0] as Read, 1);
    await settle();
    const failure = new KdsError("store_unavailable", "the database went away");
    (reads[ZONE_LISTS_IN_FLIGHT] as Read).answer.reject(failure);
    for (const p of waiting) await expect(p).rejects.toBe(failure);
  });
});

describe("PostgreSQL store: many zones listed at once", () => {
  const variant = postgresServerVariant;
  let space: StoreSpace | undefined;
  beforeAll(() => variant.setup());
  afterAll(async () => {
    await space?.close();
    await variant.teardown();
  });

  it("answers each concurrent list with its own zone's resources, the other labels applied", async () => {
    space = await variant.fresh();
    const { store } = space;
    const zones = Array.from({ length: 60 }, (_, i) => `zone-${i}`);
    await store.apply(
      zones.flatMap((zone, z) =>
        Array.from({ length: z % 3 }, (_, i) => ({
          op: "put" as const,
          input: dataplane("default", `dp-${i}.${zone}`, {
            "kds.io/origin": z % 5 === 0 ? "global" : "zone",
            "kds.io/zone": zone,
          }),
        })),
      ),
    );
    const alone = [];
    for (const zone of zones)
      alone.push(
        await store.list("Dataplane", { labels: { "kds.io/origin": "zone", "kds.io/zone": zone } }),
      );
    // All at once: most wait for a slot and go together.
    const together = await Promise.all(
      zones.map((zone) =>
        store.list("Dataplane", { labels: { "kds.io/origin": "zone", "kds.io/zone": zone } }),
      ),
    );
    expect(together.map((l) => l.resources.map((r) => r.meta.name))).toEqual(
      alone.map((l) => l.resources.map((r) => r.meta.name)),
    );
    expect(together.map((l) => l.revision)).toEqual(alone.map((l) => l.revision));
    expect(together[7]?.resources.map((r) => r.meta.name)).toEqual(["dp-0.zone-7"]);
    // zone-10 and zone-25: their resources are labelled origin "global", so none matches.
    expect(together[10]?.resources).toEqual([]);
    expect(together[25]?.resources).toEqual([]);
    expect(together[26]?.resources.map((r) => r.meta.name)).toEqual([
      "dp-0.zone-26",
      "dp-1.zone-26",
    ]);
  });
});
