// Store throughput: writes (apply in batches of 1,000), a list of everything,
// and a watch catching up from revision 0, on memory, the embedded PostgreSQL
// and a PostgreSQL server (bench/bench-store.ts: a fresh schema, dropped after).
//
//   node --import ./bench/loader/register.mjs bench/stores.ts [resources=10000]     (also part of bench/run.ts)
import { create } from "@bufbuild/protobuf";
import { DataplaneSpecSchema, exampleTypes } from "../examples/example-kinds/index.ts";
import type { ResourceStore, WriteOp } from "../src/store/contract.ts";
import { createTypeRegistry } from "../src/kinds/builtin-types.ts";
import { openDatabase, openStore, type StoreKind } from "./bench-store.ts";
import { SKIPPED } from "./summary.ts";

/** One store's figures. */
export interface StoreResult {
  readonly store: StoreKind;
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
        spec: create(DataplaneSpecSchema, {
          address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
          service: `svc-${i % 100}`,
          port: 8080,
        }),
      },
    };
  });
}

async function measure(
  name: StoreResult["store"],
  store: ResourceStore,
  resources: number,
): Promise<StoreResult> {
  let t = performance.now();
  for (let i = 0; i < resources; i += BATCH)
    await store.apply(batch(i, Math.min(BATCH, resources - i)));
  const writeMs = performance.now() - t;
  t = performance.now();
  const listed = await store.list("Dataplane");
  const listMs = performance.now() - t;
  if (listed.resources.length !== resources)
    throw new Error(`${name}: listed ${listed.resources.length} of ${resources}`);
  const controller = new AbortController();
  let seen = 0;
  t = performance.now();
  for await (const change of store.watch(0, { signal: controller.signal })) {
    seen++;
    if (change.revision >= listed.revision) break;
  }
  const catchUpMs = performance.now() - t;
  controller.abort();
  if (seen !== resources)
    throw new Error(`${name}: the watch caught up ${seen} of ${resources} changes`);
  return {
    store: name,
    resources,
    writesPerSec: resources / (writeMs / 1000),
    listMs,
    catchUpPerSec: resources / (catchUpMs / 1000),
  };
}

/** Runs the store bench on each of `stores`; a PostgreSQL server that does not answer gives SKIPPED instead of its row. */
export async function storesBench(
  resources: number,
  stores: ReadonlyArray<StoreKind>,
): Promise<
  (
    | StoreResult
    | { readonly store: StoreKind; readonly resources: number; readonly skipped: typeof SKIPPED }
  )[]
> {
  const results: (
    | StoreResult
    | { readonly store: StoreKind; readonly resources: number; readonly skipped: typeof SKIPPED }
  )[] = [];
  for (const name of stores) {
    const database = name === "memory" ? undefined : await openDatabase(name);
    if (name !== "memory" && database === undefined) {
      results.push({ store: name, resources, skipped: SKIPPED });
      continue;
    }
    try {
      const store = await openStore(types, database, Math.max(resources, 1));
      try {
        results.push(await measure(name, store, resources));
      } finally {
        await store.close?.();
      }
    } finally {
      await database?.close();
    }
  }
  return results;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const resources = Number(process.argv[2] ?? 10_000);
  for (const r of await storesBench(resources, ["memory", "embedded", "postgres"])) {
    if ("skipped" in r) console.log(`${r.store}: ${r.skipped}`);
    else
      console.log(
        `${r.store}: ${r.resources} resources, write ${Math.round(r.writesPerSec)}/s, list ${Math.round(r.listMs)} ms, watch catch-up ${Math.round(r.catchUpPerSec)}/s`,
      );
  }
}
