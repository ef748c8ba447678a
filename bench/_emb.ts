import { startEmbeddedPostgres } from "../src/adapters/node/embedded-postgres.ts";
import { consoleLogger } from "../src/log.ts";
import postgres from "postgres";
const dir = process.argv[2] ?? "/tmp/kds-emb-smoke";
let t = performance.now();
const pg = await startEmbeddedPostgres({ dataDir: dir, logger: consoleLogger("info") });
console.log("start ms", Math.round(performance.now() - t), pg.url.replace(/:[0-9a-f]{48}@/, ":***@"));
const sql = postgres(pg.url, { onnotice() {} });
console.log(await sql`select version()`);
await sql.end();
try { await startEmbeddedPostgres({ dataDir: dir }); } catch (e) { console.log("second:", (e as Error).message); }
t = performance.now(); await pg.stop(); console.log("stop ms", Math.round(performance.now() - t));
