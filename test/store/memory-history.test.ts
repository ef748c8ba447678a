// The memory store's change history is bounded in bytes as well as in
// changes: a zone lease rewritten by every session of a misbehaving zone (or
// any churn of large resources) no longer keeps up to 100,000 whole
// resources alive (the hostile-peer fuzz saw the global's RSS climb with it).
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import { ZoneInsightSpecSchema } from "../../src/gen/kds/v1/resource_pb.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import {
  ZONE_INSIGHT_KIND,
  createTypeRegistry,
  zoneInsightType,
} from "../../src/kinds/builtin-types.ts";
import { MeshSpecSchema } from "../../examples/example-kinds/index.ts";
import { policy, types } from "./fixtures.ts";

const MiB = 1024 * 1024;

/** Reads `watch(from)` until it yields `count` changes or fails; returns their revisions or the error code. */
async function follow(
  store: InMemoryStore,
  from: number,
  count: number,
): Promise<number[] | string> {
  const abort = new AbortController();
  const revisions: number[] = [];
  try {
    for await (const change of store.watch(from, { signal: abort.signal })) {
      revisions.push(change.revision);
      if (revisions.length === count) break;
    }
    return revisions;
  } catch (error) {
    return KdsError.is(error) ? error.code : String(error);
  } finally {
    abort.abort();
  }
}

describe("InMemoryStore history", () => {
  it("drops the oldest changes once their estimated bytes exceed historyBytes, keeping the newest readable", async () => {
    const store = new InMemoryStore(types, { historyBytes: 1 * MiB });
    // 64 KiB descriptions: each change is estimated at well over 128 KiB, so 1 MiB holds at most 8 of them.
    const description = "x".repeat(64 * 1024);
    for (let i = 0; i < 100; i++)
      await store.put({
        kind: "Mesh",
        name: `m-${i % 3}`,
        spec: create(MeshSpecSchema, { description: `${i}${description}` }),
      });
    const size = store.historySize();
    expect(size.bytes).toBeLessThanOrEqual(1.25 * MiB);
    expect(size.changes).toBeGreaterThanOrEqual(1);
    expect(size.changes).toBeLessThan(10);
    // The kept changes are the newest, readable in order; older revisions are compacted.
    const revision = await store.revision();
    const oldestKept = revision - size.changes + 1;
    expect(await follow(store, oldestKept - 1, size.changes)).toEqual(
      Array.from({ length: size.changes }, (_, i) => oldestKept + i),
    );
    expect(await follow(store, 0, 1)).toBe("store_compacted");
  });

  it("keeps small changes up to historyLimit when their bytes stay under historyBytes", async () => {
    const store = new InMemoryStore(types, { historyLimit: 50, historyBytes: 64 * MiB });
    for (let i = 0; i < 200; i++)
      await store.put({
        kind: "Mesh",
        name: "m",
        spec: create(MeshSpecSchema, { description: `${i}` }),
      });
    const { changes, bytes } = store.historySize();
    expect(changes).toBeGreaterThanOrEqual(50);
    expect(changes).toBeLessThanOrEqual(62); // trimmed back to 50 each time it passes 62.5
    expect(bytes).toBeLessThan(64 * 1024);
  });

  it("bounds a global's zone-lease churn by default: 60,000 lease writes keep at most about 80 MiB (estimated) of history", async () => {
    // What the fuzz found: every hostile session that completes its hello writes the zone's lease twice.
    const store = new InMemoryStore(createTypeRegistry([zoneInsightType]));
    const now = timestampFromDate(new Date());
    for (let i = 0; i < 60_000; i++) {
      await store.put({
        kind: ZONE_INSIGHT_KIND,
        name: `hostile-${i % 6}`,
        spec: create(ZoneInsightSpecSchema, {
          instance: "global-1",
          session: crypto.randomUUID(),
          online: i % 2 === 0,
          connectedAt: now,
          renewedAt: now,
          lastEndCode: "protocol_error",
          lastEndMessage: "x".repeat(200),
        }),
      });
    }
    const { changes, bytes } = store.historySize();
    expect(bytes).toBeLessThanOrEqual(1.25 * 64 * MiB);
    expect(changes).toBeLessThan(60_000);
  });

  it("refuses a historyBytes that is not a positive integer", () => {
    expect(() => new InMemoryStore(types, { historyBytes: 0 })).toThrow(
      /historyBytes must be a positive integer/,
    );
  });
});

