/**
 * The PostgreSQL store's schema, as numbered migrations applied in order at
 * start. All of them run in ONE transaction guarded by a transaction-level
 * advisory lock (per schema), so two instances starting at once apply each
 * migration exactly once; running them again changes nothing. A database
 * whose schema is newer than this code knows is refused, not touched.
 *
 * @module
 */
import type { TransactionSql } from "postgres";
import { KdsError } from "../../errors.ts";
import type { Runner } from "./guard.ts";

/** One schema change. Versions start at 1 and never change once released. */
export interface Migration {
  /** Its number: migrations run in increasing order, each once. */
  readonly version: number;
  /** What it does, recorded beside the version. */
  readonly description: string;
  /** The statements, run in the migration transaction with the store's schema on the search path. */
  readonly sql: string;
}

/** Every migration this code knows, oldest first. */
export const MIGRATIONS: readonly Migration[] = Object.freeze([
  {
    version: 1,
    description: "resources, change log and revision counter",
    sql: `
      -- One row: the store's revision (the last one assigned) and how far the change log was compacted.
      -- Every write transaction locks this row first, so revisions are assigned in commit order.
      CREATE TABLE kds_state (
        id boolean PRIMARY KEY DEFAULT true CHECK (id),
        revision bigint NOT NULL,
        compacted_through bigint NOT NULL
      );
      INSERT INTO kds_state (id, revision, compacted_through) VALUES (true, 0, 0);

      -- Names are ASCII ([A-Za-z0-9._-]); the C collation sorts them like JavaScript does.
      CREATE TABLE kds_resources (
        kind text COLLATE "C" NOT NULL,
        mesh text COLLATE "C" NOT NULL,
        name text COLLATE "C" NOT NULL,
        labels jsonb NOT NULL,
        spec bytea NOT NULL,
        version bigint NOT NULL,
        created_at timestamptz NOT NULL,
        modified_at timestamptz NOT NULL,
        PRIMARY KEY (kind, mesh, name)
      );
      CREATE INDEX kds_resources_labels ON kds_resources USING gin (labels jsonb_path_ops);

      -- Every write, in revision order: the resource as written, or a tombstone (op 'delete', no spec).
      CREATE TABLE kds_changes (
        revision bigint PRIMARY KEY,
        op text NOT NULL CHECK (op IN ('put', 'delete')),
        kind text NOT NULL,
        mesh text NOT NULL,
        name text NOT NULL,
        labels jsonb,
        spec bytea,
        created_at timestamptz,
        modified_at timestamptz
      );
    `,
  },
  {
    version: 2,
    description: "an index on each resource's zone label, for a zone's resources of one kind",
    sql: `
      -- A zone's resources of one kind: what a global reads of each zone when its session starts (one list per
      -- kind the zones send), and what it replaces. A lookup in this index whatever the table's statistics
      -- say (on a table filled since its last ANALYZE the planner scanned the whole kind, 20,000 rows for 2)
      -- and however many recent inserts wait in the GIN index's pending list (until a vacuum): 38 ms a list
      -- against 0.1 ms in a 10,000-zone restart storm, one list per zone and kind. list() adds the matching
      -- condition (labels ->> 'kds.io/zone') when its label filter names a zone.
      CREATE INDEX kds_resources_zone ON kds_resources (kind, (labels ->> 'kds.io/zone'));
    `,
  },
  {
    version: 3,
    description: "leases with a fencing revision, for replicas that elect one leader",
    sql: `
      -- One row per lease, kept after a term ends so the revision (the fencing token) only goes up.
      -- Expiry is judged by the server's clock_timestamp() alone (postgres/leases.ts).
      CREATE TABLE kds_leases (
        name text COLLATE "C" PRIMARY KEY,
        holder text NOT NULL,
        address text NOT NULL,
        revision bigint NOT NULL,
        expires_at timestamptz NOT NULL,
        acquired_at timestamptz NOT NULL,
        renewed_at timestamptz NOT NULL
      );
    `,
  },
]);

/** The newest schema version this code knows. */
export const SCHEMA_VERSION: number = MIGRATIONS.reduce((max, m) => Math.max(max, m.version), 0);

/** What the schema migration did when the store opened (`PostgresStore.migration`). */
export interface MigrationReport {
  /** The schema version before. */
  readonly from: number;
  /** The schema version now. */
  readonly to: number;
}

/**
 * Brings the schema `schema` up to {@link SCHEMA_VERSION} inside `tx` (the
 * caller's transaction, so a failure leaves nothing half-applied). Takes an
 * advisory lock first, so concurrent starts wait for each other. Throws
 * `store_unavailable` when the database's schema is newer than this code.
 */
export async function migrate(
  tx: TransactionSql,
  schema: string,
  where: string,
  migrations: readonly Migration[] = MIGRATIONS,
  run: Runner = (q) => q,
): Promise<MigrationReport> {
  // Two int4 keys: a constant for kds-mux, and the schema's hash.
  await run(tx`SELECT pg_advisory_xact_lock(1801741165, hashtext(${schema}))`);
  await run(tx.unsafe(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(schema)}`));
  await run(
    tx.unsafe(`CREATE TABLE IF NOT EXISTS ${quoteIdent(schema)}.kds_schema_migrations (
      version integer PRIMARY KEY,
      description text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`),
  );
  const [row] = await run(
    tx.unsafe<Array<{ v: number | null }>>(
      `SELECT max(version) AS v FROM ${quoteIdent(schema)}.kds_schema_migrations`,
    ),
  );
  const from = row?.v ?? 0;
  const known = migrations.reduce((max, m) => Math.max(max, m.version), 0);
  if (from > known) {
    throw new KdsError(
      "store_unavailable",
      `the database ${where} (schema "${schema}") is at schema version ${from}, but this kds-mux knows versions up to ${known}: ` +
        `a newer kds-mux wrote it. Run the newer kds-mux, or point this one at another database or schema; nothing was changed`,
    );
  }
  for (const m of [...migrations].sort((a, b) => a.version - b.version)) {
    if (m.version <= from) continue;
    await run(tx.unsafe(`SET LOCAL search_path TO ${quoteIdent(schema)}`));
    await run(tx.unsafe(m.sql));
    await run(
      tx.unsafe(
        `INSERT INTO ${quoteIdent(schema)}.kds_schema_migrations (version, description) VALUES ($1, $2)`,
        [m.version, m.description],
      ),
    );
  }
  return { from, to: Math.max(from, known) };
}

/** Schema names the store accepts: lower-case letters, digits and '_', starting with a letter or '_'. */
export const SCHEMA_NAME_PATTERN = /^[a-z_][a-z0-9_]{0,49}$/;

/** Quotes an identifier already checked against {@link SCHEMA_NAME_PATTERN}. */
export function quoteIdent(name: string): string {
  if (!SCHEMA_NAME_PATTERN.test(name))
    throw new KdsError(
      "invalid_argument",
      `"${name}" is not a valid schema name (lower-case letters, digits and '_')`,
    );
  return `"${name}"`;
}
