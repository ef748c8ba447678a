// How the PostgreSQL store assigns revisions in commit order: a counter row
// locked by every write transaction, against a transaction-level advisory lock
// around a sequence (and, for scale, a bare sequence, which does NOT keep
// commit order). 4 writers x 400 one-row transactions each.
//
//   KDS_TEST_DATABASE_URL=postgres://... node --import ./bench/loader/register.mjs bench/revision-lock.ts
import postgres, { type TransactionSql } from "postgres";

const url = process.env.KDS_TEST_DATABASE_URL;
if (url === undefined || url === "")
  throw new Error("set KDS_TEST_DATABASE_URL to a PostgreSQL server");
const schema = `kds_revbench_${process.pid}`;
const admin = postgres(url, { onnotice: () => undefined });
await admin.unsafe(`CREATE SCHEMA ${schema};
  CREATE TABLE ${schema}.state (id boolean PRIMARY KEY, rev bigint NOT NULL); INSERT INTO ${schema}.state VALUES (true, 0);
  CREATE SEQUENCE ${schema}.seq; CREATE TABLE ${schema}.log (rev bigint PRIMARY KEY, v text);`);
const writers = 4;
const each = 400;

async function run(name: string, body: (tx: TransactionSql) => Promise<void>): Promise<void> {
  await admin.unsafe(`TRUNCATE ${schema}.log`);
  const clients = Array.from({ length: writers }, () =>
    postgres(url as string, {
      max: 1,
      onnotice: () => undefined,
      connection: { search_path: schema },
    }),
  );
  const t = performance.now();
  await Promise.all(
    clients.map(async (sql) => {
      for (let i = 0; i < each; i++) await sql.begin(body);
    }),
  );
  console.log(
    `${name}: ${Math.round((writers * each) / ((performance.now() - t) / 1000))} transactions/s`,
  );
  await Promise.all(clients.map((c) => c.end()));
}

try {
  for (let round = 0; round < 2; round++) {
    await run("counter row (the store's choice)", async (tx) => {
      const [r] = await tx`UPDATE state SET rev = rev + 1 WHERE id RETURNING rev`;
      await tx`INSERT INTO log VALUES (${r?.rev as string}, 'x')`;
    });
    await run("advisory lock + sequence", async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(42)`;
      const [r] = await tx`SELECT nextval('seq') AS rev`;
      await tx`INSERT INTO log VALUES (${r?.rev as string}, 'x')`;
    });
    await run("bare sequence (no commit order; for scale)", async (tx) => {
      const [r] = await tx`SELECT nextval('seq') AS rev`;
      await tx`INSERT INTO log VALUES (${r?.rev as string}, 'x')`;
    });
  }
} finally {
  await admin.unsafe(`DROP SCHEMA ${schema} CASCADE`);
  await admin.end();
}