describe("InMemoryStore watch iterator", () => {
  const mesh = (name: string) => ({
    kind: "Mesh",
    name,
    spec: create(MeshSpecSchema, { description: name }),
  });

  it("answers next() calls made before the last settled in order, one change each, and ends a waiting one on return()", async () => {
    const store = new InMemoryStore(types);
    const abort = new AbortController();
    const it = store.watch(0, { signal: abort.signal })[Symbol.asyncIterator]();
    // Three calls at once, before anything was written: they wait, then take the changes in order.
    const pending = [it.next(), it.next(), it.next()];
    await store.put(mesh("a"));
    await store.put(mesh("b"));
    await store.put(mesh("c"));
    const got = await Promise.all(pending);
    expect(got.map((r) => (r.done === true ? "done" : r.value.revision))).toEqual([1, 2, 3]);
    // A next() waiting for a change ends (done) when the watch is returned, and the watch stays done.
    const waiting = it.next();
    await it.return?.();
    expect(await waiting).toEqual({ value: undefined, done: true });
    await store.put(mesh("d"));
    expect((await it.next()).done).toBe(true);
    abort.abort();
  });

  it("passes over changes of kinds a watch does not follow without waking it, and still hands it the next one it follows", async () => {
    // 40 Mesh writes with room for 10 changes: a TrafficPolicy watch waiting meanwhile is moved past them, so
    // neither the trimming nor the skipped writes cost it anything, and the policy written after them arrives.
    const store = new InMemoryStore(types, { historyLimit: 10 });
    const abort = new AbortController();
    const policies = store
      .watch(0, { signal: abort.signal, kinds: ["TrafficPolicy"] })
      [Symbol.asyncIterator]();
    const meshes = store
      .watch(0, { signal: abort.signal, kinds: ["Mesh"] })
      [Symbol.asyncIterator]();
    const waiting = policies.next();
    for (let i = 0; i < 40; i++) await store.put(mesh(`m${i}`));
    await store.put(policy("m0", "p"));
    const got = await waiting;
    expect(got.done === true ? "done" : [got.value.revision, got.value.op]).toEqual([41, "put"]);
    // A watch with changes it has not read yet is not passed over: the Mesh watch, which read none, starts
    // where it asked (store_compacted: the first 30 are gone), as it did before.
    await expect(meshes.next()).rejects.toMatchObject({ code: "store_compacted" });
    // A batch mixing kinds wakes the watch, which then skips what it does not follow.
    const next = policies.next();
    await store.apply([
      { op: "put", input: mesh("x") },
      { op: "put", input: policy("m0", "q") },
    ]);
    const mixed = await next;
    expect(mixed.done === true ? "done" : mixed.value.revision).toBe(43);
    abort.abort();
  });

  it("ends (done) once its signal aborts, also while a next() waits; a revision ahead of the store fails at the first next()", async () => {
    const store = new InMemoryStore(types);
    await store.put(mesh("a"));
    const abort = new AbortController();
    // A revision ahead of the store fails at the first next(), not when the watch is made.
    const ahead = store.watch(5, { signal: abort.signal })[Symbol.asyncIterator]();
    await expect(ahead.next()).rejects.toMatchObject({ code: "store_compacted" });
    expect((await ahead.next()).done).toBe(true);
    const it = store.watch(0, { signal: abort.signal })[Symbol.asyncIterator]();
    expect((await it.next()).done).toBe(false);
    const waiting = it.next();
    abort.abort();
    expect((await waiting).done).toBe(true);
    await store.put(mesh("b"));
    expect((await it.next()).done).toBe(true);
  });
});
