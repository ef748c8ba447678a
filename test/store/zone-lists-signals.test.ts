// ZoneLists (src/store/postgres/zone-lists.ts) and signals: lists sharing one long-lived signal (a
// global's stop signal, a zone session's) must not put a listener each on it.
import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import type { StoredResource } from "../../src/kinds/resource-types.ts";
import {
  ZoneLists,
  type ZoneListReader,
  type ZonesRead,
} from "../../src/store/postgres/zone-lists.ts";

interface Row {
  readonly zone: string;
}

describe("ZoneLists under one shared signal", () => {
  it("puts one abort listener on a signal whatever the lists waiting under it, and still rejects each on abort", async () => {
    const answers: Array<(read: ZonesRead<Row>) => void> = [];
    const cancels: AbortSignal[] = [];
    const reader: ZoneListReader<Row> = {
      read: (_zones, signal) => {
        cancels.push(signal);
        return new Promise((answer) => answers.push(answer));
      },
      decode: (row) => ({ meta: { name: row.zone } }) as unknown as StoredResource,
    };
    const lists = new ZoneLists<Row>();
    const stop = new AbortController();
    const all = Array.from({ length: 50 }, (_, i) => lists.list("k", `z${i}`, stop.signal, reader));
    expect(getEventListeners(stop.signal, "abort").length).toBeLessThanOrEqual(1);
    stop.abort();
    const outcomes = await Promise.allSettled(all);
    expect(outcomes.every((o) => o.status === "rejected")).toBe(true);
    expect(cancels[0]?.aborted).toBe(true); // every list of the statement aborted: cancelled
    answers[0]?.({ revision: 1, rows: new Map() });
  });

  it("leaves no listener behind on a long-lived signal once its lists are done", async () => {
    const reader: ZoneListReader<Row> = {
      read: (zones) =>
        Promise.resolve({ revision: 1, rows: new Map(zones.map((z) => [z, [{ zone: z }]])) }),
      decode: (row) => ({ meta: { name: row.zone } }) as unknown as StoredResource,
    };
    const lists = new ZoneLists<Row>();
    const session = new AbortController();
    for (let round = 0; round < 3; round++)
      await Promise.all(
        Array.from({ length: 20 }, (_, i) => lists.list("k", `z${i}`, session.signal, reader)),
      );
    expect(getEventListeners(session.signal, "abort").length).toBeLessThanOrEqual(1);
  });
});

describe("ZoneLists with a signal that cannot take a listener", () => {
  it("rejects that list and leaves the group able to run the next", async () => {
    const reader: ZoneListReader<Row> = {
      read: (zones) =>
        Promise.resolve({ revision: 1, rows: new Map(zones.map((z) => [z, [{ zone: z }]])) }),
      decode: (row) => ({ meta: { name: row.zone } }) as unknown as StoredResource,
    };
    const lists = new ZoneLists<Row>();
    const broken = {
      aborted: false,
      addEventListener: () => {
        throw new TypeError("not an AbortSignal");
      },
    } as unknown as AbortSignal;
    await expect((async () => lists.list("k", "z1", broken, reader))()).rejects.toBeInstanceOf(
      TypeError,
    );
    const next = lists.list("k", "z2", undefined, reader);
    const timeout = new Promise((r) => setTimeout(() => r("hung"), 500));
    expect(await Promise.race([next.then((r) => r.resources.length), timeout])).toBe(1);
  });
});

describe("ZoneLists after an abort", () => {
  it("does not decode the rows of a list aborted while its statement ran", async () => {
    const answers: Array<(read: ZonesRead<Row>) => void> = [];
    const cancels: AbortSignal[] = [];
    const decoded: string[] = [];
    const reader: ZoneListReader<Row> = {
      read: (_zones, signal) => {
        cancels.push(signal);
        return new Promise((answer) => answers.push(answer));
      },
      decode: (row) => {
        decoded.push(row.zone);
        return { meta: { name: row.zone } } as unknown as StoredResource;
      },
    };
    const lists = new ZoneLists<Row>();
    const first = lists.list("k", "z0", undefined, reader);
    const kept = lists.list("k", "z1", undefined, reader);
    const gone = new AbortController();
    const dropped = lists.list("k", "z3", gone.signal, reader);
    answers[0]?.({ revision: 1, rows: new Map([["z0", [{ zone: "z0" }]]]) });
    await first;
    await new Promise((r) => setTimeout(r, 0));
    expect(answers.length).toBe(2); // z1 and z3 in one statement
    gone.abort();
    await expect(dropped).rejects.toMatchObject({ code: "aborted" });
    expect(cancels[1]?.aborted).toBe(false);
    answers[1]?.({
      revision: 2,
      rows: new Map([
        ["z1", [{ zone: "z1" }]],
        ["z3", [{ zone: "z3" }]],
      ]),
    });
    expect((await kept).resources.length).toBe(1);
    expect(decoded).toEqual(["z0", "z1"]);
  });
});
