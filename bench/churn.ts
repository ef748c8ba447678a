// Churn at size (issue 48, item 4): one global instance, the CLI's
// `kds-mux global` in a process of its own (on PostgreSQL by default, or
// its memory store), and Z zones each holding R zone-to-global resources
// (Dataplanes) of their own, so the global holds Z x R; then changes at a
// fixed rate spread over the zones for a while. The zones are real
// ZoneControlPlanes, many per process (bench/fanout-zones.ts with `churn`,
// bench/churn-zones.ts), each with its own HTTP/2 connection and mux
// stream and its own store. Phases:
//   - seed: the zones start with their resources and dial; wait until every
//     zone's responses of them are ACKed and (PostgreSQL) the global's store
//     holds Z x R;
//   - start: the global's heap and RSS after GC (bench/scale-probe.ts
//     answers inside the global);
//   - changes: --rate changes a second over all zones for --seconds, each
//     a new spec for a random one of a zone's own resources, written into the
//     zone's store on an absolute schedule (change k due at start + k/rate:
//     slowness shows as lag, not as a lower rate); the achieved rate is
//     recorded. The lag of each change is the zone's sync-lag metric: from
//     the zone's store reporting the write (inside the write) until the
//     global's ACK of the response carrying it reaches the zone;
//   - settle: until every zone's responses are ACKed again;
//   - end: the global's heap and RSS after GC; then the global's store is
//     compared with the union of the zones' stores (name, spec and origin
//     version of each resource): storeMismatches counts the differences and
//     the run fails unless it is 0.
//
//   npm run bench:churn -- [--zones 1000] [--resources 1000] [--rate 1000]
//       [--seconds 600] [--store postgres|memory] [--processes P]
//       [--seed-timeout 1800] [--max-buffer-bytes 2GiB] [--quick] [--quiet] [--out FILE]
//
// --processes: zone processes (default one per 250,000 resources);
// --seed-timeout: seconds the seed may take (connect and every resource
// stored at the global).
//
// Writes bench/results/churn-<start time>.json (or --out) and prints its
// table; exits 1 when a key is missing or not sane (bench/summary.ts rules)
// or the stores differ. --quick: shorter waits, for the smoke test
// (test/bench/churn.test.ts); its figures are not for comparison.
// PostgreSQL: KDS_BENCH_DATABASE_URL, else an embedded server
// (bench/bench-store.ts); a fresh database is created and dropped.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { spawn, type ChildProcessByStdio } from "node:child_process";
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { fromBinary } from "@bufbuild/protobuf";
import postgres from "postgres";
import { DataplaneSpecSchema } from "../examples/example-kinds/index.ts";
import { adminClient } from "../src/cli/admin-client.ts";
import { LABELS } from "../src/kinds/resource-types.ts";
import { embeddedUrl, stopEmbedded } from "./bench-store.ts";
import { CHURN_KEYS } from "./churn-keys.ts";
import { CHURN_KIND } from "./churn-zones.ts";
import {
  askProbe,
  compileCli,
  startCliGlobal,
  stopCliGlobal,
  stopZoneProcesses,
  type CliGlobal,
} from "./cli-global.ts";
import { within } from "./fanout.ts";
import { BENCH_LOADER, childNodeArgs } from "./fresh.ts";
import { cpuMark, otherCpus } from "./other-work.ts";
import { percentile } from "./percentile.ts";
import { summaryProblems } from "./summary.ts";

const { values: args } = parseArgs({
  options: {
    zones: { type: "string", default: "1000" },
    resources: { type: "string", default: "1000" },
    rate: { type: "string", default: "1000" },
    seconds: { type: "string", default: "600" },
    store: { type: "string", default: "postgres" },
    processes: { type: "string" },
    "seed-timeout": { type: "string", default: "1800" },
    "max-buffer-bytes": { type: "string", default: "2GiB" },
    quick: { type: "boolean", default: false },
    quiet: { type: "boolean", default: false },
    out: { type: "string" },
  },
});
const ZONES = Number(args.zones);
const RESOURCES = Number(args.resources);
const RATE = Number(args.rate);
const SECONDS = Number(args.seconds);
const STORE = args.store;
const QUICK = args.quick === true;
for (const [name, value] of [
  ["zones", ZONES],
  ["resources", RESOURCES],
  ["rate", RATE],
  ["seconds", SECONDS],
] as const)
  if (!(Number.isInteger(value) && value >= 1))
    throw new Error(`--${name} must be a whole number of at least 1, got ${args[name]}`);
if (STORE !== "postgres" && STORE !== "memory")
  throw new Error(`--store must be postgres or memory, got ${STORE}`);
