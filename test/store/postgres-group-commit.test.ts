// Group commit in the PostgreSQL store (src/store/postgres/write-queue.ts):
// writes that arrive while another is written go in together, in one
// transaction, and each keeps its own outcome. A transaction of another
// instance holding the write lock keeps the first write waiting, so the
// writes that follow queue behind it and form the next group.
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import type { ApplyResult } from "../../src/store/contract.ts";
import type { StoredResource } from "../../src/kinds/resource-types.ts";
import { faultOnChangeLog, mesh, postgresServerVariant, type StoreSpace } from "./fixtures.ts";

const variant = postgresServerVariant;
const spaces: StoreSpace[] = [];
beforeAll(() => variant.setup());
afterAll(async () => {
  await Promise.all(spaces.map((s) => s.close()));
  await variant.teardown();
});

async function fresh(): Promise<StoreSpace> {
  const space = await variant.fresh();
  spaces.push(space);
  return space;
}

async function outcome(p: Promise<ApplyResult>): Promise<ApplyResult | KdsError> {
  try {
    return await p;
  } catch (error) {
    expect(error).toBeInstanceOf(KdsError);
    return error as KdsError;
  }
}

/**
 * Runs `writes` while another connection holds the store's write lock: the
 * first write waits on the lock alone, and the rest queue behind it as one
 * group. Returns every write's outcome once the lock is released.
 */
async function behindTheLock(
  space: StoreSpace,
  writes: (store: StoreSpace["store"]) => Promise<ApplyResult>[],
  whileHeld?: (pending: Promise<ApplyResult | KdsError>[]) => Promise<void>,
): Promise<(ApplyResult | KdsError)[]> {
  const { url, schema } = space.postgres as { url: string; schema: string };
  const admin = postgres(url, { max: 1, onnotice: () => undefined });
  try {
    let pending: Promise<ApplyResult | KdsError>[] = [];
    await admin.begin(async (tx) => {
      await tx.unsafe(`SELECT 1 FROM "${schema}".kds_state WHERE id FOR UPDATE`);
      pending = writes(space.store).map(outcome);
      await whileHeld?.(pending);
      // Long enough for the first write to reach the lock (it is not a condition of the result).
      await new Promise((r) => setTimeout(r, 100));
    });
    return await Promise.all(pending);
  } finally {
    await admin.end({ timeout: 5 });
  }
}

describe("PostgreSQL store: group commit", () => {
  it("writes queued writes together: contiguous revisions in arrival order, one transaction time", async () => {
    const space = await fresh();
    const results = await behindTheLock(space, (store) =>
      Array.from({ length: 20 }, (_, i) => store.put(mesh(`m-${i}`)).then(asApply)),
    );
    const written = results.map((r) => {
      expect(r).not.toBeInstanceOf(KdsError);
      return (r as ApplyResult).results[0] as StoredResource;
    });
    expect(written.map((r) => r.meta.version)).toEqual(
      Array.from({ length: 20 }, (_, i) => String(i + 1)),
    );
    // The 19 that queued behind the first went in as one group: one transaction, one time.
    const times = new Set(written.slice(1).map((r) => r.meta.modificationTime.getTime()));
    expect(times.size).toBe(1);
    expect(await space.store.revision()).toBe(20);
  });

  it("fails only the write that conflicts, and sees earlier writes of its group", async () => {
    const space = await fresh();
    await space.store.put(mesh("a"));
    const results = await behindTheLock(space, (store) => [
      store.apply([{ op: "put", input: mesh("first") }]),
      // Queued together: b, then a write expecting a's version before b's group wrote it again.
      store.apply([{ op: "put", input: mesh("a", "second") }]),
      store.apply([{ op: "put", input: mesh("a", "stale"), expectedVersion: "1" }]),
      store.apply([{ op: "put", input: mesh("c") }]),
      store.apply([{ op: "delete", kind: "Mesh", mesh: "", name: "a", expectedVersion: "3" }]),
    ]);
    expect(results[0]).not.toBeInstanceOf(KdsError);
    expect(results[1]).not.toBeInstanceOf(KdsError);
    expect((results[2] as KdsError).code).toBe("conflict");
    expect(results[3]).not.toBeInstanceOf(KdsError);
    expect((results[4] as ApplyResult).results).toEqual([true]);
    expect((results[4] as ApplyResult).revision).toBe(5);
    expect(await space.store.get("Mesh", "", "a")).toBeUndefined();
    expect((await space.store.get("Mesh", "", "c"))?.meta.version).toBe("4");
    expect(await space.store.revision()).toBe(5);
  });

  it("fails only the write the server refuses: the group is written again one write at a time", async () => {
    const space = await fresh();
    const { url, schema } = space.postgres as { url: string; schema: string };
    const admin = postgres(url, { max: 1, onnotice: () => undefined });
    try {
      await faultOnChangeLog(admin, schema, "bad");
    } finally {
      await admin.end({ timeout: 5 });
    }
    const results = await behindTheLock(space, (store) =>
      ["first", "x", "bad", "y"].map((name) => store.put(mesh(name)).then(asApply)),
    );
    expect(results.map((r) => (r instanceof KdsError ? r.code : "ok"))).toEqual([
      "ok",
      "ok",
      "store_unavailable",
      "ok",
    ]);
    expect((results[2] as KdsError).message).toMatch(/injected fault at bad/);
    expect(
      (await space.store.list("Mesh")).resources.map((r) => `${r.meta.name}@${r.meta.version}`),
    ).toEqual(["first@1", "x@2", "y@3"]);
  });

  it("rejects a queued write at once when its signal aborts, and writes nothing of it", async () => {
    const space = await fresh();
    const stop = new AbortController();
    const results = await behindTheLock(
      space,
      (store) => [
        store.put(mesh("first")).then(asApply),
        store.put(mesh("kept")).then(asApply),
        store.put(mesh("dropped"), { signal: stop.signal }).then(asApply),
      ],
      async (pending) => {
        stop.abort();
        // Rejected while the lock is still held: the caller does not wait for the writer.
        expect(((await pending[2]) as KdsError).code).toBe("aborted");
      },
    );
    expect(results.slice(0, 2).every((r) => !(r instanceof KdsError))).toBe(true);
    expect(await space.store.get("Mesh", "", "dropped")).toBeUndefined();
    expect(await space.store.revision()).toBe(2);
  });
});

/** A put's resource as an apply's result, so every write is compared the same way. */
function asApply(resource: StoredResource): ApplyResult {
  return { revision: Number(resource.meta.version), results: [resource] };
}
