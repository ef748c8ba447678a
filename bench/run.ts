// npm run bench [-- --quick]: every scenario against its baseline in one run,
// reported as ratios. Prints a markdown report and writes JSON to
// bench/results/. --quick finishes in under a minute (smoke; no targets).
// Exits 1 when any planned figure is missing or not a finite number
// (bench/figures.ts), so the smoke run in `npm test` checks the report too.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { muxEcho, rawConnectEcho, grpcJsEcho, type EchoResult } from "./echo.ts";
import { syncBench, type SyncResult } from "./sync.ts";
import type { FanoutResult } from "./fanout.ts";
import { inFreshProcess } from "./fresh.ts";
import type { MemoryResult } from "./memory.ts";
import { figureProblems } from "./figures.ts";
import { storesBench, type StoreResult } from "./stores.ts";

const quick = process.argv.includes("--quick");
const quiet = process.argv.includes("--quiet");
const pkg = (name: string): string => (JSON.parse(readFileSync(new URL(`../node_modules/${name}/package.json`, import.meta.url), "utf8")) as { version: string }).version;
const started = performance.now();
const log = (line: string): void => void process.stderr.write(`${line}\n`);

const plan = quick
  ? { echo: [[100, 3_000], [1024, 2_000], [65_536, 200]], sync: [2_000], fanout: [20], rounds: 3, memory: 50_000, stores: [2_000] }
  : { echo: [[100, 40_000], [1024, 30_000], [65_536, 3_000]], sync: [1_000, 10_000, 100_000], fanout: [10, 100, 1000], rounds: 10, memory: 1_000_000, stores: [10_000, 100_000] };
// Stores: a PostgreSQL server only with KDS_TEST_DATABASE_URL; the quick run smokes the SQL path once
// (on that server, else on the embedded engine) and the full run measures every store.
const serverUrl = process.env.KDS_TEST_DATABASE_URL ?? "";
const storeKinds: StoreResult["store"][] = quick ? ["memory", serverUrl !== "" ? "postgres" : "embedded"] : ["memory", "embedded", "postgres"];

const echo: { size: number; raw: EchoResult; mux: EchoResult; grpcJs: EchoResult }[] = [];
for (const [size, count] of plan.echo as [number, number][]) {
  log(`echo ${size} B x ${count}`);
  const raw = await rawConnectEcho(size, count);
  const mux = await muxEcho(size, count);
  const grpcJs = await grpcJsEcho(size, count);
  echo.push({ size, raw, mux, grpcJs });
}

const sync: SyncResult[] = [];
for (const n of plan.sync) {
  for (const mode of ["delta", "sotw"] as const) {
    log(`sync ${n} ${mode}`);
    const timed = await syncBench(n, mode, false);
    const counted = await syncBench(n, mode, true);
    sync.push({ ...timed, initialBytes: counted.initialBytes, resumeBytes: counted.resumeBytes, resumeResources: counted.resumeResources });
  }
}

const fanout: FanoutResult[] = [];
for (const zones of plan.fanout) {
  log(`fan-out ${zones} zones`);
  fanout.push(await inFreshProcess<FanoutResult>(new URL("./fanout.ts", import.meta.url).href, [zones, plan.rounds]));
}

const stores: StoreResult[] = [];
for (const n of plan.stores) {
  log(`stores ${n} resources: ${storeKinds.join(", ")}`);
  stores.push(...(await storesBench(n, storeKinds)));
}

log(`memory ${plan.memory} messages`);
const memory = await inFreshProcess<MemoryResult>(new URL("./memory.ts", import.meta.url).href, [plan.memory]);