/** Zone processes: about 250,000 resources each (a zone process holds its zones' stores and their encoded copies). */
const PROCESSES = Math.min(
  ZONES,
  Number(args.processes ?? Math.max(1, Math.ceil((ZONES * RESOURCES) / 250_000))),
);
const SEED_TIMEOUT_MS = Number(args["seed-timeout"]) * 1000;
/** How long the zones' last changes may take to be ACKed after the schedule ended. */
const SETTLE_TIMEOUT_MS = 120_000;
/** Quiet after seeding and after settling, before memory is read (the global's own timers, GC of what the phase left). */
const QUIET_MS = QUICK ? 500 : 10_000;

const log = (text: string): void => {
  if (!args.quiet) process.stderr.write(`churn: ${text}\n`);
};
const startedAt = new Date();
const loadAtStart = loadavg();
const cpuAtStart = cpuMark();
const resultsDir = fileURLToPath(new URL("./results/", import.meta.url));
mkdirSync(resultsDir, { recursive: true });
const outFile =
  args.out ?? join(resultsDir, `churn-${startedAt.toISOString().replace(/[:.]/g, "-")}.json`);

const serverUrl =
  STORE === "memory" ? undefined : process.env.KDS_BENCH_DATABASE_URL || (await embeddedUrl());
const dbName = `kds_churn_${process.pid}`;
const admin =
  serverUrl === undefined ? undefined : postgres(serverUrl, { max: 1, onnotice: () => undefined });
await admin?.unsafe(`CREATE DATABASE "${dbName}"`);
const storeUrl =
  serverUrl === undefined
    ? "memory"
    : Object.assign(new URL(serverUrl), { pathname: `/${dbName}` }).href;
