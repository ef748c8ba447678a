// The PostgreSQL store on whichever runtime runs this (Deno and Bun through
// test/runtime/contract.ts; Node through vitest's conformance suite): two
// instances, a write on one reaching a watch on the other through NOTIFY
// (polling off), and a consistent list. On KDS_TEST_DATABASE_URL's server
// (in a schema of its own, dropped after) or, without it, on an embedded
// PostgreSQL started through the same launcher the CLI uses.
import { create } from "@bufbuild/protobuf";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { startEmbeddedPostgres } from "../../src/adapters/node/embedded-postgres.ts";
import { MeshSpecSchema, exampleTypes } from "../../examples/example-kinds/index.ts";
import { silentLogger } from "../../src/log.ts";
import type { StoreChange } from "../../src/store/contract.ts";
import { PostgresStore } from "../../src/store/postgres.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { equal } from "../contract/harness.ts";
import type { Scenario } from "../contract/scenarios.ts";

const env =
  (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env ?? {};

async function withDatabase(body: (url: string, schema: string) => Promise<void>): Promise<void> {
  const schema = `kds_runtime_${Math.random().toString(36).slice(2, 10)}`;
  const server = env.KDS_TEST_DATABASE_URL;
  if (server !== undefined && server !== "") {
    try {
      await body(server, schema);
    } finally {
      const admin = postgres(server, { max: 1, onnotice: () => undefined });
      await admin.unsafe(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end({ timeout: 5 });
    }
    return;
  }
  const dir = await mkdtemp(join(tmpdir(), "kds-runtime-pg-"));
  try {
    const embedded = await startEmbeddedPostgres({ dataDir: dir, createSystemUser: true });
    try {
      await body(embedded.url, schema);
    } finally {
      await embedded.stop();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export const storeScenarios: Scenario[] = [
  {
    name: "PostgreSQL store: a write on one instance reaches another's watch through NOTIFY; list matches",
    run: () =>
      withDatabase(async (url, schema) => {
        const types = createTypeRegistry(exampleTypes);
        const a = await PostgresStore.open(types, {
          url,
          schema,
          maxConnections: 2,
          logger: silentLogger,
        });
        const b = await PostgresStore.open(types, {
          url,
          schema,
          maxConnections: 2,
          logger: silentLogger,
          pollIntervalMs: 3_600_000,
        });
        try {
          const controller = new AbortController();
          const seen: StoreChange[] = [];
          let first: () => void = () => undefined;
          const firstSeen = new Promise<void>((r) => (first = r));
          const watching = (async () => {
            for await (const change of b.watch(0, { signal: controller.signal })) {
              seen.push(change);
              first();
              if (seen.length === 3) controller.abort();
            }
          })();
          await a.put({
            kind: "Mesh",
            name: "one",
            spec: create(MeshSpecSchema, { description: "1" }),
          });
          await firstSeen; // b waits for a notification now
          await a.apply([
            { op: "put", input: { kind: "Mesh", name: "two", spec: create(MeshSpecSchema, {}) } },
            { op: "delete", kind: "Mesh", mesh: "", name: "one" },
          ]);
          await watching;
          equal(
            seen.map((c) => `${c.op}@${c.revision}`).join(" "),
            "put@1 put@2 delete@3",
            "the changes b watched",
          );
          const listed = await b.list("Mesh");
          equal(listed.revision, 3, "the list's revision");
          equal(listed.resources.map((r) => r.meta.name).join(","), "two", "the listed names");
        } finally {
          await Promise.all([a.close(), b.close()]);
        }
      }),
  },
];
