// The lease contract (src/store/lease.ts), run against the memory store (on a
// manual clock) and a PostgreSQL server (on its own clock, with short terms):
// one holder at a time, a fencing revision that only goes up, and writes
// fenced by a term that is over are refused and write nothing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import { silentLogger } from "../../src/log.ts";
import type { ResourceStore } from "../../src/store/contract.ts";
import type { LeaseStore } from "../../src/store/lease.ts";
import { isLeaseStore } from "../../src/store/lease.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { PostgresStore } from "../../src/store/postgres.ts";
import { ManualClock } from "../support/manual-clock.ts";
import { freshDatabase, type TestDatabase } from "../support/postgres.ts";
import { mesh, types } from "./fixtures.ts";

type Both = ResourceStore & LeaseStore;

/** Where a lease case runs: two stores on the same data, and a way to let a term run out. */
interface LeaseSpace {
  readonly a: Both;
  readonly b: Both;
  /** The term used by the cases, in ms. */
  readonly durationMs: number;
  /** Lets more than `durationMs` pass on the store's clock. */
  expire(): Promise<void>;
}

interface LeaseVariant {
  readonly name: string;
  setup(): Promise<void>;
  fresh(): Promise<LeaseSpace>;
  teardown(): Promise<void>;
}

const memory: LeaseVariant = {
  name: "memory",
  setup: async () => undefined,
  fresh: async () => {
    const clock = new ManualClock();
    const store = new InMemoryStore(types, { clock });
    return {
      a: store,
      b: store,
      durationMs: 10_000,
      expire: async () => clock.advance(10_001),
    };
  },
  teardown: async () => undefined,
};

let database: TestDatabase | undefined;
const opened: PostgresStore[] = [];
let counter = 0;
const server: LeaseVariant = {
  name: "postgres",
  setup: async () => {
    database = await freshDatabase();
  },
  fresh: async () => {
    if (database === undefined) throw new Error("setup() first");
    const schema = `lease_${process.pid}_${++counter}`;
    const open = async (): Promise<PostgresStore> => {
      const store = await PostgresStore.open(types, {
        url: (database as TestDatabase).url,
        schema,
        maxConnections: 3,
        logger: silentLogger,
      });
      opened.push(store);
      return store;
    };
    const a = await open();
    const b = await open();
    const durationMs = 2_000;
    // The server's clock decides expiry: wait until the term is over by it (bounded).
    return { a, b, durationMs, expire: () => new Promise((r) => setTimeout(r, durationMs + 200)) };
  },
  teardown: async () => {
    await Promise.all(opened.map((s) => s.close()));
    await database?.drop();
  },
};

async function rejection(promise: Promise<unknown>): Promise<KdsError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(KdsError);
    return error as KdsError;
  }
  throw new Error("expected a rejection");
}

