// Scale (issue 48): N global instances, each the CLI's `kds-mux global` in a
// process of its own, on one PostgreSQL server, and Z zones spread over them
// by the zones' own dial (every zone knows every instance and starts at
// instance i mod N, as `kds-mux zone --global URL1,URL2,...` fails over) and
// the instances' rebalancing. The zones are real ZoneControlPlanes, many per
// process (bench/fanout-zones.ts), each with its own HTTP/2 connection and
// mux stream, its own store and the default reconnect backoff; each holds
// `dataplanes` Dataplanes of its own. Measures, in one run:
//   - connect: from the zone processes starting to dial until every zone
//     mirrors the Mesh (cold: the instances hold no zone before);
//   - idle memory: every instance's heap and RSS after GC (bench/scale-probe.ts
//     answers inside each global), summed; heap growth per zone;
//   - one change to the Mesh applied through instance 0's admin API until
//     every zone's store has it: p50, p99, max per repetition; beside it, the
//     floor: the bytes of that change's mux frame (bench/floor-wire.ts) written
//     once to one plain node:http2 stream per zone, held by the same zone
//     processes, from a server in each instance's process (zone i's stream to
//     instance i mod N), until each stream has read them;
//   - PostgreSQL work per change: the statements of the store's database
//     (pg_stat_statements, where the server loads it; else the transactions
//     of pg_stat_database, xact_commit + xact_rollback, whose window then ends
//     11 s after the last change, as the server flushes a backend's counters
//     at most once a second and within 10 s of it going idle) and the NOTIFYs
//     on the store's channel (this process LISTENs and counts them), over all
//     the change rounds, minus the lower of the idle rates measured in a window
//     before and one after them (lease and status writes go on meanwhile),
//     per change; and the statements counted each only beyond its own idle
//     rate (statementsBeyondIdle, at least 0);
//   - failover: the last instance SIGKILLed with every zone connected, and at
//     once one more change through instance 0; the time from the kill until
//     every zone holds that change (so the killed instance's zones have a new
//     session on another instance and synced), and what was resent: the
//     resources the zones received beyond that one change plus those they
//     sent, over the resources the zones that opened a new session hold (both
//     directions), in percent.
//
//   npm run bench:scale -- [--instances 10] [--zones 100000] [--processes P]
//       [--rounds 5] [--dataplanes 1] [--connect-timeout 3600] [--dials 100]
//       [--heartbeat-interval 60] [--quick]
//       [--quiet] [--out FILE]
//
// Writes bench/results/scale-<start time>.json (or --out) and prints its
// table; exits 1 when a key is missing or not sane (bench/summary.ts rules).
// --quick: 1 warm-up round and a short idle window, for the smoke test
// (test/bench/scale.test.ts); its figures are not for comparison.
// KDS_BENCH_SCALE_PROFILE=<dir> (diagnostic): a V8 CPU profile of instance 0
// from the zones starting to dial until every zone holds the Mesh, into
// <dir>/global-0.connect.cpuprofile; for the zone processes' side over the same
// phase, KDS_BENCH_ZONE_CPU_PROFILE=<dir> with KDS_BENCH_ZONE_CPU_PROFILE_PHASE=connect
// (bench/fanout-zones.ts). With KDS_BENCH_SCALE_PROFILE_PHASE=idle, instance 0's
// profile covers the idle window instead (<dir>/global-0.idle.cpuprofile), and
// KDS_BENCH_SCALE_IDLE_SECONDS lengthens that window (default 15).
// The PostgreSQL server: KDS_BENCH_DATABASE_URL, else an embedded one
// (bench/bench-store.ts); a fresh database is created and dropped.
// Open files: each instance holds a socket per zone and each zone process one
// per zone, twice that with the floor beside them. `npm run bench:scale`
// raises the soft limit to the hard one first (`ulimit -n "$(ulimit -Hn)"`);
// when twice the zones of one instance do not fit it, the floor runs after the
// zones stopped, on the instances left after the failover.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { spawn, type ChildProcessByStdio } from "node:child_process";
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { create } from "@bufbuild/protobuf";
import postgres from "postgres";
import { MeshSpecSchema, exampleTypes } from "../examples/example-kinds/index.ts";
import { defaultConnectionCaps } from "../src/adapters/node/connection-limits.ts";
import { adminClient } from "../src/cli/admin-client.ts";
import { ZoneSpecSchema } from "../src/gen/kds/v1/resource_pb.ts";
import { ZONE_KIND, createTypeRegistry } from "../src/kinds/builtin-types.ts";
import { silentLogger } from "../src/log.ts";
import { PostgresStore } from "../src/store/postgres.ts";
import { embeddedUrl, stopEmbedded } from "./bench-store.ts";
import {
  askProbe,
  compileCli,
  startCliGlobal,
  stopCliGlobal,
  stopZoneProcesses,
  type CliGlobal,
} from "./cli-global.ts";
import { fdSoftLimit, within } from "./fanout.ts";
import { meshChangeFrame } from "./floor-wire.ts";
import { BENCH_LOADER, childNodeArgs } from "./fresh.ts";
import { cpuMark, cpuSecondsOf, otherCpus } from "./other-work.ts";
import { percentile } from "./percentile.ts";
import { SCALE_KEYS } from "./scale-keys.ts";
import { spreadOf, summaryProblems, type Spread } from "./summary.ts";

