// The stores the conformance suite runs against, each able to hand out fresh
// stores (and, for the PostgreSQL ones, more instances on the same data).
import { create } from "@bufbuild/protobuf";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  startEmbeddedPostgres,
  type EmbeddedPostgres,
} from "../../src/adapters/node/embedded-postgres.ts";
import {
  DataplaneSpecSchema,
  MeshSpecSchema,
  TrafficPolicySpecSchema,
  exampleTypes,
} from "../../examples/example-kinds/index.ts";
import { silentLogger } from "../../src/log.ts";
import type { ResourceInput, ResourceStore, StoreChange } from "../../src/store/contract.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { PostgresStore, type PostgresStoreOptions } from "../../src/store/postgres.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { freshDatabase, type TestDatabase } from "../support/postgres.ts";
import { TEST_SERVER_SETTINGS } from "../support/postgres-settings.ts";

export const types = createTypeRegistry(exampleTypes);

export const mesh = (
  name: string,
  description = "",
  labels: Record<string, string> = {},
): ResourceInput => ({ kind: "Mesh", name, labels, spec: create(MeshSpecSchema, { description }) });
export const policy = (m: string, name: string, timeoutMs = 1000): ResourceInput => ({
  kind: "TrafficPolicy",
  mesh: m,
  name,
  spec: create(TrafficPolicySpecSchema, { timeoutMs }),
});
export const dataplane = (
  m: string,
  name: string,
  labels: Record<string, string> = {},
): ResourceInput => ({
  kind: "Dataplane",
  mesh: m,
  name,
  labels,
  spec: create(DataplaneSpecSchema, { address: "10.0.0.1", service: "web", port: 8080 }),
});

/** Options a case may ask of a fresh store. */
export interface StoreOptions {
  readonly historyLimit?: number;
  /** PostgreSQL only: the safety-net poll (a huge value proves NOTIFY or reconnect did the waking). */
  readonly pollIntervalMs?: number;
}

/** One place a fresh store lives, with ways to open more instances on it. */
export interface StoreSpace {
  /** The first store. */
  readonly store: ResourceStore;
  /** Another instance on the same data (the same object for memory). */
  peer(options?: StoreOptions): Promise<ResourceStore>;
  /** PostgreSQL only: where the data lives. */
  readonly postgres?: { readonly url: string; readonly schema: string };
  /** Closes every instance opened here. */
  close(): Promise<void>;
}

/** A store implementation under test. */
export interface StoreVariant {
  readonly name: "memory" | "embedded" | "postgres";
  /** Prepares the backing server (beforeAll). */
  setup(): Promise<void>;
  /** A fresh, empty store. */
  fresh(options?: StoreOptions): Promise<StoreSpace>;
  /** Releases the backing server (afterAll). */
  teardown(): Promise<void>;
}

export const memoryVariant: StoreVariant = {
  name: "memory",
  setup: async () => undefined,
  fresh: async (options = {}) => {
    const store = new InMemoryStore(types, { historyLimit: options.historyLimit });
    return { store, peer: async () => store, close: async () => undefined };
  },
  teardown: async () => undefined,
};

let schemaCounter = 0;

/** PostgreSQL-backed variants: a fresh schema per store space, on a database the variant provides. */
function postgresVariant(
  name: "embedded" | "postgres",
  provide: () => Promise<{ url: string; release(): Promise<void> }>,
): StoreVariant {
  let db: { url: string; release(): Promise<void> } | undefined;
  return {
    name,
    setup: async () => {
      db = await provide();
    },
    fresh: async (options = {}) => {
      if (db === undefined) throw new Error("setup() first");
      const url = db.url;
      const schema = `conf_${process.pid}_${++schemaCounter}`;
      const opened: PostgresStore[] = [];
      const open = async (o: StoreOptions): Promise<PostgresStore> => {
        const settings: PostgresStoreOptions = {
          url,
          schema,
          maxConnections: 3,
          logger: silentLogger,
          historyLimit: o.historyLimit,
          pollIntervalMs: o.pollIntervalMs,
        };
        const store = await PostgresStore.open(types, settings);
        opened.push(store);
        return store;
      };
      const store = await open(options);
      return {
        store,
        peer: (o = options) => open(o),
        postgres: { url, schema },
        close: async () => {
          await Promise.all(opened.map((s) => s.close()));
        },
      };
    },
    teardown: async () => {
      await db?.release();
    },
  };
}

/** The store on a PostgreSQL server: KDS_TEST_DATABASE_URL's, or the run's embedded one. */
export const postgresServerVariant: StoreVariant = postgresVariant("postgres", async () => {
  const database: TestDatabase = await freshDatabase();
  return { url: database.url, release: () => database.drop() };
});

/** The store on an embedded PostgreSQL this file starts itself, through the launcher the CLI uses. */
export const embeddedVariant: StoreVariant = postgresVariant("embedded", async () => {
  const dir = await mkdtemp(join(tmpdir(), "kds-conformance-"));
  let server: EmbeddedPostgres;
  try {
    server = await startEmbeddedPostgres({
      dataDir: dir,
      createSystemUser: true,
      settings: TEST_SERVER_SETTINGS,
    });
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: server.url,
    release: async () => {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

/**
 * Reads `store.watch(from)` until `done` says so (or `limit` changes), then
 * ends the watch. Bounded by the test's timeout.
 */
export async function collect(
  store: ResourceStore,
  from: number,
  done: (changes: readonly StoreChange[]) => boolean,
  options: {
    kinds?: string[];
    limit?: number;
    onChange?: (change: StoreChange) => Promise<void> | void;
  } = {},
): Promise<StoreChange[]> {
  const controller = new AbortController();
  const changes: StoreChange[] = [];
  const limit = options.limit ?? 100_000;
  if (done(changes)) return changes;
  for await (const change of store.watch(from, {
    signal: controller.signal,
    kinds: options.kinds,
  })) {
    changes.push(change);
    await options.onChange?.(change);
    if (done(changes) || changes.length >= limit) break;
  }
  controller.abort();
  return changes;
}

/** A change's kind/mesh/name, for compact assertions. */
export function describeChange(c: StoreChange): string {
  return c.op === "put"
    ? `put ${c.resource.kind} ${c.resource.meta.mesh}/${c.resource.meta.name}@${c.revision}`
    : `delete ${c.ref.kind} ${c.ref.mesh}/${c.ref.name}@${c.revision}`;
}

/**
 * Makes the change-log insert of resource `name` fail in schema `schema`
 * (`injected fault at <name>`), inside the write's transaction and after its
 * resource rows were written; returns what removes the fault.
 */
export async function faultOnChangeLog(
  sql: { unsafe(query: string): Promise<unknown> },
  schema: string,
  name: string,
): Promise<() => Promise<void>> {
  await sql.unsafe(`
    CREATE FUNCTION "${schema}".kds_test_fault() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'injected fault at %', NEW.name; END $$;
    CREATE TRIGGER kds_test_fault BEFORE INSERT ON "${schema}".kds_changes
      FOR EACH ROW WHEN (NEW.name = '${name}') EXECUTE FUNCTION "${schema}".kds_test_fault();`);
  return async () => {
    await sql.unsafe(`DROP TRIGGER kds_test_fault ON "${schema}".kds_changes`);
  };
}
