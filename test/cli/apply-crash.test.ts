// Issue 24, item 7, as it was found: a real `kds-mux global` on PostgreSQL is
// SIGKILLed at varied moments while a 50-resource admin apply is in flight.
// Before, a crash committed a part (7 of 50 in one run, 47 in another) while
// the caller saw an error. Now every kill leaves 0 or 50 of that call's
// resources, never a part, and the caller's error says it is all or none.
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { apply } from "../../src/cli/resource-commands.ts";
import { KdsError } from "../../src/errors.ts";
import { freshDatabase, type TestDatabase } from "../support/postgres.ts";
import { KdsProcess } from "./process.ts";

/** Kills: a bounded number; half at moments spread over the call's measured life, half when the database shows the apply's writes. */
const KILLS = 12;
const RESOURCES = 50;

const databases: TestDatabase[] = [];
afterAll(async () => {
  for (const db of databases) await db.drop();
});

/** A YAML stream of `RESOURCES` Meshes named `<prefix>-<n>`. */
function batch(prefix: string): { name: string; text: string }[] {
  const docs = Array.from(
    { length: RESOURCES },
    (_, i) =>
      `type: Mesh\nname: ${prefix}-${i}\nspec:\n  description: resource ${i} of ${prefix}\n`,
  );
  return [{ name: `${prefix}.yaml`, text: docs.join("---\n") }];
}

/**
 * Polls (tightly, up to `timeoutMs`) until a backend of this database other
 * than the poller's is running a statement on the resource or change tables
 * of a write: the apply's transaction is open. Returns whether it saw one.
 */
async function writing(sql: postgres.Sql, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const rows = await sql`
      SELECT 1 FROM pg_stat_activity
      WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'
        AND (query ILIKE '%INSERT INTO kds_resources%' OR query ILIKE '%INSERT INTO kds_changes%' OR query ILIKE '%FROM kds_state WHERE id FOR UPDATE%' OR query ILIKE '%SELECT kind, mesh, name, version%')`;
    if (rows.length > 0) return true;
  }
  return false;
}

async function startGlobal(url: string): Promise<{ global: KdsProcess; admin: string }> {
  const global = new KdsProcess([
    "global",
    "--listen",
    "127.0.0.1:0",
    "--admin-listen",
    "127.0.0.1:0",
    "--store",
    url,
  ]);
  const admin = (
    await global.waitFor(/admin API on (http:\/\/127\.0\.0\.1:\d+)/, 90_000)
  )[1] as string;
  return { global, admin };
}

describe("kds-mux global SIGKILLed during a 50-resource apply", () => {
  it("leaves 0 or 50 of the call's resources every time, never a part", {
    timeout: 600_000,
  }, async () => {
    const db = await freshDatabase();
    databases.push(db);
    const sql = postgres(db.url, { max: 1, onnotice: () => undefined });
    const counts: string[] = [];
    try {
      // How long a 50-resource apply takes a freshly started global here (on a migrated database, as every killed one has):
      // the timed kills span 0 to 1.5 times that, so some land before the call arrives and some after its commit, on a quiet
      // machine or a loaded one.
      let spreadMs = 0;
      for (const prefix of ["first-start", "measured"]) {
        const { global, admin } = await startGlobal(db.url);
        try {
          const started = performance.now();
          expect(await apply(admin, batch(prefix))).toMatch(
            /all 50 resources applied together \(an apply is all or nothing\)/,
          );
          spreadMs = Math.round((performance.now() - started) * 1.5);
        } finally {
          await global.stop();
        }
      }
      for (let i = 0; i < KILLS; i++) {
        const { global, admin } = await startGlobal(db.url);
        const prefix = `crash-${i}`;
        const call = apply(admin, batch(prefix)).then(
          (out) => ({ ok: true as const, out }),
          (error: unknown) => ({ ok: false as const, error }),
        );
        let when: string;
        if (i % 2 === 0) {
          // Even kills at a moment spread over the call's life: from before it reaches the global to past its commit.
          const delayMs = Math.round((spreadMs * i) / (KILLS - 2));
          await new Promise((r) => setTimeout(r, delayMs));
          when = `${delayMs} ms in`;
        } else {
          // Odd kills as soon as the database shows the global writing resources: inside the apply's transaction.
          when = (await writing(sql, 10_000)) ? "mid-transaction" : "never seen writing";
        }
        global.child.kill("SIGKILL");
        await global.exited;
        const outcome = await call;
        const [row] =
          await sql`SELECT count(*)::int AS n FROM kds_resources WHERE kind = 'Mesh' AND name LIKE ${`${prefix}-%`}`;
        const n = (row as { n: number }).n;
        counts.push(`${when}: ${n} (${outcome.ok ? "call succeeded" : "call failed"})`);
        expect([0, RESOURCES], `a kill ${when} left ${n} of ${RESOURCES}`).toContain(n);
        if (outcome.ok) expect(n).toBe(RESOURCES);
        else {
          // The caller is told the batch is all or none, and how to find out which.
          expect(outcome.error).toBeInstanceOf(KdsError);
          expect((outcome.error as KdsError).message).toMatch(
            /either all or none of the 50 resources were applied, never a part: run `kds-mux get` to see which/,
          );
        }
      }
      console.log(
        `50-resource apply, PostgreSQL global SIGKILLed ${KILLS} times; resources of the call left: ${counts.join("; ")}`,
      );
    } finally {
      await sql.end({ timeout: 5 });
    }
  });
});