const { values: args } = parseArgs({
  options: {
    instances: { type: "string", default: "10" },
    zones: { type: "string", default: "100000" },
    processes: { type: "string" },
    rounds: { type: "string", default: "5" },
    dataplanes: { type: "string", default: "1" },
    "connect-timeout": { type: "string", default: "3600" },
    dials: { type: "string", default: "100" },
    "heartbeat-interval": { type: "string", default: "60" },
    quick: { type: "boolean", default: false },
    quiet: { type: "boolean", default: false },
    out: { type: "string" },
  },
});
const INSTANCES = Number(args.instances);
const ZONES = Number(args.zones);
const ROUNDS = Number(args.rounds);
const DATAPLANES = Number(args.dataplanes);
const QUICK = args.quick === true;
if (!(Number.isInteger(INSTANCES) && INSTANCES >= 2))
  throw new Error(
    `--instances must be a whole number of at least 2 (one is killed), got ${args.instances}`,
  );
if (!(Number.isInteger(ZONES) && ZONES >= INSTANCES))
  throw new Error(`--zones must be a whole number of at least --instances, got ${args.zones}`);
if (!(Number.isInteger(ROUNDS) && ROUNDS >= 1))
  throw new Error(`--rounds must be at least 1, got ${args.rounds}`);
/**
 * Zones per zone process: 10,000 at most, and twice them must fit the open
 * files (the floor's streams). Each zone process costs about 100 MiB before
 * its first zone, and 100,000 zones with the instances come close to this
 * machine's 24 GiB: fewer, larger processes leave more room.
 */
const FD_LIMIT = fdSoftLimit();
const PROCESSES = Number(
  args.processes ?? Math.max(1, Math.ceil(ZONES / Math.min(10_000, (FD_LIMIT - 1_000) / 2))),
);
const CONNECT_TIMEOUT_MS = Number(args["connect-timeout"]) * 1000;
/**
 * Zones of one zone process dialing (started, not yet synced) at once. At 500 on a loaded 2-core
 * machine (load 46) a zone process was too slow to send its hello within the instances' 5 s
 * unauthenticated timeout for about a third of its dials, each then waiting out its backoff.
 */
const DIALS = Number(args.dials);
/**
 * The heartbeat interval of instances and zones, in s (`--heartbeat-interval`
 * of both; the timeout is four of them). Every ping wakes both sides: with the
 * session's default 15 s, 4,000 idle zones on 2 instances cost 20-31 µs of
 * the instances' CPU and 14-20 µs of the zone processes' per zone and second,
 * against 12 and 7.5 µs with 60 s, so 100,000 zones at 15 s keep this
 * machine's 2 cores busy with heartbeats alone.
 */
const HEARTBEAT_S = Number(args["heartbeat-interval"]);
if (!(Number.isInteger(HEARTBEAT_S) && HEARTBEAT_S >= 1))
  throw new Error(
    `--heartbeat-interval must be whole seconds, at least 1, got ${args["heartbeat-interval"]}`,
  );
/** How long one change may take to reach every zone. */
const ROUND_TIMEOUT_MS = 120_000;
/**
 * How long the killed instance's zones may take to be back: at the defaults
 * a tenth of 100,000 zones redial onto instances on a machine near its
 * memory, which takes minutes here (the target is 60 s; the run reports what
 * it took).
 */
const FAILOVER_TIMEOUT_MS = 900_000;
/** Uncounted changes before the counted ones (the zones' change path compiles over the first ones: bench/fanout.ts). */
const WARMUP = QUICK ? 1 : 2;
/** The idle window before the rounds, for the idle PostgreSQL rate; and the wait for the server's counters (see the top). */
const IDLE_SECONDS = Number(process.env.KDS_BENCH_SCALE_IDLE_SECONDS || 15);
if (!(IDLE_SECONDS > 0))
  throw new Error(
    `KDS_BENCH_SCALE_IDLE_SECONDS must be a number of seconds above 0, got ${process.env.KDS_BENCH_SCALE_IDLE_SECONDS}`,
  );
const IDLE_MS = QUICK ? 1_000 : IDLE_SECONDS * 1000;
const STATS_LAG_MS = QUICK ? 0 : 11_000;
/** Statements that ran at least this often per change are listed by their text in the summary. */
const LISTED_PER_CHANGE = 0.5;

const log = (text: string): void => {
  if (!args.quiet) process.stderr.write(`scale: ${text}\n`);
};
const clock = (): number => performance.timeOrigin + performance.now();
const startedAt = new Date();
const loadAtStart = loadavg();
/** CPU counters at the start, for the CPUs other work kept busy over the run (bench/other-work.ts). */
const cpuAtStart = cpuMark();
const resultsDir = fileURLToPath(new URL("./results/", import.meta.url));
mkdirSync(resultsDir, { recursive: true });
const outFile =
  args.out ?? join(resultsDir, `scale-${startedAt.toISOString().replace(/[:.]/g, "-")}.json`);

// Each instance's zone sockets, and the floor's beside them when they fit (see the top).
const perInstance = Math.ceil(ZONES / INSTANCES);
const perProcess = Math.ceil(ZONES / PROCESSES);
const floorMode: "interleaved" | "after" =
  2 * Math.max(perInstance, perProcess) + 1_000 <= FD_LIMIT ? "interleaved" : "after";
