// The store contract v2, run against every implementation: memory, embedded
// PostgreSQL (the launcher the CLI uses) and a PostgreSQL server.
import { create, equals, fromBinary, toBinary } from "@bufbuild/protobuf";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import { MeshSpecSchema } from "../../examples/example-kinds/index.ts";
import { silentLogger } from "../../src/log.ts";
import type { StoreChange } from "../../src/store/contract.ts";
import { PostgresStore } from "../../src/store/postgres.ts";
import { SCHEMA_VERSION } from "../../src/store/postgres/migrations.ts";
import type { StoredResource } from "../../src/kinds/resource-types.ts";
import {
  collect,
  dataplane,
  describeChange,
  embeddedVariant,
  faultOnChangeLog,
  memoryVariant,
  mesh,
  policy,
  postgresServerVariant,
  types,
  type StoreSpace,
  type StoreVariant,
} from "./fixtures.ts";

const variants: StoreVariant[] = [memoryVariant, embeddedVariant, postgresServerVariant];

async function rejection(promise: Promise<unknown>): Promise<KdsError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(KdsError);
    return error as KdsError;
  }
  throw new Error("expected a rejection");
}

describe.each(variants)("store contract: $name", (variant) => {
  const spaces: StoreSpace[] = [];
  const fresh = async (options?: Parameters<StoreVariant["fresh"]>[0]): Promise<StoreSpace> => {
    const space = await variant.fresh(options);
    spaces.push(space);
    return space;
  };
  beforeAll(() => variant.setup());
  afterAll(async () => {
    await Promise.all(spaces.map((s) => s.close()));
    await variant.teardown();
  });

  it("gives every write the next revision of one sequence, across kinds", async () => {
    const { store } = await fresh();
    expect(await store.revision()).toBe(0);
    const a = await store.put(mesh("a"));
    const p = await store.put(policy("a", "p1"));
    expect(await store.delete("Mesh", "", "a")).toBe(true);
    const batch = await store.apply([
      { op: "put", input: mesh("b") },
      { op: "put", input: dataplane("b", "dp1") },
      { op: "delete", kind: "Mesh", mesh: "", name: "never-existed" },
    ]);
    expect([a.meta.version, p.meta.version]).toEqual(["1", "2"]);
    expect(batch.revision).toBe(5);
    expect((batch.results[0] as StoredResource).meta.version).toBe("4");
    expect((batch.results[1] as StoredResource).meta.version).toBe("5");
    expect(batch.results[2]).toBe(false);
    expect(await store.revision()).toBe(5);
    // A batch that changes nothing takes no revision.
    expect(
      (await store.apply([{ op: "delete", kind: "Mesh", mesh: "", name: "nope" }])).revision,
    ).toBe(5);
    expect(await store.delete("Mesh", "", "nope")).toBe(false);
    expect(await store.revision()).toBe(5);
  });

  it("round-trips a resource: spec, labels, mesh, times; kinds are case-insensitive", async () => {
    const { store } = await fresh();
    const input = { ...dataplane("m1", "dp-1", { app: "web", "kds.io/zone": "z1" }) };
    const first = await store.put(input);
    const got = await store.get("dataplane", "m1", "dp-1");
    expect(got?.kind).toBe("Dataplane");
    expect(got?.meta).toEqual(first.meta);
    expect(equals(types.get("Dataplane").schema, got?.spec as never, input.spec as never)).toBe(
      true,
    );
    expect(await store.get("Dataplane", "m2", "dp-1")).toBeUndefined();
    const second = await store.put({ ...input, labels: { app: "api" } });
    expect(second.meta.creationTime.getTime()).toBe(first.meta.creationTime.getTime());
    expect(second.meta.modificationTime.getTime()).toBeGreaterThanOrEqual(
      first.meta.modificationTime.getTime(),
    );
    expect(second.meta.labels).toEqual({ app: "api" });
    // The stored spec is a copy: changing the caller's object later changes nothing stored.
    (input.spec as unknown as { address: string }).address = "10.9.9.9";
    expect((await store.get("Dataplane", "m1", "dp-1"))?.spec).toMatchObject({
      address: "10.0.0.1",
    });
  });

  it("takes a put that hands its spec and labels over with the spec's bytes (handOver, specBytes) like any other: read back, listed and watched as given", async () => {
    const { store } = await fresh();
    const schema = types.get("Dataplane").schema;
    const bytes = toBinary(schema, dataplane("m1", "dp-1").spec as never);
    const spec = fromBinary(schema, bytes);
    const batch = await store.apply([
      {
        op: "put",
        input: { ...dataplane("m1", "dp-1", { app: "web" }), spec },
        handOver: true,
        specBytes: bytes,
      },
      { op: "put", input: dataplane("m1", "dp-2") },
    ]);
    const written = batch.results[0] as StoredResource;
    expect(written.meta.version).toBe("1");
    expect(written.meta.labels).toEqual({ app: "web" });
    expect(Object.isFrozen(written.meta.labels)).toBe(true);
    const got = await store.get("Dataplane", "m1", "dp-1");
    expect(got?.meta.labels).toEqual({ app: "web" });
    expect(equals(schema, got?.spec as never, spec)).toBe(true);
    expect(got?.spec).toMatchObject({ address: "10.0.0.1", service: "web", port: 8080 });
    expect((await store.list("Dataplane")).resources.map((r) => r.spec)).toMatchObject([
      { address: "10.0.0.1" },
      { address: "10.0.0.1" },
    ]);
    const changes = await collect(store, 0, (c) => c.length >= 2);
    expect(changes.map(describeChange)).toEqual([
      "put Dataplane m1/dp-1@1",
      "put Dataplane m1/dp-2@2",
    ]);
    expect(
      changes[0]?.op === "put" && equals(schema, changes[0].resource.spec as never, spec),
    ).toBe(true);
  });

  it("lists a consistent snapshot with its revision, sorted by mesh then name, filtered by mesh and labels", async () => {
    const { store } = await fresh();
    await store.apply([
      { op: "put", input: dataplane("m2", "b", { app: "web", tier: "1" }) },
      { op: "put", input: dataplane("m1", "c", { app: "web" }) },
      { op: "put", input: dataplane("m1", "B", { app: "db" }) },
      { op: "put", input: dataplane("m1", "a-1", { app: "web", tier: "1" }) },
      { op: "put", input: policy("m1", "p") },
    ]);
    const all = await store.list("Dataplane");
    expect(all.revision).toBe(5);
    expect(all.resources.map((r) => `${r.meta.mesh}/${r.meta.name}`)).toEqual([
      "m1/B",
      "m1/a-1",
      "m1/c",
      "m2/b",
    ]);
    expect(
      (await store.list("Dataplane", { mesh: "m1" })).resources.map((r) => r.meta.name),
    ).toEqual(["B", "a-1", "c"]);
    expect(
      (await store.list("Dataplane", { labels: { app: "web", tier: "1" } })).resources.map(
        (r) => r.meta.name,
      ),
    ).toEqual(["a-1", "b"]);
    expect(
      (await store.list("Dataplane", { mesh: "m2", labels: { app: "db" } })).resources,
    ).toEqual([]);
    expect((await store.list("Mesh")).resources).toEqual([]);
    await store.delete("Dataplane", "m1", "c");
    const after = await store.list("Dataplane");
    expect(after.revision).toBe(6);
    expect(after.resources).toHaveLength(3);
  });

  it("lists a snapshot that matches its revision while another instance writes", async () => {
    const space = await fresh();
    const writer = await space.peer();
    // Every revision adds one new Mesh, so a consistent snapshot holds exactly `revision` of them.
    const writing = (async () => {
      for (let i = 0; i < 30; i++) {
        await writer.apply([
          { op: "put", input: mesh(`x${i}`) },
          { op: "put", input: mesh(`y${i}`) },
        ]);
      }
    })();
    const mismatches: string[] = [];
    let lists = 0;
    for (let done = false; !done && lists < 1_000; lists++) {
      done = (await Promise.race([writing.then(() => true), Promise.resolve(false)])) as boolean;
      const { revision, resources } = await space.store.list("Mesh");
      if (resources.length !== revision)
        mismatches.push(`revision ${revision} with ${resources.length} resources`);
    }
    await writing;
    expect(mismatches).toEqual([]);
    expect(lists).toBeGreaterThan(1);
    expect((await space.store.list("Mesh")).resources).toHaveLength(60);
  });

  it("watches every change in order with the resource or a tombstone, and resumes from any revision", async () => {
    const { store } = await fresh();
    await store.put(mesh("m", "one"));
    await store.put(policy("m", "p"));
    await store.put(mesh("m", "two"));
    await store.delete("TrafficPolicy", "m", "p");
    const changes = await collect(store, 0, (c) => c.length >= 4);
    expect(changes.map(describeChange)).toEqual([
      "put Mesh /m@1",
      "put TrafficPolicy m/p@2",
      "put Mesh /m@3",
      "delete TrafficPolicy m/p@4",
    ]);
    const third = changes[2] as Extract<StoreChange, { op: "put" }>;
    expect(third.resource.meta.version).toBe("3");
    expect(third.resource.spec).toMatchObject({ description: "two" });
    expect(await store.get("Mesh", "", "m")).toEqual(third.resource);
    const resumed = await collect(store, 2, (c) => c.length >= 2);
    expect(resumed.map((c) => c.revision)).toEqual([3, 4]);
    // Live changes arrive after the backlog.
    const live = collect(store, 4, (c) => c.length >= 2);
    await store.apply([
      { op: "put", input: dataplane("m", "d") },
      { op: "delete", kind: "Mesh", mesh: "", name: "m" },
    ]);
    expect((await live).map(describeChange)).toEqual(["put Dataplane m/d@5", "delete Mesh /m@6"]);
  });

  it("filters a watch by kinds and still moves past the others", async () => {
    const { store } = await fresh();
    const watched = collect(store, 0, (c) => c.length >= 2, { kinds: ["mesh"] });
    await store.put(policy("m", "p1"));
    await store.put(mesh("m1"));
    await store.put(dataplane("m", "d"));
    await store.put(mesh("m2"));
    expect((await watched).map(describeChange)).toEqual(["put Mesh /m1@2", "put Mesh /m2@4"]);
  });

  it("fails a watch from before the kept history with store_compacted, and one from the future too", async () => {
    const { store } = await fresh({ historyLimit: 4 });
    for (let i = 0; i < 20; i++) await store.put(mesh(`m${i}`));
    const error = await rejection(collect(store, 0, () => false));
    expect(error.code).toBe("store_compacted");
    expect(error.message).toMatch(/list again/);
    // The last historyLimit changes are always kept.
    const recent = await collect(store, 16, (c) => c.length >= 4);
    expect(recent.map((c) => c.revision)).toEqual([17, 18, 19, 20]);
    const ahead = await rejection(collect(store, 25, () => false));
    expect(ahead.code).toBe("store_compacted");
  });

  it("ends a watch without an error when its signal aborts, waiting or not", async () => {
    const { store } = await fresh();
    await store.put(mesh("m"));
    const controller = new AbortController();
    const seen: number[] = [];
    const iterate = (async () => {
      for await (const change of store.watch(0, { signal: controller.signal })) {
        seen.push(change.revision);
        if (seen.length === 1) setTimeout(() => controller.abort(), 10);
      }
    })();
    await expect(iterate).resolves.toBeUndefined();
    expect(seen).toEqual([1]);
    const already = new AbortController();
    already.abort();
    const none: StoreChange[] = [];
    for await (const c of store.watch(0, { signal: already.signal })) none.push(c);
    expect(none).toEqual([]);
  });

  it("applies a batch all or nothing: a conflict or invalid op in the middle writes nothing and emits no change", async () => {
    const { store } = await fresh();
    const base = await store.put(mesh("a"));
    const failing = await rejection(
      store.apply([
        { op: "put", input: mesh("b") },
        { op: "put", input: mesh("a", "changed"), expectedVersion: "999" },
        { op: "put", input: mesh("c") },
      ]),
    );
    expect(failing.code).toBe("conflict");
    const invalid = await rejection(
      store.apply([
        { op: "put", input: mesh("b") },
        { op: "put", input: { ...mesh("x"), name: "bad name!" } },
      ]),
    );
    expect(invalid.code).toBe("invalid_resource");
    const deleteConflict = await rejection(
      store.apply([
        { op: "delete", kind: "Mesh", mesh: "", name: "a" },
        { op: "put", input: mesh("a"), expectedVersion: base.meta.version },
      ]),
    );
    expect(deleteConflict.code).toBe("conflict");
    // A resource replaced twice, then deleted, before the batch fails keeps its first state.
    const rewritten = await rejection(
      store.apply([
        { op: "put", input: mesh("a", "changed"), expectedVersion: base.meta.version },
        { op: "put", input: mesh("a", "changed again") },
        { op: "delete", kind: "Mesh", mesh: "", name: "a" },
        { op: "put", input: mesh("e"), expectedVersion: "999" },
      ]),
    );
    expect(rewritten.code).toBe("conflict");
    expect((await store.get("Mesh", "", "a"))?.spec).toEqual(base.spec);
    expect(await store.revision()).toBe(1);
    expect((await store.list("Mesh")).resources.map((r) => r.meta.name)).toEqual(["a"]);
    expect((await store.get("Mesh", "", "a"))?.meta.version).toBe("1");
    // The next successful write is revision 2, and the feed holds nothing in between.
    await store.put(mesh("d"));
    const changes = await collect(store, 0, (c) => c.some((x) => x.revision === 2));
    expect(changes.map(describeChange)).toEqual(["put Mesh /a@1", "put Mesh /d@2"]);
  });

  it("reads many names of a kind at once: in order, undefined where absent, meshes and kinds told apart, duplicates answered twice", async () => {
    const { store } = await fresh();
    await store.apply([
      ...Array.from({ length: 30 }, (_, i) => ({
        op: "put" as const,
        input: dataplane("m1", `dp-${i}`),
      })),
      { op: "put", input: dataplane("m2", "dp-0") },
      { op: "put", input: policy("m1", "dp-1") },
    ]);
    // 25,000 names, most of them absent: more than one statement's worth on PostgreSQL (which then reads in chunks, in one snapshot).
    const refs = Array.from({ length: 25_000 }, (_, i) => ({ mesh: "m1", name: `dp-${i * 7}` }));
    refs.push(
      { mesh: "m2", name: "dp-0" },
      { mesh: "m3", name: "dp-0" },
      { mesh: "m1", name: "dp-7" },
      { mesh: "m1", name: "dp-1" },
    );
    const found = await store.getMany("dataplane", refs);
    expect(found).toHaveLength(refs.length);
    found.forEach((r, i) => {
      const ref = refs[i] as { mesh: string; name: string };
      const present =
        (ref.mesh === "m1" && Number(ref.name.slice(3)) < 30) ||
        (ref.mesh === "m2" && ref.name === "dp-0");
      if (!present) {
        expect(r, `${ref.mesh}/${ref.name}`).toBeUndefined();
        return;
      }
      expect(r?.kind).toBe("Dataplane");
      expect(r?.meta).toMatchObject({ mesh: ref.mesh, name: ref.name });
    });
    expect(found.filter((r) => r !== undefined)).toHaveLength(5 + 1 + 1 + 1);
    // The same as get, field for field.
    expect(found[1]).toEqual(await store.get("Dataplane", "m1", "dp-7"));
    expect(await store.getMany("Dataplane", [])).toEqual([]);
    expect(
      await store.getMany("TrafficPolicy", [
        { mesh: "m1", name: "dp-1" },
        { mesh: "m1", name: "dp-0" },
      ]),
    ).toMatchObject([{ kind: "TrafficPolicy" }, undefined]);
  });

  it("sees its own earlier ops inside a batch", async () => {
    const { store } = await fresh();
    const { results, revision } = await store.apply([
      { op: "put", input: mesh("a", "1"), expectedVersion: "" },
      { op: "put", input: mesh("a", "2"), expectedVersion: "1" },
      { op: "delete", kind: "Mesh", mesh: "", name: "a", expectedVersion: "2" },
      { op: "put", input: mesh("a", "4"), expectedVersion: "" },
    ]);
    expect(revision).toBe(4);
    expect(results.map((r) => (typeof r === "boolean" ? r : r.meta.version))).toEqual([
      "1",
      "2",
      true,
      "4",
    ]);
    const a = await store.get("Mesh", "", "a");
    expect(a?.meta.version).toBe("4");
    expect(a?.spec).toMatchObject({ description: "4" });
    expect((await collect(store, 0, (c) => c.length >= 4)).map(describeChange)).toEqual([
      "put Mesh /a@1",
      "put Mesh /a@2",
      "delete Mesh /a@3",
      "put Mesh /a@4",
    ]);
  });

  it("checks expected versions on put and delete", async () => {
    const { store } = await fresh();
    const v1 = await store.put(mesh("a"), { expectedVersion: "" });
    expect((await rejection(store.put(mesh("a"), { expectedVersion: "" }))).message).toMatch(
      /already exists \(version 1\)/,
    );
    expect((await rejection(store.put(mesh("b"), { expectedVersion: "7" }))).message).toMatch(
      /no longer exists/,
    );
    const v2 = await store.put(mesh("a", "x"), { expectedVersion: v1.meta.version });
    const stale = await rejection(store.put(mesh("a", "y"), { expectedVersion: v1.meta.version }));
    expect(stale.code).toBe("conflict");
    expect(stale.message).toMatch(/expected version 1, found 2/);
    expect((await rejection(store.delete("Mesh", "", "a", { expectedVersion: "1" }))).code).toBe(
      "conflict",
    );
    expect(await store.delete("Mesh", "", "a", { expectedVersion: v2.meta.version })).toBe(true);
    expect(await store.delete("Mesh", "", "a", { expectedVersion: "" })).toBe(false);
    expect(await store.revision()).toBe(3);
  });

  it("refuses invalid resources and unknown kinds with clear errors, writing nothing", async () => {
    const { store } = await fresh();
    const cases: Array<[Promise<unknown>, string, RegExp]> = [
      [
        store.put({ ...mesh("a"), kind: "Nope" }),
        "unknown_type",
        /unknown resource type "Nope"; known types/,
      ],
      [store.put({ ...mesh("a"), name: "" }), "invalid_resource", /a name is 1 to 253/],
      [
        store.put({ ...mesh("a"), name: "x".repeat(254) }),
        "invalid_resource",
        /a name is 1 to 253/,
      ],
      [store.put({ ...mesh("a"), mesh: "m" }), "invalid_resource", /cluster-scoped/],
      [
        store.put({ ...policy("m", "p"), mesh: "" }),
        "invalid_resource",
        /mesh-scoped; give it a mesh/,
      ],
      [
        store.put({ ...policy("m", "p"), spec: create(MeshSpecSchema) }),
        "invalid_resource",
        /the spec is a kds.example.v1.MeshSpec/,
      ],
      [store.delete("Nope", "", "a"), "unknown_type", /unknown resource type/],
    ];
    for (const [promise, code, message] of cases) {
      const error = await rejection(promise);
      expect(error.code).toBe(code);
      expect(error.message).toMatch(message);
    }
    expect(await store.revision()).toBe(0);
  });

  it("rejects calls whose signal has already aborted", async () => {
    const { store } = await fresh();
    const controller = new AbortController();
    controller.abort();
    const signal = controller.signal;
    for (const call of [
      store.get("Mesh", "", "a", { signal }),
      store.getMany("Mesh", [{ mesh: "", name: "a" }], { signal }),
      store.list("Mesh", { signal }),
      store.put(mesh("a"), { signal }),
      store.apply([], { signal }),
      store.revision({ signal }),
    ]) {
      expect((await rejection(call)).code).toBe("aborted");
    }
    expect(await store.revision()).toBe(0);
  });

  it("never lets a watcher skip a revision while two instances write concurrently", async () => {
    const space = await fresh();
    const a = space.store;
    const b = await space.peer();
    const writers = 2;
    const perWriter = 60;
    const total = writers * perWriter;
    const watched = collect(await space.peer(), 0, (c) => c.length >= total);
    await Promise.all(
      [a, b].map(async (store, w) => {
        for (let i = 0; i < perWriter; i++) {
          // Single puts and small batches, interleaved between the two instances.
          if (i % 3 === 0 && i + 1 < perWriter) {
            await store.apply([
              { op: "put", input: dataplane("m", `w${w}-${i}`) },
              { op: "put", input: dataplane("m", `w${w}-${i + 1}`) },
            ]);
            i++;
          } else {
            await store.put(dataplane("m", `w${w}-${i}`));
          }
        }
      }),
    );
    const revisions = (await watched).map((c) => c.revision);
    expect(revisions).toEqual(Array.from({ length: total }, (_, i) => i + 1));
    expect((await a.list("Dataplane")).resources).toHaveLength(total);
    expect(await b.revision()).toBe(total);
  });
});

