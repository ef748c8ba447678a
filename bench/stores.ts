// Store throughput: writes (apply in batches of 1,000), a list of everything,
// and a watch catching up from revision 0, on memory, the embedded PostgreSQL
// and a PostgreSQL server (KDS_TEST_DATABASE_URL; a fresh schema, dropped after).
//
//   npx tsx bench/stores.ts [resources=10000]     (also part of bench/run.ts)
import { create } from "@bufbuild/protobuf";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { startEmbeddedPostgres } from "../src/adapters/node/embedded-postgres.ts";
import { DataplaneSpecSchema, exampleTypes } from "../examples/example-kinds/index.ts";
import { silentLogger } from "../src/log.ts";
import type { ResourceStore, WriteOp } from "../src/store/contract.ts";
import { InMemoryStore } from "../src/store/memory.ts";
import { PostgresStore } from "../src/store/postgres.ts";
import { createTypeRegistry } from "../src/sync/builtin-types.ts";

/** One store's figures. */
export interface StoreResult {
  readonly store: "memory" | "embedded" | "postgres";
  readonly resources: number;
  /** Resources written per second, in batches of 1,000 (one transaction each). */
  readonly writesPerSec: number;
  /** Listing all of them. */
  readonly listMs: number;
  /** Changes per second for a watch catching up from revision 0. */
  readonly catchUpPerSec: number;
}

const BATCH = 1_000;
const types = createTypeRegistry(exampleTypes);

function batch(from: number, count: number): WriteOp[] {
  return Array.from({ length: count }, (_, j) => {
    const i = from + j;
    return {
      op: "put" as const,
      input: {
        kind: "Dataplane",
        mesh: `mesh-${i % 10}`,
        name: `dp-${i}`,
        labels: { app: `app-${i % 100}`, "kds.io/zone": "zone-1" },
        spec: create(DataplaneSpecSchema, { address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`, service: `svc-${i % 100}`, port: 8080 }),
      },
    };
  });
}

async function measure(name: StoreResult["store"], store: ResourceStore, resources: number): Promise<StoreResult> {
  let t = performance.now();
  for (let i = 0; i < resources; i += BATCH) await store.apply(batch(i, Math.min(BATCH, resources - i)));
  const writeMs = performance.now() - t;
  t = performance.now();
  const listed = await store.list("Dataplane");
  const listMs = performance.now() - t;
  if (listed.resources.length !== resources) throw new Error(`${name}: listed ${listed.resources.length} of ${resources}`);
  const controller = new AbortController();
  let seen = 0;
  t = performance.now();
  for await (const change of store.watch(0, { signal: controller.signal })) {
    seen++;
    if (change.revision >= listed.revision) break;
  }
  const catchUpMs = performance.now() - t;
  controller.abort();
  if (seen !== resources) throw new Error(`${name}: the watch caught up ${seen} of ${resources} changes`);
  return { store: name, resources, writesPerSec: resources / (writeMs / 1000), listMs, catchUpPerSec: resources / (catchUpMs / 1000) };
}

/** Runs the store bench on every store available; returns one row per store. */
export async function storesBench(resources: number, stores: ReadonlyArray<StoreResult["store"]>): Promise<StoreResult[]> {
  const results: StoreResult[] = [];
  for (const name of stores) {
    if (name === "memory") {
      results.push(await measure(name, new InMemoryStore(types, { historyLimit: Math.max(resources, 1) }), resources));
    } else if (name === "embedded") {
      const dir = await mkdtemp(join(tmpdir(), "kds-bench-store-"));
      await chmod(dir, 0o755);
      const server = await startEmbeddedPostgres({ dataDir: dir, createSystemUser: true });
      try {
        const store = await PostgresStore.open(types, { url: server.url, historyLimit: Math.max(resources, 1), logger: silentLogger });
        try {
          results.push(await measure(name, store, resources));
        } finally {
          await store.close();
        }
      } finally {
        await server.stop();
        await rm(dir, { recursive: true, force: true });
      }
    } else {
      const url = process.env.KDS_TEST_DATABASE_URL;
      if (url === undefined || url === "") continue;
      const schema = `kds_bench_${process.pid}`;
      const store = await PostgresStore.open(types, { url, schema, historyLimit: Math.max(resources, 1), logger: silentLogger });
      try {
        results.push(await measure(name, store, resources));
      } finally {
        await store.close();
        const admin = postgres(url, { max: 1, onnotice: () => undefined });
        await admin.unsafe(`DROP SCHEMA "${schema}" CASCADE`);
        await admin.end({ timeout: 5 });
      }
    }
  }
  return results;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const resources = Number(process.argv[2] ?? 10_000);
  for (const r of await storesBench(resources, ["memory", "embedded", "postgres"])) {
    console.log(`${r.store}: ${r.resources} resources, write ${Math.round(r.writesPerSec)}/s, list ${Math.round(r.listMs)} ms, watch catch-up ${Math.round(r.catchUpPerSec)}/s`);
  }
}
