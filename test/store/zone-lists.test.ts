// Lists naming one zone, read several zones to a statement (src/store/postgres/zone-lists.ts):
// the grouping, each caller's share, aborts and failures, with a reader the test answers by hand.
import { describe, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import type { StoredResource } from "../../src/kinds/resource-types.ts";
import {
  ZONES_PER_STATEMENT,
  ZoneLists,
  type ZoneListReader,
  type ZonesRead,
} from "../../src/store/postgres/zone-lists.ts";

interface Row {
  readonly zone: string;
  readonly name: string;
}

/** A reader whose statements wait until the test answers them. */
function scripted(): {
  reader: ZoneListReader<Row>;
  statements: {
    zones: readonly string[];
    signal: AbortSignal;
    answer(read: ZonesRead<Row>): void;
    fail(e: unknown): void;
  }[];
} {
  const statements: ReturnType<typeof scripted>["statements"] = [];
  return {
    statements,
    reader: {
      read: (zones, signal) =>
        new Promise((answer, fail) => statements.push({ zones, signal, answer, fail })),
      decode: (row) => {
        if (row.name === "bad")
          throw new KdsError("invalid_resource", `row of ${row.zone} does not decode`);
        return { meta: { name: row.name }, spec: row.zone } as unknown as StoredResource;
      },
    },
  };
}

/** What a statement over `zones` reads: two rows per zone, at revision 7. */
function rowsOf(zones: readonly string[]): ZonesRead<Row> {
  return {
    revision: 7,
    rows: new Map(
      zones.map((z) => [
        z,
        [
          { zone: z, name: "a" },
          { zone: z, name: "b" },
        ],
      ]),
    ),
  };
}

const names = (r: { resources: StoredResource[] }): string[] =>
  r.resources.map((x) => `${String(x.spec)}/${x.meta.name}`);

/** Lets queued promise callbacks run. */
const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 0));