describe.each([embeddedVariant, postgresServerVariant])("PostgreSQL store: $name", (variant) => {
  const spaces: StoreSpace[] = [];
  const fresh = async (options?: Parameters<StoreVariant["fresh"]>[0]): Promise<StoreSpace> => {
    const space = await variant.fresh(options);
    spaces.push(space);
    return space;
  };
  beforeAll(() => variant.setup());
  afterAll(async () => {
    await Promise.all(spaces.map((s) => s.close()));
    await variant.teardown();
  });
  const pg = (space: StoreSpace): { url: string; schema: string } =>
    space.postgres as { url: string; schema: string };

  it("carries a change to another instance through LISTEN/NOTIFY (no polling)", async () => {
    const space = await fresh({ pollIntervalMs: 3_600_000 });
    const watcher = await space.peer();
    let ready: () => void = () => undefined;
    const first = new Promise<void>((r) => (ready = r));
    const watched = collect(watcher, 0, (c) => c.length >= 3, { onChange: () => ready() });
    await space.store.put(mesh("a"));
    await first; // the watcher is now waiting for a notification
    await space.store.put(mesh("b"));
    await space.store.delete("Mesh", "", "a");
    expect((await watched).map(describeChange)).toEqual([
      "put Mesh /a@1",
      "put Mesh /b@2",
      "delete Mesh /a@3",
    ]);
  });

  it("names the kinds a write changed in its NOTIFY, sorted after the revision", async () => {
    const space = await fresh({ pollIntervalMs: 3_600_000 });
    const { url, schema } = pg(space);
    const payloads: string[] = [];
    let heard: () => void = () => undefined;
    const listener = postgres(url, { max: 1, onnotice: () => undefined });
    try {
      await listener.listen(`kds.${schema}`, (payload) => {
        payloads.push(payload);
        if (payloads.length === 2) heard();
      });
      const both = new Promise<void>((r) => (heard = r));
      await space.store.apply([
        { op: "put", input: policy("default", "p") },
        { op: "put", input: mesh("default") },
      ]);
      await space.store.delete("TrafficPolicy", "default", "p");
      await both;
      expect(payloads).toEqual(["2 Mesh,TrafficPolicy", "3 TrafficPolicy"]);
    } finally {
      await listener.end({ timeout: 5 });
    }
  });

  it("wakes every watch on a notification that names no kinds, as an older release sends (no polling)", async () => {
    const space = await fresh({ pollIntervalMs: 3_600_000 });
    const { url, schema } = pg(space);
    const watcher = await space.peer();
    const admin = postgres(url, { max: 1, onnotice: () => undefined });
    try {
      let first: () => void = () => undefined;
      const firstSeen = new Promise<void>((r) => (first = r));
      const watched = collect(watcher, 0, (c) => c.length >= 2, {
        kinds: ["Mesh"],
        onChange: () => first(),
      });
      await space.store.put(mesh("a"));
      await firstSeen; // the Mesh watch now waits for a notification
      await space.store.put(policy("a", "p")); // names TrafficPolicy only: the Mesh watch sleeps on
      // A change of revision 3 written by hand, and a notification with the revision alone, as an older
      // release sends: it names no kinds, so it must wake the Mesh watch, which then reads revision 3.
      await admin.unsafe(`
        INSERT INTO "${schema}".kds_changes (revision, op, kind, mesh, name, labels, spec, created_at, modified_at)
          SELECT 3, op, kind, mesh, 'b', labels, spec, created_at, modified_at FROM "${schema}".kds_changes WHERE revision = 1;
        UPDATE "${schema}".kds_state SET revision = 3 WHERE id;
        SELECT pg_notify('kds.${schema}', '3')`);
      // Nothing else wakes it (the poll is an hour): a watch left asleep fails this test by its timeout.
      expect((await watched).map(describeChange)).toEqual(["put Mesh /a@1", "put Mesh /b@3"]);
    } finally {
      await admin.end({ timeout: 5 });
    }
  });

  it("survives its connections being killed mid-watch without losing a change", async () => {
    const space = await fresh({ pollIntervalMs: 3_600_000 });
    const { url } = pg(space);
    const writer = space.store;
    const watcher = await space.peer();
    const admin = postgres(url, { max: 1, onnotice: () => undefined });
    try {
      let firstSeen: () => void = () => undefined;
      const first = new Promise<void>((r) => (firstSeen = r));
      const watched = collect(watcher, 0, (c) => c.length >= 6, { onChange: () => firstSeen() });
      await writer.put(mesh("m0"));
      await first;
      // Kill every other connection to this database: the watcher's LISTEN and pool, and the writer's pool.
      const killed =
        await admin`SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`;
      expect(killed.length).toBeGreaterThan(0);
      // The writer retries what failed on a dead connection (the contract's store_unavailable).
      for (let i = 1; i <= 5; i++) await retryUnavailable(() => writer.put(mesh(`m${i}`)));
      const changes = await watched;
      expect(changes.map((c) => c.revision)).toEqual([1, 2, 3, 4, 5, 6]);
      expect(changes.map((c) => (c.op === "put" ? c.resource.meta.name : ""))).toEqual([
        "m0",
        "m1",
        "m2",
        "m3",
        "m4",
        "m5",
      ]);
    } finally {
      await admin.end({ timeout: 5 });
    }
  });

  it("fails fast and clearly on a database that does not answer", async () => {
    const closed = await closedPort();
    const error = await rejection(
      PostgresStore.open(types, {
        url: `postgres://kds:secret@127.0.0.1:${closed}/kds`,
        logger: silentLogger,
      }),
    );
    expect(error.code).toBe("store_unavailable");
    expect(error.message).toMatch(
      new RegExp(`cannot reach PostgreSQL at 127\\.0\\.0\\.1:${closed}/kds`),
    );
    expect(error.message).toMatch(/check that the server runs/);
    expect(error.message).not.toMatch(/secret/);
    const badDb = new URL(pg(await fresh()).url);
    badDb.pathname = "/kds_no_such_database";
    const missing = await rejection(
      PostgresStore.open(types, { url: badDb.toString(), logger: silentLogger }),
    );
    expect(missing.code).toBe("store_unavailable");
    expect(missing.message).toMatch(/kds_no_such_database.*create the database/);
    const notPostgres = await rejection(
      PostgresStore.open(types, { url: "mysql://x@127.0.0.1/db", logger: silentLogger }),
    );
    expect(notPostgres.code).toBe("invalid_argument");
  });

  it("runs migrations once, also when instances start at the same time, and refuses a newer schema", async () => {
    const space = await fresh();
    const { url, schema } = pg(space);
    const again = await Promise.all([space.peer(), space.peer(), space.peer()]);
    expect(again.map((s) => (s as PostgresStore).migration)).toEqual([
      { from: SCHEMA_VERSION, to: SCHEMA_VERSION },
      { from: SCHEMA_VERSION, to: SCHEMA_VERSION },
      { from: SCHEMA_VERSION, to: SCHEMA_VERSION },
    ]);
    // A brand-new schema opened by three instances at once: one migrates, the others find it done.
    const racing = await Promise.all(
      [1, 2, 3].map(() =>
        PostgresStore.open(types, {
          url,
          schema: `${schema}_race`,
          maxConnections: 2,
          logger: silentLogger,
        }),
      ),
    );
    expect(racing.map((s) => s.migration.from).sort()).toEqual([0, SCHEMA_VERSION, SCHEMA_VERSION]);
    await Promise.all(racing.map((s) => s.close()));
    const admin = postgres(url, { max: 1, onnotice: () => undefined });
    try {
      await space.store.put(mesh("kept"));
      await admin.unsafe(
        `INSERT INTO "${schema}".kds_schema_migrations (version, description) VALUES (${SCHEMA_VERSION + 1}, 'from the future')`,
      );
      const error = await rejection(
        PostgresStore.open(types, { url, schema, logger: silentLogger }),
      );
      expect(error.code).toBe("store_unavailable");
      expect(error.message).toMatch(
        new RegExp(
          `schema version ${SCHEMA_VERSION + 1}, but this kds-mux knows versions up to ${SCHEMA_VERSION}`,
        ),
      );
      expect(error.message).toMatch(/Run the newer kds-mux/);
      const rows = await admin.unsafe(
        `SELECT version FROM "${schema}".kds_schema_migrations ORDER BY version`,
      );
      expect(rows.map((r) => r.version)).toEqual([
        ...Array.from({ length: SCHEMA_VERSION }, (_, i) => i + 1),
        SCHEMA_VERSION + 1,
      ]);
      expect((await space.store.get("Mesh", "", "kept"))?.meta.version).toBe("1");
    } finally {
      await admin.end({ timeout: 5 });
    }
  });

  it("writes nothing of a 50-resource batch when the database fails it half-way (after the resource rows were written)", async () => {
    const space = await fresh();
    const { url, schema } = pg(space);
    const admin = postgres(url, { max: 1, onnotice: () => undefined });
    try {
      await space.store.put(mesh("before"));
      // A fault inside the transaction: the change-log insert fails at the 26th resource, after every resource row was written.
      const removeFault = await faultOnChangeLog(admin, schema, "r-25");
      const ops = Array.from({ length: 50 }, (_, i) => ({
        op: "put" as const,
        input: mesh(`r-${i}`),
      }));
      const error = await rejection(space.store.apply(ops));
      expect(error.code).toBe("store_unavailable");
      expect(error.message).toMatch(/injected fault at r-25/);
      const [counted] = await admin.unsafe(
        `SELECT (SELECT count(*) FROM "${schema}".kds_resources WHERE name LIKE 'r-%')::int AS resources, (SELECT count(*) FROM "${schema}".kds_changes)::int AS changes`,
      );
      expect(counted).toEqual({ resources: 0, changes: 1 });
      expect(await space.store.revision()).toBe(1);
      // Once the fault is gone the same batch goes in whole, at the next revisions.
      await removeFault();
      expect((await space.store.apply(ops)).revision).toBe(51);
      expect((await space.store.list("Mesh")).resources).toHaveLength(51);
    } finally {
      await admin.end({ timeout: 5 });
    }
  });

  it("cancels a write waiting for the write lock when its signal aborts, writing nothing", async () => {
    const space = await fresh();
    const { url, schema } = pg(space);
    const admin = postgres(url, { max: 1, onnotice: () => undefined });
    try {
      await admin.begin(async (tx) => {
        // Hold the write lock, as a long write on another instance would.
        await tx.unsafe(`SELECT 1 FROM "${schema}".kds_state WHERE id FOR UPDATE`);
        const controller = new AbortController();
        const write = space.store.put(mesh("late"), { signal: controller.signal });
        setTimeout(() => controller.abort(), 50);
        expect((await rejection(write)).code).toBe("aborted");
      });
      expect(await space.store.get("Mesh", "", "late")).toBeUndefined();
      expect(await space.store.revision()).toBe(0);
    } finally {
      await admin.end({ timeout: 5 });
    }
  });
});

/** Retries a store call that failed with `store_unavailable` (a dead pooled connection), a bounded number of times. */
async function retryUnavailable<T>(call: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (error) {
      if (!KdsError.is(error, "store_unavailable") || attempt >= 10) throw error;
      await new Promise((r) => setTimeout(r, 50 * attempt));
    }
  }
}

/** A loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const { createServer } = await import("node:net");
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
  });
}