const fmt = (n: number, digits = 0): string => n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
const lines: string[] = [];
lines.push(`# kds-mux benchmark${quick ? " (quick smoke run: not for comparison)" : ""}`);
lines.push("");
lines.push(`Machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}, ${fmt(totalmem() / 2 ** 30)} GiB; Node ${process.version}; @connectrpc/connect ${pkg("@connectrpc/connect")}, @connectrpc/connect-node ${pkg("@connectrpc/connect-node")}, @bufbuild/protobuf ${pkg("@bufbuild/protobuf")}, @grpc/grpc-js ${pkg("@grpc/grpc-js")}.`);
lines.push("");
lines.push("Every Connect client here passes `acceptCompression: []`: connect-node compresses by default (gzip/br above 1 KiB), which on loopback costs 3-8x throughput with random payloads, and grpc-js does not compress by default.");
lines.push("");
lines.push("## Throughput: one logical mux stream vs raw Connect vs grpc-js (gRPC over h2c, echo, random payloads)");
lines.push("");
lines.push("| payload | raw Connect msg/s | mux msg/s | grpc-js msg/s | mux / raw | mux / grpc-js | mux MB/s |");
lines.push("|---:|---:|---:|---:|---:|---:|---:|");
for (const e of echo) {
  lines.push(`| ${e.size} B | ${fmt(e.raw.msgPerSec)} | ${fmt(e.mux.msgPerSec)} | ${fmt(e.grpcJs.msgPerSec)} | ${fmt(e.mux.msgPerSec / e.raw.msgPerSec, 2)}x | ${fmt(e.mux.msgPerSec / e.grpcJs.msgPerSec, 2)}x | ${fmt(e.mux.mbPerSec, 1)} |`);
}
lines.push("");
lines.push("## Sync global -> zone over gRPC: initial, then resume after a reconnect with 0.1% changed");
lines.push("");
lines.push("| resources | mode | initial | initial bytes | resume (changed) | resume | resume bytes | resources resent |");
lines.push("|---:|---|---:|---:|---:|---:|---:|---:|");
for (const s of sync) {
  lines.push(`| ${fmt(s.resources)} | ${s.mode} | ${fmt(s.initialMs)} ms | ${fmt(s.initialBytes / 1024)} KiB | ${fmt(s.resumeChanged)} | ${fmt(s.resumeMs)} ms | ${fmt(s.resumeBytes / 1024, 1)} KiB | ${fmt(s.resumeResources)} |`);
}
lines.push("");
lines.push("## Fan-out: zones in a second process, one HTTP/2 connection each (global in a fresh process)");
lines.push("");
lines.push("| zones | all connected and synced | global heap / zone | global RSS / zone | change to all zones p50 | p99 |");
lines.push("|---:|---:|---:|---:|---:|---:|");
for (const f of fanout) {
  lines.push(`| ${fmt(f.zones)} | ${fmt(f.connectMs)} ms | ${fmt(f.heapPerZoneKiB)} KiB | ${fmt(f.rssPerZoneKiB)} KiB | ${fmt(f.p50Ms, 1)} ms | ${fmt(f.p99Ms, 1)} ms |`);
}
lines.push("");
lines.push("## Stores: write (apply batches of 1,000), list everything, watch catch-up from revision 0");
lines.push("");
lines.push(`PostgreSQL: ${serverUrl !== "" ? "the server at KDS_TEST_DATABASE_URL (a fresh schema)" : "not measured (set KDS_TEST_DATABASE_URL)"}; embedded: PostgreSQL 18 from the npm-shipped binaries in a fresh data dir, the CLI's default.`);
lines.push("");
lines.push("| store | resources | writes/s | list all | watch catch-up changes/s |");
lines.push("|---|---:|---:|---:|---:|");
for (const s of stores) lines.push(`| ${s.store} | ${fmt(s.resources)} | ${fmt(s.writesPerSec)} | ${fmt(s.listMs)} ms | ${fmt(s.catchUpPerSec)} |`);
lines.push("");
lines.push(`## Memory over a long session (${fmt(memory.messages)} messages in ${fmt(memory.seconds, 1)} s, after GC, fresh process)`);
lines.push("");
lines.push("| messages | heap MiB | RSS MiB |");
lines.push("|---:|---:|---:|");
for (const s of memory.samples) lines.push(`| ${fmt(s.messages)} | ${fmt(s.heapMiB, 1)} | ${fmt(s.rssMiB, 1)} |`);
lines.push("");
lines.push(`Heap growth ${fmt(memory.heapGrowthMiB, 2)} MiB, RSS growth ${fmt(memory.rssGrowthMiB, 1)} MiB. Total run ${fmt((performance.now() - started) / 1000, 1)} s.`);

const report = lines.join("\n");
if (quiet) console.log(`bench ${quick ? "smoke" : "run"}: every scenario ran (${fmt((performance.now() - started) / 1000, 1)} s); report in bench/results/${quick ? "quick" : "full"}-latest.md`);
else console.log(report);
mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
const stamp = new Date().toISOString().replace(/[:.]/g, "-");
const json = { quick, node: process.version, connect: pkg("@connectrpc/connect"), echo, sync, fanout, stores, memory };
writeFileSync(new URL(`./results/${quick ? "quick" : "full"}-${stamp}.json`, import.meta.url), JSON.stringify(json, null, 2));
writeFileSync(new URL(`./results/${quick ? "quick" : "full"}-latest.md`, import.meta.url), `${report}\n`);
const problems = figureProblems(
  { echoSizes: plan.echo.map(([size]) => size as number), syncResources: plan.sync, fanoutZones: plan.fanout },
  { echo, sync, fanout, memory },
);
// Every planned store row, each figure a positive number ("postgres" only with a server to run on).
for (const n of plan.stores) {
  for (const kind of storeKinds) {
    if (kind === "postgres" && serverUrl === "") continue;
    const row = stores.find((r) => r.store === kind && r.resources === n);
    if (row === undefined) problems.push(`stores ${kind} ${n}: no result`);
    else for (const figure of ["writesPerSec", "listMs", "catchUpPerSec"] as const) if (!(Number.isFinite(row[figure]) && row[figure] > 0)) problems.push(`stores ${kind} ${n}: ${figure} is ${row[figure]}`);
  }
}
if (problems.length > 0) {
  log(`bench: ${problems.length} figure(s) missing or not finite numbers:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
if (quiet) console.log(`bench: all figures present and finite (${echo.length} echo, ${sync.length} sync, ${fanout.length} fan-out, ${stores.length} store, ${memory.samples.length} memory samples)`);
process.exit(0);