/**
 * Each instance's zone listener cap (the CLI's `--max-connections`): the
 * instances left after the failover must hold every zone, with a tenth to
 * spare for zones a rebalance has in flight, and never less than the CLI's
 * default (from the open-files limit, at most 10,000), which holds only
 * 90,000 zones on 9 instances: at the defaults a tenth of the zones would
 * have nowhere to go.
 */
const perSurvivor = Math.ceil(ZONES / (INSTANCES - 1));
const ZONE_CAP = Math.max(defaultConnectionCaps(FD_LIMIT).zones, Math.ceil(perSurvivor * 1.1));
if (Math.max(perSurvivor, perProcess) + 1_000 > FD_LIMIT)
  log(
    `warning: ${Math.max(perSurvivor, perProcess)} sockets per process come close to the open-files limit ${FD_LIMIT}; raise it (ulimit -n) or use more --instances / --processes`,
  );

// The embedded server loads pg_stat_statements, which counts each statement as it ends (see the top).
const serverUrl =
  process.env.KDS_BENCH_DATABASE_URL ||
  (await embeddedUrl({
    shared_preload_libraries: "pg_stat_statements",
    // Each instance holds its store's pool (10) and LISTEN connection; PostgreSQL's default is 100 in all.
    max_connections: String(Math.max(100, 12 * INSTANCES + 20)),
  }));
