// The stores a bench scenario can run its global on: memory, the embedded
// PostgreSQL (the CLI's default; one server per run, in a fresh data dir) or a
// PostgreSQL server (KDS_BENCH_DATABASE_URL, else KDS_TEST_DATABASE_URL, else
// the local default). Each use gets a fresh schema, dropped after. A scenario that asks for
// the server when none answers gets `undefined` and reports SKIPPED
// ("skipped: no server", bench/summary.ts).
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { startEmbeddedPostgres } from "../src/adapters/node/embedded-postgres.ts";
import { silentLogger } from "../src/log.ts";
import type { ResourceStore } from "../src/store/contract.ts";
import { InMemoryStore } from "../src/store/memory.ts";
import { PostgresStore } from "../src/store/postgres.ts";
import type { TypeRegistry } from "../src/kinds/resource-types.ts";

/** Which store a scenario runs on. */
export type StoreKind = "memory" | "embedded" | "postgres";

/** The PostgreSQL server the bench uses. */
export const serverUrl =
  process.env.KDS_BENCH_DATABASE_URL ||
  process.env.KDS_TEST_DATABASE_URL ||
  "postgres://postgres@127.0.0.1:5432/postgres";

let answered: Promise<boolean> | undefined;
/** True when the PostgreSQL server at {@link serverUrl} answers a query within 5 s (asked once per process). */
export function serverAnswers(): Promise<boolean> {
  answered ??= (async () => {
    const sql = postgres(serverUrl, { max: 1, connect_timeout: 5, onnotice: () => undefined });
    try {
      await sql`select 1`;
      return true;
    } catch (error) {
      process.stderr.write(
        `bench: no PostgreSQL server at ${serverUrl.replace(/\/\/[^@]*@/, "//…@")} (${String(error)}); its rows are skipped\n`,
      );
      return false;
    } finally {
      await sql.end({ timeout: 1 });
    }
  })();
  return answered;
}

/** One PostgreSQL database to open stores on (several stores on one = several instances sharing it). */
export interface BenchDatabase {
  readonly url: string;
  readonly schema: string;
  /** Drops the schema. */
  close(): Promise<void>;
}

let embedded: Promise<{ url: string; stop(): Promise<void> }> | undefined;
/**
 * The embedded PostgreSQL 18 of this run: the one at KDS_BENCH_EMBEDDED_URL
 * (bench/run.ts starts one and passes it to its child processes), else one
 * started in a fresh data dir on first use ({@link stopEmbedded} stops it).
 */
function embeddedServer(
  settings?: Readonly<Record<string, string>>,
): Promise<{ url: string; stop(): Promise<void> }> {
  const shared = process.env.KDS_BENCH_EMBEDDED_URL;
  if (shared !== undefined && shared !== "")
    return Promise.resolve({ url: shared, stop: async () => undefined });
  embedded ??= (async () => {
    const dir = await mkdtemp(join(tmpdir(), "kds-bench-pg-"));
    await chmod(dir, 0o755);
    const server = await startEmbeddedPostgres({ dataDir: dir, createSystemUser: true, settings });
    return {
      url: server.url,
      async stop() {
        await server.stop();
        await rm(dir, { recursive: true, force: true });
      },
    };
  })();
  return embedded;
}

/** Starts this process's embedded PostgreSQL (if not yet, with server `settings`) and returns its URL. */
export async function embeddedUrl(settings?: Readonly<Record<string, string>>): Promise<string> {
  return (await embeddedServer(settings)).url;
}

/** Stops the embedded PostgreSQL this process started, if any. */
export async function stopEmbedded(): Promise<void> {
  const started = embedded;
  embedded = undefined;
  await (await started)?.stop();
}

let schemas = 0;
/**
 * A fresh schema on the embedded PostgreSQL or on the server, dropped by
 * `close()`; undefined when the server does not answer.
 */
export async function openDatabase(
  kind: Exclude<StoreKind, "memory">,
): Promise<BenchDatabase | undefined> {
  if (kind === "postgres" && !(await serverAnswers())) return undefined;
  const url = kind === "embedded" ? await embeddedUrl() : serverUrl;
  const schema = `kds_bench_${process.pid}_${schemas++}`;
  return {
    url,
    schema,
    async close() {
      const admin = postgres(url, { max: 1, onnotice: () => undefined });
      try {
        await admin.unsafe(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await admin.end({ timeout: 5 });
      }
    },
  };
}

/** A store on `database` (memory when undefined). */
export async function openStore(
  types: TypeRegistry,
  database: BenchDatabase | undefined,
  historyLimit: number,
): Promise<ResourceStore & { close?: () => Promise<void> }> {
  // The whole history, however many bytes: the store bench watches every change from revision 0.
  if (database === undefined)
    return new InMemoryStore(types, { historyLimit, historyBytes: 2 ** 40 });
  return PostgresStore.open(types, {
    url: database.url,
    schema: database.schema,
    historyLimit,
    logger: silentLogger,
  });
}