describe.each([memory, server])("lease contract: $name", (variant) => {
  beforeAll(() => variant.setup());
  afterAll(() => variant.teardown());

  it("is implemented by the store", async () => {
    const { a } = await variant.fresh();
    expect(isLeaseStore(a)).toBe(true);
  });

  it("has one holder at a time; the other learns who holds it, with its address", async () => {
    const { a, b, durationMs } = await variant.fresh();
    expect(await b.readLease("east")).toBeUndefined();
    const first = await a.acquireLease({
      name: "east",
      holder: "one",
      durationMs,
      address: "http://127.0.0.1:1",
    });
    expect(first.acquired).toBe(true);
    const second = await b.acquireLease({ name: "east", holder: "two", durationMs });
    expect(second.acquired).toBe(false);
    if (second.acquired) throw new Error("unreachable");
    expect(second.holder).toMatchObject({
      name: "east",
      holder: "one",
      address: "http://127.0.0.1:1",
      revision: 1,
    });
    expect(second.holder.remainingMs).toBeGreaterThan(0);
    // Another name is another lease.
    expect((await b.acquireLease({ name: "west", holder: "two", durationMs })).acquired).toBe(true);
    // The holder asking again keeps its term (same revision).
    const again = await a.acquireLease({ name: "east", holder: "one", durationMs });
    expect(again.acquired && again.lease.revision).toBe(1);
  });

  it("renews while the term runs; once it expired another takes it with the next revision, and the old holder can no longer renew", async () => {
    const { a, b, durationMs, expire } = await variant.fresh();
    const got = await a.acquireLease({ name: "east", holder: "one", durationMs });
    if (!got.acquired) throw new Error("not acquired");
    expect(await a.renewLease(got.lease)).toBe(true);
    await expire();
    const taken = await b.acquireLease({ name: "east", holder: "two", durationMs });
    if (!taken.acquired) throw new Error("not taken over");
    expect(taken.lease.revision).toBe(got.lease.revision + 1);
    expect(await a.renewLease(got.lease)).toBe(false);
    expect((await a.readLease("east"))?.holder).toBe("two");
  });

  it("after a release, another takes it at once", async () => {
    const { a, b, durationMs } = await variant.fresh();
    const got = await a.acquireLease({ name: "east", holder: "one", durationMs });
    if (!got.acquired) throw new Error("not acquired");
    await a.releaseLease(got.lease);
    const taken = await b.acquireLease({ name: "east", holder: "two", durationMs });
    expect(taken.acquired && taken.lease.revision).toBe(2);
    // Releasing a term that is over changes nothing.
    await a.releaseLease(got.lease);
    expect((await b.readLease("east"))?.remainingMs).toBeGreaterThan(0);
  });

  it("writes under the current term and refuses, writing nothing, a write under a term that is over or expired", async () => {
    const { a, b, durationMs, expire } = await variant.fresh();
    const got = await a.acquireLease({ name: "east", holder: "one", durationMs });
    if (!got.acquired) throw new Error("not acquired");
    const fence = { lease: "east", revision: got.lease.revision };
    await a.put(mesh("m1"), { fence });
    await a.apply([{ op: "put", input: mesh("m2") }], { fence });
    const before = await b.revision();
    // Expired, nobody took it: refused.
    await expire();
    expect((await rejection(a.put(mesh("m3"), { fence }))).code).toBe("not_leader");
    // Another term: refused too, by put, delete and apply alike.
    const taken = await b.acquireLease({ name: "east", holder: "two", durationMs });
    if (!taken.acquired) throw new Error("not taken over");
    const refused = await rejection(
      a.apply(
        [
          { op: "put", input: mesh("m4") },
          { op: "delete", kind: "Mesh", mesh: "", name: "m1" },
        ],
        { fence },
      ),
    );
    expect(refused.code).toBe("not_leader");
    expect(refused.message).toContain(`term ${taken.lease.revision}`);
    expect((await rejection(a.delete("Mesh", "", "m1", { fence }))).code).toBe("not_leader");
    expect(await b.revision()).toBe(before);
    expect((await b.list("Mesh")).resources.map((r) => r.meta.name)).toEqual(["m1", "m2"]);
    // The new term writes; a fence naming a lease never taken is refused.
    await b.put(mesh("m5"), { fence: { lease: "east", revision: taken.lease.revision } });
    expect(
      (await rejection(b.put(mesh("m6"), { fence: { lease: "nope", revision: 1 } }))).code,
    ).toBe("not_leader");
    expect((await b.list("Mesh")).resources.map((r) => r.meta.name)).toEqual(["m1", "m2", "m5"]);
  });

  it("refuses a claim without a name or a positive duration", async () => {
    const { a } = await variant.fresh();
    for (const claim of [
      { name: "", holder: "one", durationMs: 10 },
      { name: "east", holder: "one", durationMs: 0 },
      { name: "east", holder: "one", durationMs: 1.5 },
    ])
      expect(() => a.acquireLease(claim)).toThrow(/lease/);
  });
});

describe("PostgreSQL leases", () => {
  beforeAll(() => server.setup());
  afterAll(() => server.teardown());

  it("in a group commit, refuses only the batch whose term is over", async () => {
    const { a, b, durationMs } = await server.fresh();
    const old = await a.acquireLease({ name: "east", holder: "one", durationMs });
    if (!old.acquired) throw new Error("not acquired");
    await a.releaseLease(old.lease);
    const current = await b.acquireLease({ name: "east", holder: "two", durationMs: 60_000 });
    if (!current.acquired) throw new Error("not acquired");
    const results = await Promise.allSettled([
      a.put(mesh("stale"), { fence: { lease: "east", revision: old.lease.revision } }),
      a.put(mesh("fresh"), { fence: { lease: "east", revision: current.lease.revision } }),
      a.put(mesh("plain")),
    ]);
    expect(results.map((r) => r.status)).toEqual(["rejected", "fulfilled", "fulfilled"]);
    expect((await b.list("Mesh")).resources.map((r) => r.meta.name)).toEqual(["fresh", "plain"]);
  });
});