describe("ZoneLists", () => {
  it("sends the first list alone and those arriving meanwhile together, each getting its own zone's rows", async () => {
    const lists = new ZoneLists<Row>();
    const { reader, statements } = scripted();
    const first = lists.list("k", "z0", undefined, reader);
    const rest = Array.from({ length: 5 }, (_, i) =>
      lists.list("k", `z${i + 1}`, undefined, reader),
    );
    const twice = lists.list("k", "z3", undefined, reader); // the same zone twice: read once
    expect(statements.map((s) => s.zones)).toEqual([["z0"]]);
    statements[0]?.answer(rowsOf(["z0"]));
    await settle();
    expect(statements.map((s) => s.zones)).toEqual([["z0"], ["z1", "z2", "z3", "z4", "z5"]]);
    statements[1]?.answer(rowsOf(["z1", "z2", "z3", "z4", "z5"]));
    expect(names(await first)).toEqual(["z0/a", "z0/b"]);
    const got = await Promise.all(rest);
    expect(got.map(names)).toEqual([1, 2, 3, 4, 5].map((i) => [`z${i}/a`, `z${i}/b`]));
    expect(names(await twice)).toEqual(["z3/a", "z3/b"]);
    expect(got.every((r) => r.revision === 7)).toBe(true);
  });

  it("keeps groups apart and a zone without rows empty", async () => {
    const lists = new ZoneLists<Row>();
    const { reader, statements } = scripted();
    const a = lists.list("kind A", "z1", undefined, reader);
    const b = lists.list("kind B", "z1", undefined, reader);
    expect(statements.map((s) => s.zones)).toEqual([["z1"], ["z1"]]);
    statements[0]?.answer(rowsOf(["z1"]));
    statements[1]?.answer({ revision: 9, rows: new Map() });
    expect(names(await a)).toEqual(["z1/a", "z1/b"]);
    expect(await b).toEqual({ revision: 9, resources: [] });
  });

  it(`reads at most ${ZONES_PER_STATEMENT} zones a statement`, async () => {
    const lists = new ZoneLists<Row>();
    const { reader, statements } = scripted();
    const all = [lists.list("k", "first", undefined, reader)];
    for (let i = 0; i < ZONES_PER_STATEMENT + 3; i++)
      all.push(lists.list("k", `z${i}`, undefined, reader));
    statements[0]?.answer(rowsOf(["first"]));
    await settle();
    expect(statements[1]?.zones.length).toBe(ZONES_PER_STATEMENT);
    statements[1]?.answer(rowsOf(statements[1].zones));
    await settle();
    expect(statements[2]?.zones).toEqual([
      `z${ZONES_PER_STATEMENT}`,
      `z${ZONES_PER_STATEMENT + 1}`,
      `z${ZONES_PER_STATEMENT + 2}`,
    ]);
    statements[2]?.answer(rowsOf(statements[2].zones));
    expect((await Promise.all(all)).length).toBe(ZONES_PER_STATEMENT + 4);
  });

  it("rejects an aborted list at once and cancels a statement only when every list it reads for was aborted", async () => {
    const lists = new ZoneLists<Row>();
    const { reader, statements } = scripted();
    const lone = new AbortController();
    const first = lists.list("k", "z0", lone.signal, reader);
    const waiting = new AbortController();
    const kept = lists.list("k", "z1", undefined, reader);
    const dropped = lists.list("k", "z2", waiting.signal, reader);
    waiting.abort();
    await expect(dropped).rejects.toMatchObject({ code: "aborted" });
    lone.abort();
    await expect(first).rejects.toMatchObject({ code: "aborted" });
    expect(statements[0]?.signal.aborted).toBe(true); // its only list left: the statement is cancelled
    statements[0]?.fail(new Error("canceled"));
    await settle();
    expect(statements[1]?.zones).toEqual(["z1"]); // the aborted waiting list is not read
    const both = new AbortController();
    const shared = lists.list("k", "z3", both.signal, reader);
    statements[1]?.answer(rowsOf(["z1"]));
    expect(names(await kept)).toEqual(["z1/a", "z1/b"]);
    await settle();
    const other = lists.list("k", "z4", undefined, reader);
    expect(statements[2]?.zones).toEqual(["z3"]);
    both.abort();
    await expect(shared).rejects.toMatchObject({ code: "aborted" });
    expect(statements[2]?.signal.aborted).toBe(true);
    statements[2]?.fail(new Error("canceled"));
    await settle();
    statements[3]?.answer(rowsOf(["z4"]));
    expect(names(await other)).toEqual(["z4/a", "z4/b"]);
    await expect(lists.list("k", "z5", AbortSignal.abort(), reader)).rejects.toMatchObject({
      code: "aborted",
    });
  });

  it("does not cancel a statement while one of its lists still waits for it", async () => {
    const lists = new ZoneLists<Row>();
    const { reader, statements } = scripted();
    const first = lists.list("k", "z0", undefined, reader);
    statements[0]?.answer(rowsOf(["z0"]));
    const gone = new AbortController();
    const a = lists.list("k", "z1", gone.signal, reader);
    const b = lists.list("k", "z2", undefined, reader);
    expect(names(await first)).toEqual(["z0/a", "z0/b"]);
    await settle();
    expect(statements[1]?.zones).toEqual(["z1", "z2"]);
    gone.abort();
    await expect(a).rejects.toMatchObject({ code: "aborted" });
    expect(statements[1]?.signal.aborted).toBe(false);
    statements[1]?.answer(rowsOf(["z1", "z2"]));
    expect(names(await b)).toEqual(["z2/a", "z2/b"]);
  });

  it("fails every list of a failed statement, and only a zone's list when its rows do not decode", async () => {
    const lists = new ZoneLists<Row>();
    const { reader, statements } = scripted();
    const failed = lists.list("k", "z0", undefined, reader);
    const good = lists.list("k", "z1", undefined, reader);
    const bad = lists.list("k", "z2", undefined, reader);
    statements[0]?.fail(new KdsError("store_unavailable", "the database is down"));
    await expect(failed).rejects.toMatchObject({ code: "store_unavailable" });
    await settle();
    statements[1]?.answer({
      revision: 3,
      rows: new Map([
        ["z1", [{ zone: "z1", name: "a" }]],
        ["z2", [{ zone: "z2", name: "bad" }]],
      ]),
    });
    expect(names(await good)).toEqual(["z1/a"]);
    await expect(bad).rejects.toMatchObject({ code: "invalid_resource" });
    // The group is done: a later list starts a statement of its own at once.
    const later = lists.list("k", "z9", undefined, reader);
    expect(statements[2]?.zones).toEqual(["z9"]);
    statements[2]?.answer(rowsOf(["z9"]));
    expect(names(await later)).toEqual(["z9/a", "z9/b"]);
  });
});