const dbName = `kds_scale_${process.pid}`;
const admin = postgres(serverUrl, { max: 1, onnotice: () => undefined });
await admin.unsafe(`CREATE DATABASE "${dbName}"`);
const storeUrl = Object.assign(new URL(serverUrl), { pathname: `/${dbName}` }).href;
const dir = mkdtempSync(join(tmpdir(), "kds-scale-"));
const types = createTypeRegistry(exampleTypes);
type ZoneProcess = ChildProcessByStdio<Writable, Readable, null> & {
  next(test: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
};
const zoneProcesses: ZoneProcess[] = [];
const globals: (CliGlobal & { log: string })[] = [];
let listener: postgres.Sql | undefined;
let statsSql: postgres.Sql | undefined;
let exitCode = 0;
let cleaning: Promise<void> | undefined;
/** Stops every process this run started and drops its database (once, from the end or a signal). */
function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    await stopZoneProcesses(zoneProcesses);
    for (const g of globals) await stopCliGlobal(g, "scale");
    await listener?.end({ timeout: 5 });
    await statsSql?.end({ timeout: 5 });
    await admin.unsafe(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`);
    await admin.end({ timeout: 5 });
    await stopEmbedded();
    rmSync(dir, { recursive: true, force: true });
  })();
  return cleaning;
}
// Stopped from outside (Ctrl-C, a time limit): the instances, the zones and the embedded server go too.
for (const signal of ["SIGINT", "SIGTERM"] as const)
  process.once(signal, () => {
    log(`stopped by ${signal}; stopping the instances, the zones and the database`);
    void cleanUp().finally(() => process.exit(130));
  });
try {
  // The Zones and the Mesh first, straight into the store (what `kds-mux apply` would write).
  const seeding = await PostgresStore.open(types, { url: storeUrl, logger: silentLogger });
  try {
    for (let i = 0; i < ZONES; i += 1_000)
      await seeding.apply(
        Array.from({ length: Math.min(1_000, ZONES - i) }, (_, j) => ({
          op: "put" as const,
          input: {
            kind: ZONE_KIND,
            name: `zone-${i + j}`,
            spec: create(ZoneSpecSchema, { enabled: true }),
          },
        })),
      );
    await seeding.put({
      kind: "Mesh",
      name: "default",
      spec: create(MeshSpecSchema, { description: "start" }),
    });
  } finally {
    await seeding.close();
  }
  log(`${ZONES} Zones written; starting ${INSTANCES} instances`);

  await compileCli();
  const probe = new URL("./scale-probe.ts", import.meta.url).href;
  for (let k = 0; k < INSTANCES; k++) {
    const file = join(dir, `global-${k}.log`);
    globals.push({
      log: file,
      ...startCliGlobal({
        storeUrl,
        listen: "127.0.0.1:0",
        logFile: file,
        limitMs: 120_000,
        ipc: true,
        nodeArgs: ["--import", BENCH_LOADER, "--import", probe],
        // Zones prove nothing (as bench/restart-storm.ts): what is measured is the sync, not token checks.
        args: [
          "--insecure-no-zone-auth",
          "--log-level",
          "info",
          "--heartbeat-interval",
          `${HEARTBEAT_S}s`,
          "--max-connections",
          String(ZONE_CAP),
        ],
      }),
    });
  }
  const urls = await Promise.all(globals.map((g) => g.urls));
  log(`instances listening: ${urls.map((u) => u.mux).join(" ")}`);
  /** Sends `message` to instance k's probe and waits for its reply holding `key`. */
  const ask = (k: number, message: object, key: string): Promise<Record<string, unknown>> =>
    askProbe((globals[k] as CliGlobal).child, message, key);
  const alive = (): number[] =>
    globals.flatMap((g, k) =>
      g.child.exitCode === null && g.child.signalCode === null ? [k] : [],
    );
  /** Heap and RSS of the live instances, summed, after GC. */
  const memory = async (): Promise<{
    heap: number;
    rss: number;
    each: { heap: number; rss: number }[];
  }> => {
    const each = await Promise.all(
      alive().map(async (k) => {
        const m = (await ask(k, { memory: 1 }, "memory")).memory as {
          heapBytes: number;
          rssBytes: number;
        };
        return { heap: m.heapBytes, rss: m.rssBytes };
      }),
    );
    return {
      heap: each.reduce((a, m) => a + m.heap, 0),
      rss: each.reduce((a, m) => a + m.rss, 0),
      each,
    };
  };

  // NOTIFYs on the store's channel (src/store/postgres.ts: "kds.<schema>", public here).
  let notifies = 0;
  listener = postgres(storeUrl, { max: 1, onnotice: () => undefined });
  await listener.listen("kds.public", () => void notifies++);
  // pg_stat_statements where the server loads it: counted as each statement ends, by statement.
  // Read on the store's database, where the extension's view is; its own reads are left out.
  const stats = postgres(storeUrl, { max: 1, onnotice: () => undefined });
  statsSql = stats;
  const statements = await stats
    .unsafe("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    .then(() => stats.unsafe("SELECT 1 FROM pg_stat_statements LIMIT 1"))
    .then(
      () => true,
      (error: unknown) => {
        log(`no pg_stat_statements (${String(error)}): counting transactions in pg_stat_database`);
        return false;
      },
    );
  const [limit] = await stats<{ n: number }[]>`SELECT current_setting('max_connections')::int AS n`;
  if ((limit?.n ?? 0) < 11 * INSTANCES + 5)
    log(
      `warning: the server allows ${limit?.n} connections; ${INSTANCES} instances hold up to ${11 * INSTANCES} (a pool of 10 and a LISTEN each), and the bench a few`,
    );
  const statementText = new Map<string, string>();
  const pgCounters = async (): Promise<Record<string, number>> => {
    const byStatement: Record<string, number> = {};
    if (statements)
      for (const row of await stats<{ id: string; calls: string; query: string }[]>`
        SELECT queryid::text AS id, calls::text AS calls, left(regexp_replace(query, '\\s+', ' ', 'g'), 160) AS query
        FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = ${dbName})
          AND query NOT LIKE '%pg_stat_statements%'`) {
        byStatement[`statement:${row.id}`] = Number(row.calls);
        statementText.set(`statement:${row.id}`, row.query);
      }
    const [row] = await admin<Record<string, string>[]>`
      SELECT xact_commit + xact_rollback AS transactions, tup_returned AS "tuplesReturned",
             tup_fetched AS "tuplesFetched", tup_inserted AS "tuplesInserted",
             tup_updated AS "tuplesUpdated", tup_deleted AS "tuplesDeleted"
      FROM pg_stat_database WHERE datname = ${dbName}`;
    return {
      ...Object.fromEntries(Object.entries(row ?? {}).map(([k, v]) => [k, Number(v)])),
      ...byStatement,
      notifies,
      at: clock(),
    };
  };

  const frame = meshChangeFrame("seq-1");
  const floorUrls =
    floorMode === "interleaved"
      ? await Promise.all(
          globals.map(
            async (_, k) =>
              (
                await ask(
                  k,
                  { floorListen: Buffer.from(frame).toString("base64") },
                  "floorListening",
                )
              ).floorListening as string,
          ),
        )
      : [];
  const base = await memory();

  // The zone processes.
  const tokensFile = join(dir, "tokens.json");
  writeFileSync(tokensFile, "[]"); // no tokens: the instances run with --insecure-no-zone-auth
  for (let p = 0; p < PROCESSES; p++) {
    const from = p * perProcess;
    const count = Math.min(perProcess, ZONES - from);
    if (count <= 0) break;
    const config = {
      urls: urls.map((u) => u.mux),
      from,
      count,
      zonesPerConnection: 1,
      tokensFile,
      // At most this many zones of a process dialing at once: a burst of thousands overflows accept queues.
      dialsInFlight: DIALS,
      floorBytes: frame.byteLength,
      floorAckBytes: 0,
      failover: true,
      dataplanes: DATAPLANES,
      backoff: "default",
      heartbeatMs: HEARTBEAT_S * 1000,
    };
    const child = spawn(
      process.execPath,
      [
        ...childNodeArgs(),
        "--max-old-space-size=4096",
        "--import",
        BENCH_LOADER,
        fileURLToPath(new URL("./fanout-zones.ts", import.meta.url)),
        JSON.stringify(config),
      ],
      { stdio: ["pipe", "pipe", "inherit"] },
    );
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    zoneProcesses.push(
      Object.assign(child, {
        async next(test: (line: Record<string, unknown>) => boolean) {
          for (;;) {
            const r = await lines.next();
            if (r.done === true) throw new Error(`zone process ${p} ended early`);
            const line = JSON.parse(r.value as string) as Record<string, unknown>;
            if (test(line)) return line;
          }
        },
      }),
    );
  }
  const tell = (command: unknown): void => {
    for (const z of zoneProcesses) z.stdin.write(`${JSON.stringify(command)}\n`);
  };
  const fromAll = (test: (line: Record<string, unknown>) => boolean) =>
    Promise.all(zoneProcesses.map((z) => z.next(test)));

  /** Opens the floor's streams (one per zone, to its instance's floor server); the zone processes' growth. */
  const openFloor = async (to: readonly string[]): Promise<void> => {
    tell({ floorOpen: to });
    const opened = await within(
      fromAll((l) => "floorOpened" in l),
      600_000,
    );
    if (opened === undefined) throw new Error("the floor's streams did not open within 600 s");
  };
  if (floorMode === "interleaved") await openFloor(floorUrls);
  const floorHeld = floorMode === "interleaved" ? await memory() : undefined;

  // Connect from cold.
  log(
    `${ZONES} zones in ${zoneProcesses.length} processes dialing ${INSTANCES} instances (floor ${floorMode})`,
  );
  // KDS_BENCH_SCALE_PROFILE=<dir>: instance 0's CPU over the connect (see the top).
  const profileDir = process.env.KDS_BENCH_SCALE_PROFILE ?? "";
  const profilePhase = process.env.KDS_BENCH_SCALE_PROFILE_PHASE === "idle" ? "idle" : "connect";
  const profiled = (phase: string): boolean => profileDir !== "" && profilePhase === phase;
  if (profiled("connect"))
    await ask(0, { profile: join(profileDir, `global-0.connect.cpuprofile`) }, "profiling");
  const connectFrom = await pgCounters();
  /** CPU seconds of the instances and of the zone processes so far (/proc; NaN without it). */
  const cpuNow = (): { instances: number; zones: number } => ({
    instances: cpuSecondsOf(globals.map((g) => g.child.pid)) ?? Number.NaN,
    zones: cpuSecondsOf(zoneProcesses.map((z) => z.pid)) ?? Number.NaN,
  });
  const connectCpuFrom = cpuNow();
  tell({ startZones: 1 });
  const ready = await within(
    fromAll((l) => "ready" in l),
    CONNECT_TIMEOUT_MS,
  );
  if (profiled("connect"))
    log(`profile: ${(await ask(0, { profileStop: 1 }, "profileWritten")).profileWritten}`);
  if (ready === undefined)
    throw new Error(`not every zone connected within ${CONNECT_TIMEOUT_MS / 1000} s`);
  const connectCpuTo = cpuNow();
  const connectSeconds =
    (Math.max(...ready.map((r) => r.readyAt as number)) -
      Math.min(...ready.map((r) => r.startedAt as number))) /
    1000;
  log(`every zone holds the Mesh after ${connectSeconds.toFixed(1)} s`);
  // Every zone's Dataplanes in the store before measuring idle (they come after the Mesh).
  const heldStarted = performance.now();
  for (;;) {
    const [held] = await stats<{ n: number }[]>`
        SELECT count(*)::int AS n FROM kds_resources WHERE kind = 'Dataplane'`;
    if ((held?.n ?? 0) >= ZONES * DATAPLANES) break;
    if (performance.now() - heldStarted > CONNECT_TIMEOUT_MS)
      throw new Error(
        `the store held ${held?.n ?? 0} of ${ZONES * DATAPLANES} Dataplanes after ${CONNECT_TIMEOUT_MS / 1000} s`,
      );
    await new Promise((r) => setTimeout(r, 500));
  }
  const dataplanesSeconds = (performance.now() - heldStarted) / 1000;
  // PostgreSQL work of the connect, per zone (the idle background of its seconds included).
  if (!statements) await new Promise((r) => setTimeout(r, STATS_LAG_MS));
  const connectTo = await pgCounters();
  await new Promise((r) => setTimeout(r, QUICK ? 500 : 5_000));
  const idle = await memory();
  const zonesBase = floorHeld ?? base;
  log(
    `idle: RSS ${(idle.rss / 2 ** 20).toFixed(0)} MiB in all, heap ${((idle.heap - zonesBase.heap) / ZONES / 1024).toFixed(1)} KiB per zone`,
  );

  // The idle PostgreSQL rate, then the change rounds.
  const idleFrom = await pgCounters();
  if (profiled("idle"))
    await ask(0, { profile: join(profileDir, `global-0.idle.cpuprofile`) }, "profiling");
  const gcNow = async (): Promise<Record<string, { count: number; ms: number }>> => {
    const sum: Record<string, { count: number; ms: number }> = {};
    for (const k of alive()) {
      const stats = (await ask(k, { gcStats: 1 }, "gcStats")).gcStats as typeof sum;
      for (const [kind, s] of Object.entries(stats)) {
        sum[kind] ??= { count: 0, ms: 0 };
        const t = sum[kind];
        t.count += s.count;
        t.ms += s.ms;
      }
    }
    return sum;
  };
  const idleGcFrom = await gcNow();
  const idleCpuFrom = cpuNow();
  await new Promise((r) => setTimeout(r, IDLE_MS));
  const idleCpuTo = cpuNow();
  const idleGcTo = await gcNow();
  /** The instances' collections over the idle window, by kind: how many, and their pauses in ms. */
  const idleGc = Object.fromEntries(
    Object.entries(idleGcTo).map(([kind, s]) => [
      kind,
      {
        count: s.count - (idleGcFrom[kind]?.count ?? 0),
        ms: Math.round(s.ms - (idleGcFrom[kind]?.ms ?? 0)),
      },
    ]),
  );
  log(`idle GC on the instances: ${JSON.stringify(idleGc)}`);
  if (profiled("idle"))
    log(`profile: ${(await ask(0, { profileStop: 1 }, "profileWritten")).profileWritten}`);
  const idleTo = await pgCounters();
  /** µs of CPU per zone and second of wall time between two CPU readings. */
  const perZoneSecond = (to: number, from: number): number =>
    ((to - from) * 1e6) / ZONES / (((idleTo.at as number) - (idleFrom.at as number)) / 1000);
  const idleCpu = {
    instancesUsPerZoneSecond: perZoneSecond(idleCpuTo.instances, idleCpuFrom.instances),
    zonesUsPerZoneSecond: perZoneSecond(idleCpuTo.zones, idleCpuFrom.zones),
  };
  log(
    `idle CPU per zone and second: instances ${idleCpu.instancesUsPerZoneSecond.toFixed(1)} µs, zone processes ${idleCpu.zonesUsPerZoneSecond.toFixed(1)} µs`,
  );
  /** Applies change `seq` through instance 0's admin API, within the round's time (a starved store fails the round, not hangs it). */
  const change = async (seq: number): Promise<void> => {
    try {
      await adminClient((urls[0] as { admin: string }).admin).apply(
        {
          resources: [
            {
              type: "Mesh",
              name: "default",
              specJson: JSON.stringify({ description: `seq-${seq}` }),
            },
          ],
        },
        { timeoutMs: ROUND_TIMEOUT_MS },
      );
    } catch (error) {
      throw new Error(
        `change ${seq}: instance 0's admin Apply failed or took over ${ROUND_TIMEOUT_MS / 1000} s (see its log)`,
        { cause: error },
      );
    }
  };
  /** Latencies of one round from `sentAt`, sorted. */
  const arrivalsOf = (lines: Record<string, unknown>[], sentAt: number): number[] =>
    lines.flatMap((l) => (l.arrivals as number[]).map((at) => at - sentAt)).sort((a, b) => a - b);
  const floorRound = async (seq: number): Promise<number[]> => {
    const sentAt = clock();
    await Promise.all(alive().map((k) => ask(k, { floorWrite: seq }, "floorWritten")));
    const done = await within(
      fromAll((l) => l.floorSeq === seq),
      ROUND_TIMEOUT_MS,
    );
    if (done === undefined)
      throw new Error(
        `floor write ${seq} did not reach every stream within ${ROUND_TIMEOUT_MS / 1000} s`,
      );
    return arrivalsOf(done, sentAt);
  };
  const rounds: { p50: number; p99: number; max: number; floor?: number[] }[] = [];
  let seq = 0;
  let floorSeq = 0;
  const roundsFrom = await pgCounters();
  for (let r = 0; r < WARMUP + ROUNDS; r++) {
    seq++;
    const sentAt = clock();
    await change(seq);
    const done = await within(
      fromAll((l) => l.seq === seq),
      ROUND_TIMEOUT_MS,
    );
    if (done === undefined)
      throw new Error(`change ${seq} did not reach every zone within ${ROUND_TIMEOUT_MS / 1000} s`);
    const latencies = arrivalsOf(done, sentAt);
    await new Promise((res) => setTimeout(res, 200));
    const floor = floorMode === "interleaved" ? await floorRound(++floorSeq) : undefined;
    if (r >= WARMUP)
      rounds.push({
        p50: percentile(latencies, 50),
        p99: percentile(latencies, 99),
        max: latencies.at(-1) as number,
        floor,
      });
    log(
      `change ${seq}${r < WARMUP ? " (warm-up)" : ""}: p50 ${percentile(latencies, 50).toFixed(0)} ms, p99 ${percentile(latencies, 99).toFixed(0)} ms${floor === undefined ? "" : `; floor p99 ${percentile(floor, 99).toFixed(1)} ms`}`,
    );
    await new Promise((res) => setTimeout(res, 200));
  }
  // pg_stat_statements counts at once; pg_stat_database only once the backends flushed (see the top).
  if (!statements) await new Promise((r) => setTimeout(r, STATS_LAG_MS));
  const roundsTo = await pgCounters();
  // A second idle window after the rounds: the background (lease and status writes after the
  // connect) fades over minutes, so the rounds' share of it is the lower of the rates before and
  // after. Busy instances also put their timed background off (at 100,000 zones the rounds ran
  // fewer statements a second than either idle window), so the figure can come out below zero;
  // beside it, statementsBeyondIdle counts each statement only beyond its own idle rate, which
  // cannot, and is biased upward by the background's ups (its downs count 0).
  await new Promise((r) => setTimeout(r, IDLE_MS));
  const idleAfter = await pgCounters();
  const delta = (to: Record<string, number>, from: Record<string, number>, k: string): number =>
    (to[k] ?? 0) - (from[k] ?? 0);
  const seconds = (to: Record<string, number>, from: Record<string, number>): number =>
    ((to.at as number) - (from.at as number)) / 1000;
  const rateBefore = (k: string): number => delta(idleTo, idleFrom, k) / seconds(idleTo, idleFrom);
  const rateAfter = (k: string): number =>
    delta(idleAfter, roundsTo, k) / seconds(idleAfter, roundsTo);
  /** One counter's lower idle rate of the two windows. */
  const idleRate = (k: string): number => Math.min(rateBefore(k), rateAfter(k));
  const roundsSeconds = seconds(roundsTo, roundsFrom);
  const changes = WARMUP + ROUNDS;
  /** One statement's (or counter's) count in the rounds beyond its own lower idle rate, per change; at least 0. */
  const beyondIdle = (k: string): number =>
    Math.max(0, delta(roundsTo, roundsFrom, k) - idleRate(k) * roundsSeconds) / changes;
  const counterKeys = [...new Set([...Object.keys(idleTo), ...Object.keys(roundsTo)])].filter(
    (k) => k !== "at",
  );
  const statementKeys = counterKeys.filter((k) => k.startsWith("statement:"));
  const sum = (f: (k: string) => number): number => statementKeys.reduce((a, k) => a + f(k), 0);
  const figures = (f: (k: string) => number): Record<string, number> => ({
    ...(statements ? { statements: sum(f) } : {}),
    ...Object.fromEntries(
      counterKeys.filter((k) => !k.startsWith("statement:")).map((k) => [k, f(k)]),
    ),
  });
  const perZoneConnect = (k: string): number => delta(connectTo, connectFrom, k) / ZONES;
  const idleBefore = figures(rateBefore);
  const idleLater = figures(rateAfter);
  const roundsCounted = figures((k) => delta(roundsTo, roundsFrom, k));
  /** Each figure's lower idle rate (for statements: the lower of the two windows' totals). */
  const idlePerSecond = Object.fromEntries(
    Object.keys(roundsCounted).map((k) => [k, Math.min(idleBefore[k] ?? 0, idleLater[k] ?? 0)]),
  );
  const perChange: Record<string, number> = Object.fromEntries(
    Object.keys(roundsCounted).map((k) => [
      k,
      ((roundsCounted[k] ?? 0) - (idlePerSecond[k] ?? 0) * roundsSeconds) / changes,
    ]),
  );
  if (statements) perChange.statementsBeyondIdle = sum(beyondIdle);
  const postgresWork = {
    source: statements
      ? "statements: pg_stat_statements calls in the store's database; NOTIFYs this process received on the store's channel; transactions and tuples: pg_stat_database, flushed by the server at most once a second (approximate)"
      : "transactions = xact_commit + xact_rollback and tuples of pg_stat_database for the store's database (each statement outside a transaction counts one); NOTIFYs this process received on the store's channel",
    idlePerSecondBefore: idleBefore,
    idlePerSecondAfter: idleLater,
    /** The rounds' window as counted, before the idle share is taken off. */
    rounds: { changes, seconds: roundsSeconds, counted: roundsCounted },
    idlePerSecond,
    perChange,
    /** The connect from cold, per zone: everything counted from the zones' start until their Dataplanes were stored. */
    perZoneConnect: figures(perZoneConnect),
    statementsPerZoneConnect: statementKeys
      .map((k) => ({ perZone: perZoneConnect(k), query: statementText.get(k) }))
      .filter((x) => x.perZone >= 0.05)
      .sort((a, b) => b.perZone - a.perZone),
    /** The statements that ran about once per change or more, with their text. */
    statementsPerChange: statementKeys
      .map((k) => ({
        perChange: beyondIdle(k),
        idlePerSecond: idleRate(k),
        query: statementText.get(k),
      }))
      .filter((x) => x.perChange >= LISTED_PER_CHANGE)
      .sort((a, b) => b.perChange - a.perChange),
  };
  const counted = statements ? "statements" : "transactions";
  log(
    `PostgreSQL per change: ${perChange[counted]?.toFixed(1)} ${counted}${statements ? ` (${perChange.statementsBeyondIdle?.toFixed(1)} counting each only beyond its own idle rate)` : ""}, ${perChange.notifies?.toFixed(1)} NOTIFYs (idle: ${idlePerSecond[counted]?.toFixed(1)} ${counted}/s; the rounds: ${((roundsCounted[counted] ?? 0) / roundsSeconds).toFixed(1)}/s)`,
  );

  // Failover: the last instance SIGKILLed, and at once one more change through instance 0.
  const countsOf = async (): Promise<{ received: number; sent: number; connects: number }> => {
    tell({ counts: 1 });
    const all = await fromAll((l) => "counts" in l);
    return all
      .map((l) => l.counts as { received: number; sent: number; connects: number })
      .reduce((a, b) => ({
        received: a.received + b.received,
        sent: a.sent + b.sent,
        connects: a.connects + b.connects,
      }));
  };
  const beforeKill = await countsOf();
  const victim = (globals.at(-1) as CliGlobal).child;
  const killedAt = clock();
  victim.kill("SIGKILL");
  seq++;
  await change(seq);
  const back = await within(
    fromAll((l) => l.seq === seq),
    FAILOVER_TIMEOUT_MS,
  );
  if (back === undefined)
    throw new Error(
      `the killed instance's zones were not back within ${FAILOVER_TIMEOUT_MS / 1000} s`,
    );
  const failoverSeconds =
    (Math.max(...back.flatMap((l) => l.arrivals as number[])) - killedAt) / 1000;
  await new Promise((r) => setTimeout(r, QUICK ? 500 : 2_000));
  const afterKill = await countsOf();
  const reconnected = afterKill.connects - beforeKill.connects;
  // Each zone receives the changed Mesh once: that is not a resend.
  const resent =
    afterKill.received - beforeKill.received - ZONES + (afterKill.sent - beforeKill.sent);
  const held = reconnected * (1 + DATAPLANES);
  const failoverResentPercent = held > 0 ? (100 * resent) / held : 0;
  log(
    `failover: every zone holds the change ${failoverSeconds.toFixed(1)} s after SIGKILL; ${reconnected} zones reconnected, ${resent} resources resent of ${held}`,
  );

  // The floor after the zones, when both did not fit the open files.
  if (floorMode === "after") {
    tell({ stopZones: 1 });
    await fromAll((l) => "zonesStopped" in l);
    const live = alive();
    const to = await Promise.all(
      live.map(
        async (k) =>
          (await ask(k, { floorListen: Buffer.from(frame).toString("base64") }, "floorListening"))
            .floorListening as string,
      ),
    );
    await openFloor(to);
    for (let r = 0; r < WARMUP + ROUNDS; r++) {
      const floor = await floorRound(++floorSeq);
      if (r >= WARMUP) (rounds[r - WARMUP] as { floor?: number[] }).floor = floor;
    }
  }

  const floorP99 = rounds.map((r) => percentile(r.floor ?? [], 99));
  const spread = (xs: number[]): Spread => spreadOf(xs);
  const summary = {
    run: {
      startedAt: startedAt.toISOString(),
      quick: QUICK,
      durationSeconds: (Date.now() - startedAt.getTime()) / 1000,
      command: process.argv.slice(2).join(" "),
      openFilesLimit: FD_LIMIT,
      loadAverageAtStart: loadAtStart,
      loadAverage: loadavg(),
      // CPUs kept busy by processes outside this run's process tree, on average (NaN without /proc).
      otherCpus: ((end) =>
        cpuAtStart === undefined || end === undefined ? Number.NaN : otherCpus(cpuAtStart, end))(
        cpuMark(),
      ),
      postgres: process.env.KDS_BENCH_DATABASE_URL ? "server (KDS_BENCH_DATABASE_URL)" : "embedded",
    },
    scale: {
      instances: INSTANCES,
      zones: ZONES,
      connectSeconds,
      rssTotalMiB: idle.rss / 2 ** 20,
      heapPerZoneKiB: (idle.heap - zonesBase.heap) / ZONES / 1024,
      p50Ms: spread(rounds.map((r) => r.p50)),
      p99Ms: spread(rounds.map((r) => r.p99)),
      floorP99Ms: spread(floorP99),
      p99PerFloor: spread(rounds.map((r, i) => r.p99 / (floorP99[i] as number))),
      failoverSeconds,
      failoverResentPercent,
    },
    details: {
      zoneProcesses: zoneProcesses.length,
      dataplanesPerZone: DATAPLANES,
      heartbeatIntervalSeconds: HEARTBEAT_S,
      /** Each instance's `--max-connections`: the instances left after the failover hold every zone. */
      zoneConnectionCap: ZONE_CAP,
      floorMode,
      floorBytes: frame.byteLength,
      warmupRounds: WARMUP,
      maxMs: spread(rounds.map((r) => r.max)),
      floorP50Ms: spread(rounds.map((r) => percentile(r.floor ?? [], 50))),
      dataplanesStoredSeconds: dataplanesSeconds,
      /** CPU of the connect from cold, per zone (from the zones' start until every zone held the Mesh), in ms. */
      connectCpuMsPerZone: {
        instances: ((connectCpuTo.instances - connectCpuFrom.instances) * 1000) / ZONES,
        zones: ((connectCpuTo.zones - connectCpuFrom.zones) * 1000) / ZONES,
      },
      /** CPU with every zone connected and no change (heartbeats, lease renewals, timers), per zone and second. */
      idleCpu,
      /** The instances' garbage collections over the idle window, by kind (perf_hooks): how many, and their pauses in ms. */
      idleGc,
      rssPerZoneKiB: (idle.rss - zonesBase.rss) / ZONES / 1024,
      memoryBefore: base,
      memoryFloorHeld: floorHeld,
      memoryIdle: idle,
      postgres: postgresWork,
      failover: {
        killed: INSTANCES - 1,
        reconnected,
        resent,
        held,
        before: beforeKill,
        after: afterKill,
      },
    },
  };
  writeFileSync(outFile, `${JSON.stringify(summary, null, 2)}\n`);
  const problems = summaryProblems(summary, SCALE_KEYS);
  const show = (v: unknown): string =>
    typeof v === "number"
      ? v.toFixed(v >= 100 ? 0 : 2)
      : `${(v as Spread).median.toFixed(1)} [${(v as Spread).min.toFixed(1)}–${(v as Spread).max.toFixed(1)}]`;
  const table = [
    `| key | value (median [min–max] over ${ROUNDS} repetitions) | unit | target (issue 48, at 100,000 zones) |`,
    "|---|---:|---|---|",
    ...SCALE_KEYS.map(
      ({ key, unit, target }) =>
        `| \`${key}\` | ${show((summary.scale as Record<string, unknown>)[key.slice(6)])} | ${unit} | ${target} |`,
    ),
  ].join("\n");
  if (!args.quiet)
    process.stdout.write(
      `${table}\n\nPostgreSQL per change: ${JSON.stringify(postgresWork.perChange)}\n`,
    );
  process.stdout.write(`scale: summary in ${outFile}\n`);
  if (problems.length > 0) {
    process.stderr.write(`scale: keys missing or not sane:\n${problems.join("\n")}\n`);
    exitCode = 1;
  }
} catch (error) {
  // After a signal the run's processes were stopped under it: what failed then is that, said above.
  if (cleaning === undefined)
    process.stderr.write(
      `scale: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
  exitCode = 1;
} finally {
  await cleanUp();
}
process.exit(exitCode);