const dir = mkdtempSync(join(tmpdir(), "kds-churn-"));
type ZoneProcess = ChildProcessByStdio<Writable, Readable, null> & {
  next(test: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
};
const zoneProcesses: ZoneProcess[] = [];
let global: (CliGlobal & { log: string }) | undefined;
let sql: postgres.Sql | undefined;
let exitCode = 0;
let cleaning: Promise<void> | undefined;
/** Stops every process this run started and drops its database (once, from the end or a signal). */
function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    await stopZoneProcesses(zoneProcesses);
    if (global !== undefined) await stopCliGlobal(global, "churn");
    await sql?.end({ timeout: 5 });
    await admin?.unsafe(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`);
    await admin?.end({ timeout: 5 });
    await stopEmbedded();
    rmSync(dir, { recursive: true, force: true });
  })();
  return cleaning;
}
for (const signal of ["SIGINT", "SIGTERM"] as const)
  process.once(signal, () => {
    log(`stopped by ${signal}; stopping the global, the zones and the database`);
    void cleanUp().finally(() => process.exit(130));
  });

try {
  await compileCli();
  const logFile = join(dir, "global.log");
  const started = startCliGlobal({
    storeUrl,
    listen: "127.0.0.1:0",
    logFile,
    limitMs: 120_000,
    ipc: true,
    nodeArgs: [
      "--import",
      BENCH_LOADER,
      "--import",
      new URL("./scale-probe.ts", import.meta.url).href,
    ],
    // Zones prove nothing (as bench/scale.ts): what is measured is the sync, not token checks.
    // The global's memory budget for what sessions buffer unread: every zone's first response (its R
    // resources, about 585 KB at R = 1,000) arrives at once, and with the default 256 MiB the global ends
    // the sessions holding the most (resource_exhausted), which redial and send again.
    args: [
      "--insecure-no-zone-auth",
      "--log-level",
      "info",
      "--max-buffer-bytes",
      args["max-buffer-bytes"] as string,
    ],
  });
  global = { ...started, log: logFile };
  const urls = await started.urls;
  log(`global listening on ${urls.mux} (store ${STORE})`);
  const child = started.child;
  /** The global's heap and RSS after GC (bench/scale-probe.ts). */
  const memory = async (): Promise<{ heapBytes: number; rssBytes: number }> =>
    (await askProbe(child, { memory: 1 }, "memory")).memory as {
      heapBytes: number;
      rssBytes: number;
    };

  // The Zones and the Mesh, through the admin API (as `kds-mux apply` would).
  const api = adminClient(urls.admin);
  for (let i = 0; i < ZONES; i += 500)
    await api.apply({
      resources: Array.from({ length: Math.min(500, ZONES - i) }, (_, j) => ({
        type: "Zone",
        name: `zone-${i + j}`,
        specJson: JSON.stringify({ enabled: true }),
      })),
    });
  await api.apply({
    resources: [
      { type: "Mesh", name: "default", specJson: JSON.stringify({ description: "churn" }) },
    ],
  });
  if (storeUrl !== "memory") sql = postgres(storeUrl, { max: 1, onnotice: () => undefined });

  // The zone processes: each seeds its zones' resources, then dials.
  const tokensFile = join(dir, "tokens.json");
  writeFileSync(tokensFile, "[]"); // no tokens: the global runs with --insecure-no-zone-auth
  const perProcess = Math.ceil(ZONES / PROCESSES);
  const shares: number[] = [];
  for (let p = 0; p < PROCESSES; p++) {
    const from = p * perProcess;
    const count = Math.min(perProcess, ZONES - from);
    if (count <= 0) break;
    shares.push(count);
    const config = {
      urls: [urls.mux],
      from,
      count,
      zonesPerConnection: 1,
      tokensFile,
      dialsInFlight: 100,
      floorBytes: 1,
      floorAckBytes: 0,
      failover: true,
      dataplanes: RESOURCES,
      backoff: "default",
      churn: true,
    };
    const zones = spawn(
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
    const lines = createInterface({ input: zones.stdout, crlfDelay: Number.POSITIVE_INFINITY })[
      Symbol.asyncIterator
    ]();
    zoneProcesses.push(
      Object.assign(zones, {
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
  const tell = (z: ZoneProcess, command: unknown): void => {
    z.stdin.write(`${JSON.stringify(command)}\n`);
  };
  const fromAll = (command: unknown, test: (line: Record<string, unknown>) => boolean) =>
    Promise.all(
      zoneProcesses.map((z) => {
        const answer = z.next(test);
        tell(z, command);
        return answer;
      }),
    );
  type Acks = { sent: number; unacked: number; short: number };
  const acks = async (): Promise<Acks> =>
    (await fromAll({ acks: 1 }, (l) => "acks" in l))
      .map((l) => l.acks as Acks)
      .reduce((a, b) => ({
        sent: a.sent + b.sent,
        unacked: a.unacked + b.unacked,
        short: a.short + b.short,
      }));
  /** The Dataplanes the global's store holds (PostgreSQL only; memory: undefined). */
  const heldAtGlobal = async (): Promise<number | undefined> => {
    if (sql === undefined) return undefined;
    const [row] = await sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM kds_resources WHERE kind = ${CHURN_KIND}`;
    return row?.n ?? 0;
  };
  /**
   * Waits until every zone sent its resources, no response is unanswered,
   * nothing was sent since the last look (a second apart) and, on
   * PostgreSQL, the global's store holds every resource; resolves with the
   * seconds it took.
   */
  const settled = async (limitMs: number, what: string): Promise<number> => {
    const from = performance.now();
    let last: Acks | undefined;
    for (;;) {
      const now = await acks();
      const held = await heldAtGlobal();
      if (
        now.short === 0 &&
        now.unacked === 0 &&
        (held === undefined || held >= ZONES * RESOURCES) &&
        last !== undefined &&
        last.sent === now.sent
      )
        return (performance.now() - from) / 1000;
      if (performance.now() - from > limitMs)
        throw new Error(
          `${what}: not settled after ${limitMs / 1000} s: ${JSON.stringify(now)}, the global holds ${held ?? "?"} of ${ZONES * RESOURCES}`,
        );
      last = now;
      await new Promise((r) => setTimeout(r, QUICK ? 250 : 1_000));
    }
  };

  // Seed: the zones dial with their resources.
  log(`${ZONES} zones of ${RESOURCES} resources each in ${zoneProcesses.length} processes dialing`);
  const seedStarted = performance.now();
  for (const z of zoneProcesses) tell(z, { startZones: 1 });
  const ready = await within(
    Promise.all(zoneProcesses.map((z) => z.next((l) => "ready" in l))),
    SEED_TIMEOUT_MS,
  );
  if (ready === undefined)
    throw new Error(`not every zone connected within ${SEED_TIMEOUT_MS / 1000} s`);
  await settled(SEED_TIMEOUT_MS, "seeding");
  const seedSeconds = (performance.now() - seedStarted) / 1000;
  log(`the global holds ${ZONES * RESOURCES} resources after ${seedSeconds.toFixed(1)} s`);
  await new Promise((r) => setTimeout(r, QUIET_MS));
  const start = await memory();
  log(
    `start: heap ${(start.heapBytes / 2 ** 20).toFixed(1)} MiB, RSS ${(start.rssBytes / 2 ** 20).toFixed(1)} MiB`,
  );

  // Changes: each process its share of the rate, over its zones.
  log(`${RATE} changes/s for ${SECONDS} s`);
  const churned = await Promise.all(
    zoneProcesses.map((z, p) => {
      const answer = z.next((l) => "churned" in l);
      tell(z, {
        churn: {
          rate: (RATE * (shares[p] as number)) / ZONES,
          seconds: SECONDS,
          resources: RESOURCES,
        },
      });
      return answer;
    }),
  );
  const drives = churned.map(
    (l) => l.churned as { writes: number; startedAt: number; endedAt: number; behindMaxMs: number },
  );
  const writes = drives.reduce((a, d) => a + d.writes, 0);
  const writeSeconds =
    (Math.max(...drives.map((d) => d.endedAt)) - Math.min(...drives.map((d) => d.startedAt))) /
    1000;
  // N changes span N - 1 intervals of the schedule: a kept schedule gives the rate asked.
  const changesPerSecond = (writes > 1 ? writes - 1 : writes) / writeSeconds;
  log(
    `${writes} changes in ${writeSeconds.toFixed(1)} s: ${changesPerSecond.toFixed(1)} changes/s`,
  );
  const settleSeconds = await settled(SETTLE_TIMEOUT_MS, "after the changes");
  const lagLines = await fromAll({ lags: 1 }, (l) => "lags" in l);
  const lags = lagLines.flatMap((l) => l.lags as number[]).sort((a, b) => a - b);
  const zoneSum = (k: string): number =>
    lagLines.reduce((a, l) => a + (l[k] as number), 0) / 2 ** 20;
  log(
    `lag over ${lags.length} ACKed changes: p50 ${percentile(lags, 50).toFixed(1)} ms, p99 ${percentile(lags, 99).toFixed(1)} ms, max ${(lags.at(-1) ?? Number.NaN).toFixed(1)} ms`,
  );
  await new Promise((r) => setTimeout(r, QUIET_MS));
  const end = await memory();
  log(
    `end: heap ${(end.heapBytes / 2 ** 20).toFixed(1)} MiB, RSS ${(end.rssBytes / 2 ** 20).toFixed(1)} MiB`,
  );

  // The global's store against the union of the zones'.
  const compared = await compareStores(
    storeUrl === "memory" ? undefined : sql,
    urls.admin,
    zoneProcesses,
    tell,
  );
  const storeMismatches = compared.missing + compared.extra + compared.differing;
  log(
    `stores: ${compared.zoneResources} zone resources, ${compared.globalResources} at the global; ${compared.missing} missing, ${compared.extra} extra, ${compared.differing} differing`,
  );

  const summary = {
    run: {
      startedAt: startedAt.toISOString(),
      quick: QUICK,
      durationSeconds: (Date.now() - startedAt.getTime()) / 1000,
      command: process.argv.slice(2).join(" "),
      loadAverageAtStart: loadAtStart,
      loadAverage: loadavg(),
      otherCpus: ((e) =>
        cpuAtStart === undefined || e === undefined ? Number.NaN : otherCpus(cpuAtStart, e))(
        cpuMark(),
      ),
      store:
        STORE === "memory"
          ? "memory"
          : process.env.KDS_BENCH_DATABASE_URL
            ? "postgres (KDS_BENCH_DATABASE_URL)"
            : "postgres (embedded)",
    },
    churn: {
      zones: ZONES,
      resources: ZONES * RESOURCES,
      changesPerSecond,
      seconds: SECONDS,
      lagP50Ms: percentile(lags, 50),
      lagP99Ms: percentile(lags, 99),
      lagMaxMs: lags.at(-1) ?? Number.NaN,
      heapStartMiB: start.heapBytes / 2 ** 20,
      heapEndMiB: end.heapBytes / 2 ** 20,
      heapGrowthPercent: 100 * (end.heapBytes / start.heapBytes - 1),
      rssStartMiB: start.rssBytes / 2 ** 20,
      rssEndMiB: end.rssBytes / 2 ** 20,
      storeMismatches,
    },
    details: {
      zoneProcesses: zoneProcesses.length,
      resourcesPerZone: RESOURCES,
      rateAsked: RATE,
      writes,
      writeSeconds,
      behindMaxMs: Math.max(...drives.map((d) => d.behindMaxMs)),
      /** Lags reported: fewer than writes when a key was written again before its first write was sent (one lag for both). */
      lagsReported: lags.length,
      /** The zone processes' heap and RSS together after the changes, after GC (the bench's side, not the global's). */
      zoneProcessesHeapMiB: zoneSum("heapBytes"),
      zoneProcessesRssMiB: zoneSum("rssBytes"),
      seedSeconds,
      settleSeconds,
      stores: compared,
    },
  };
  writeFileSync(outFile, `${JSON.stringify(summary, null, 2)}\n`);
  const problems = summaryProblems(summary, CHURN_KEYS);
  if (storeMismatches !== 0)
    problems.push(
      `churn.storeMismatches: ${storeMismatches} (the global's store is not the union of the zones')`,
    );
  const table = [
    `| key | value | unit | target (issue 48: 1,000 zones x 1,000 resources, 1,000 changes/s for 600 s) |`,
    "|---|---:|---|---|",
    ...CHURN_KEYS.map(({ key, unit, target }) => {
      const v = (summary.churn as Record<string, number>)[key.slice(6)] as number;
      return `| \`${key}\` | ${v.toFixed(Math.abs(v) >= 100 || Number.isInteger(v) ? 0 : 2)} | ${unit} | ${target} |`;
    }),
  ].join("\n");
  if (!args.quiet) process.stdout.write(`${table}\n`);
  process.stdout.write(`churn: summary in ${outFile}\n`);
  if (problems.length > 0) {
    process.stderr.write(`churn: keys missing or not sane:\n${problems.join("\n")}\n`);
    exitCode = 1;
  }
} catch (error) {
  if (cleaning === undefined)
    process.stderr.write(
      `churn: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
  exitCode = 1;
} finally {
  await cleanUp();
}
process.exit(exitCode);

/** How the global's store compares with the zones'. */
interface Comparison {
  zoneResources: number;
  globalResources: number;
  /** In a zone, not at the global. */
  missing: number;
  /** At the global, in no zone. */
  extra: number;
  /** In both, with another spec or origin version. */
  differing: number;
}

/**
 * Compares, per zone, the zone's own resources (name, address, version)
 * with the global's copies (`<zone>.<name>`, the address in their spec, the
 * zone's version in their `kds.io/origin-version` label): from PostgreSQL
 * by `sql`, else through the admin API at `adminUrl` (one Get of them all).
 */
async function compareStores(
  db: postgres.Sql | undefined,
  adminUrl: string,
  processes: readonly ZoneProcess[],
  tellOne: (z: ZoneProcess, command: unknown) => void,
): Promise<Comparison> {
  /** The global's copies by zone: local name -> [address, origin version]. */
  const byZone = new Map<string, Map<string, [string, string]>>();
  const add = (zone: string, name: string, address: string, version: string): void => {
    let m = byZone.get(zone);
    if (m === undefined) {
      m = new Map();
      byZone.set(zone, m);
    }
    m.set(name, [address, version]);
  };
  if (db !== undefined) {
    const rows = db<{ zone: string; name: string; spec: Uint8Array; version: string }[]>`
      SELECT labels ->> ${LABELS.zone} AS zone, labels ->> ${LABELS.displayName} AS name, spec,
             labels ->> ${LABELS.originVersion} AS version
      FROM kds_resources WHERE kind = ${CHURN_KIND}`.cursor(10_000);
    for await (const batch of rows)
      for (const r of batch)
        add(r.zone, r.name, fromBinary(DataplaneSpecSchema, r.spec).address, r.version);
  } else {
    const { resources } = await adminClient(adminUrl).get({ type: CHURN_KIND });
    for (const r of resources)
      add(
        r.labels[LABELS.zone] ?? "",
        r.labels[LABELS.displayName] ?? r.name,
        (JSON.parse(r.specJson) as { address?: string }).address ?? "",
        r.labels[LABELS.originVersion] ?? "",
      );
  }
  let globalResources = 0;
  for (const m of byZone.values()) globalResources += m.size;
  const result: Comparison = {
    zoneResources: 0,
    globalResources,
    missing: 0,
    extra: 0,
    differing: 0,
  };
  const seen = new Set<string>();
  await Promise.all(
    processes.map(async (z) => {
      const done = z.next((l) => {
        if ("dumped" in l) return true;
        if (!("zoneStore" in l)) return false;
        const zone = l.zoneStore as string;
        seen.add(zone);
        const held = byZone.get(zone) ?? new Map<string, [string, string]>();
        const entries = l.entries as [string, string, string][];
        result.zoneResources += entries.length;
        const names = new Set<string>();
        for (const [name, address, version] of entries) {
          names.add(name);
          const copy = held.get(name);
          if (copy === undefined) result.missing++;
          else if (copy[0] !== address || copy[1] !== version) result.differing++;
        }
        for (const name of held.keys()) if (!names.has(name)) result.extra++;
        return false;
      });
      tellOne(z, { dump: 1 });
      await done;
    }),
  );
  for (const [zone, m] of byZone) if (!seen.has(zone)) result.extra += m.size;
  return result;
}
