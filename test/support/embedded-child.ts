// A process that holds an embedded PostgreSQL on a data dir (argv[2]) until
// SIGTERM: prints "ready <port>", or "error <code>: <message>" and exits 2.
import { startEmbeddedPostgres } from "../../src/adapters/node/embedded-postgres.ts";
import { KdsError } from "../../src/errors.ts";

const dataDir = process.argv[2];
if (dataDir === undefined) throw new Error("usage: embedded-child.ts DATA_DIR");
try {
  const server = await startEmbeddedPostgres({ dataDir, createSystemUser: true });
  process.stdout.write(`ready ${server.port}\n`);
  process.once("SIGTERM", () => {
    void server.stop().then(() => process.exit(0));
  });
  setInterval(() => undefined, 1 << 30);
} catch (error) {
  process.stdout.write(
    `error ${KdsError.is(error) ? error.code : "?"}: ${(error as Error).message}\n`,
  );
  process.exit(2);
}
