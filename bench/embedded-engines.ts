// Which embedded engine backs the CLI's durable default: a PostgreSQL server
// from the npm-shipped binaries (what kds-mux uses) against PGlite (WASM, in
// process). Not part of `npm run bench`: PGlite is not a dependency.
//
//   npm install --no-save @electric-sql/pglite@0.5.16
//   node --import ./bench/loader/register.mjs bench/embedded-engines.ts [resources=10000]
//
// Prints start times and the time to write `resources` rows the way the store
// does (upserts of protobuf bytes + jsonb labels, in transactions of 1,000).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEmbeddedPostgres } from "../src/adapters/node/embedded-postgres.ts";
import { silentLogger } from "../src/log.ts";
import { PostgresStore } from "../src/store/postgres.ts";
import { MIGRATIONS } from "../src/store/postgres/migrations.ts";
import { createTypeRegistry } from "../src/kinds/builtin-types.ts";
import { create } from "@bufbuild/protobuf";
import { MeshSpecSchema, exampleTypes } from "../examples/example-kinds/index.ts";

const count = Number(process.argv[2] ?? 10_000);
const batch = 1_000;
const mesh = (name: string) => ({
  kind: "Mesh",
  name,
  spec: create(MeshSpecSchema, { description: "test" }),
});
const ms = (t: number): number => Math.round(performance.now() - t);

async function embedded(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "kds-engines-"));
  try {
    let t = performance.now();
    let server = await startEmbeddedPostgres({ dataDir: dir, createSystemUser: true });
    const firstStart = ms(t);
    await server.stop();
    t = performance.now();
    server = await startEmbeddedPostgres({ dataDir: dir, createSystemUser: true });
    const restart = ms(t);
    const types = createTypeRegistry(exampleTypes);
    const store = await PostgresStore.open(types, { url: server.url, logger: silentLogger });
    t = performance.now();
    for (let i = 0; i < count; i += batch) {
      await store.apply(
        Array.from({ length: Math.min(batch, count - i) }, (_, j) => ({
          op: "put" as const,
          input: mesh(`m-${i + j}`),
        })),
      );
    }
    const write = ms(t);
    t = performance.now();
    const listed = (await store.list("Mesh")).resources.length;
    const list = ms(t);
    await store.close();
    await server.stop();
    console.log(
      `embedded-postgres: first start (initdb + start) ${firstStart} ms, restart ${restart} ms, ${count} puts in batches of ${batch}: ${write} ms (${Math.round(count / (write / 1000))}/s), list ${listed}: ${list} ms`,
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function pglite(): Promise<void> {
  let PGlite: new (
    dir: string,
  ) => {
    exec(sql: string): Promise<unknown>;
    query(sql: string, params: unknown[]): Promise<{ rows: unknown[] }>;
    close(): Promise<void>;
    waitReady: Promise<void>;
  };
  try {
    ({ PGlite } = (await import("@electric-sql/pglite" as string)) as { PGlite: typeof PGlite });
  } catch {
    console.log("PGlite: not installed (npm install --no-save @electric-sql/pglite@0.5.16)");
    return;
  }
  const dir = await mkdtemp(join(tmpdir(), "kds-engines-pglite-"));
  try {
    let t = performance.now();
    let db = new PGlite(join(dir, "db"));
    await db.waitReady;
    const firstOpen = ms(t);
    await db.exec((MIGRATIONS[0] as { sql: string }).sql);
    await db.close();
    t = performance.now();
    db = new PGlite(join(dir, "db"));
    await db.waitReady;
    const reopen = ms(t);
    const spec = new Uint8Array([10, 4, 116, 101, 115, 116]);
    t = performance.now();
    for (let i = 0; i < count; i += batch) {
      const n = Math.min(batch, count - i);
      const names = Array.from({ length: n }, (_, j) => `m-${i + j}`);
      await db.query(
        `INSERT INTO kds_resources (kind, mesh, name, labels, spec, version, created_at, modified_at)
         SELECT 'Mesh', '', n, '{}'::jsonb, $2::bytea, 1, now(), now() FROM unnest($1::text[]) AS n
         ON CONFLICT (kind, mesh, name) DO UPDATE SET spec = excluded.spec, version = excluded.version`,
        [names, spec],
      );
      await db.query(
        `INSERT INTO kds_changes (revision, op, kind, mesh, name, labels, spec) SELECT ${i} + ordinality, 'put', 'Mesh', '', n, '{}'::jsonb, $2::bytea FROM unnest($1::text[]) WITH ORDINALITY AS n`,
        [names, spec],
      );
    }
    const write = ms(t);
    t = performance.now();
    const listed = (
      await db.query(
        "SELECT kind, mesh, name, labels::text, spec FROM kds_resources WHERE kind = 'Mesh' ORDER BY mesh, name",
        [],
      )
    ).rows.length;
    const list = ms(t);
    await db.close();
    console.log(
      `PGlite: first open ${firstOpen} ms, reopen ${reopen} ms, ${count} upserts in statements of ${batch}: ${write} ms (${Math.round(count / (write / 1000))}/s), list ${listed}: ${list} ms (one connection, no LISTEN between processes, another driver: not the PostgreSQL store's code path)`,
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await embedded();
await pglite();
