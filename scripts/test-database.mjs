// Prints the URL of the machine's PostgreSQL test server when it answers a
// query within 5 s (exit 0), or nothing (exit 1). .ci/run exports it as
// KDS_TEST_DATABASE_URL; without it the tests start an embedded PostgreSQL.
import postgres from "postgres";

const url = process.argv[2] ?? "postgres://postgres@127.0.0.1:5432/test";
const sql = postgres(url, { max: 1, connect_timeout: 5, onnotice: () => undefined });
try {
  await sql`SELECT 1`;
  process.stdout.write(`${url}\n`);
  process.exitCode = 0;
} catch (error) {
  process.stderr.write(`no PostgreSQL test server at ${new URL(url).host} (${error instanceof Error ? error.message : String(error)}); tests will start an embedded one\n`);
  process.exitCode = 1;
} finally {
  await sql.end({ timeout: 1 });
}
