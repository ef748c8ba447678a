// Restart storm (issue 20): a lone global holding many zones is SIGKILLed
// and started again on the same PostgreSQL database and address; right after
// it listens, one Mesh changes. Measures how long until every zone has a new
// session and holds that change (resynced), from the SIGKILL and from the
// restart; the handshakes refused meanwhile
// (kds_admissions_total{result="overloaded"}, total and peak per second); the
// zones' retries (dials) since the kill; what was resent both ways: Meshes the
// zones received again beyond the one change, Dataplanes the global received
// again (counts and shares); the CPU time of the restarted global, of the zone processes and of the
// global's PostgreSQL backends (when the server runs on this machine); the load average.
//
//   node --import ./bench/loader/register.mjs bench/restart-storm.ts [zones=2000] [zone processes=2]
//
// The zones use the default reconnect backoff (1 s doubling to 60 s, full
// jitter) and run in child processes (test/support/zone-fleet.ts), one
// HTTP/2 connection each; at 10,000 zones use several processes (5,000 each
// at most) and an open-files limit above the zone count (ulimit -n).
// KDS_BENCH_DATABASE_URL (else KDS_TEST_DATABASE_URL, else
// postgres://postgres@127.0.0.1:5432/postgres) names the server; a fresh
// database is created and dropped. The global runs compiled to one file
// (bench/results/storm-global.mjs, built with esbuild at the start) with
// KDS_BENCH_CHILD_ARGS (e.g. --cpu-prof --cpu-prof-dir=DIR: the restarted
// global stops with SIGTERM at the end, so its profile is written);
// KDS_STORM_GLOBAL_LOG=FILE appends both globals' logs to FILE (else a temporary file; their
// ERROR lines are printed at the end);
// KDS_STORM_METRICS=FILE writes the restarted global's /metrics once every
// zone resynced (its store calls by operation, for one);
// KDS_STORM_ZONE_PROFILE=DIR writes a V8 CPU profile of each zone process
// from the SIGKILL until every zone resynced (DIR/zones-<k>.cpuprofile).
import { BENCH_LOADER } from "./fresh.ts";
import { compileCli, startCliGlobal } from "./cli-global.ts";
import { spawn, type ChildProcessByStdio } from "node:child_process";
import { closeSync, statSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import postgres from "postgres";
import { fleetDocuments } from "../test/support/fleet.ts";
import { defaultBackoff } from "../src/util/backoff.ts";
import type { FleetConfig, FleetZone } from "../test/support/zone-fleet.ts";

const ZONES = Number(process.argv[2] ?? 2000);
const PROCESSES = Number(process.argv[3] ?? 2);
const MESHES = 5;
/** How long the zones have to come back before the run fails: KDS_STORM_LIMIT_S, default 300 s. */
const LIMIT_MS = Number(process.env.KDS_STORM_LIMIT_S ?? 300) * 1000;
const DATAPLANES = 2;
const bin = fileURLToPath(new URL("../bin/kds-mux.mjs", import.meta.url));
await compileCli();
const serverUrl =
  process.env.KDS_BENCH_DATABASE_URL ||
  process.env.KDS_TEST_DATABASE_URL ||
  "postgres://postgres@127.0.0.1:5432/postgres";

/** Where the globals log: KDS_STORM_GLOBAL_LOG, else a temporary file removed at the end. */
const globalLog =
  process.env.KDS_STORM_GLOBAL_LOG || join(tmpdir(), `kds_storm_${process.pid}.log`);

/** Starts a global on `storeUrl` listening on `listen` (bench/cli-global.ts), logging into globalLog. */
function global(storeUrl: string, listen: string): ReturnType<typeof startCliGlobal> {
  return startCliGlobal({
    storeUrl,
    listen,
    logFile: globalLog,
    limitMs: LIMIT_MS,
    args: [
      "--insecure-no-zone-auth",
      "--rebalance-interval",
      "0",
      // The restarted global stops with SIGTERM at the end: a short drain, so it exits (and writes a --cpu-prof) within the 30 s the bench gives it.
      "--drain-timeout",
      "2s",
      "--log-level",
      "info",
    ],
  });
}

async function run(args: string[], input: string): Promise<void> {
  const child = spawn(process.execPath, [bin, ...args], { stdio: ["pipe", "ignore", "inherit"] });
  child.stdin.end(input);
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  if (code !== 0) throw new Error(`kds-mux ${args.join(" ")} exited ${code}`);
}

/** What a fleet process answers to "progress" (test/support/zone-fleet.ts). */
interface Progress {
  zones: number;
  reconnected: number;
  resynced: number;
  retries: number;
  maxRetries: number;
  told: number;
  overloaded: number;
}

/** User plus system CPU seconds process `pid` used so far (Linux /proc; NaN elsewhere). */
function cpuSeconds(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return Number.NaN; // not Linux: the figure is left out
  }
}

async function overloaded(admin: string): Promise<number> {
  try {
    const text = await (
      await fetch(`${admin}/metrics`, { signal: AbortSignal.timeout(5_000) })
    ).text();
    return Number(
      /kds_admissions_total\{[^}]*result="overloaded"[^}]*\} (\d+)/.exec(text)?.[1] ?? 0,
    );
  } catch {
    return Number.NaN; // the global is not up yet
  }
}

const name = `kds_storm_${process.pid}`;
const admin = postgres(serverUrl, { max: 1, onnotice: () => undefined });
await admin.unsafe(`CREATE DATABASE "${name}"`);
const storeUrl = Object.assign(new URL(serverUrl), { pathname: `/${name}` }).href;
const children: ChildProcessByStdio<Writable, Readable, null>[] = [];
let current: ReturnType<typeof global> | undefined;
try {
  current = global(storeUrl, "127.0.0.1:0");
  const first = await current.urls;
  await run(["apply", "-f", "-", "--server", first.admin], fleetDocuments(ZONES, MESHES));
  const per = Math.ceil(ZONES / PROCESSES);
  const fleets = Array.from({ length: PROCESSES }, (_, k) => {
    const config: FleetConfig = {
      urls: [first.mux],
      zones: Math.min(per, ZONES - k * per),
      first: k * per,
      meshes: MESHES,
      dataplanes: DATAPLANES,
      churnMs: 2 ** 30,
      backoff: "default",
    };
    const child = spawn(
      process.execPath,
      [
        "--max-old-space-size=2048",
        "--import",
        BENCH_LOADER,
        fileURLToPath(new URL("../test/support/zone-fleet.ts", import.meta.url)),
        JSON.stringify(config),
      ],
      { stdio: ["pipe", "pipe", "inherit"] },
    );
    children.push(child);
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    const next = async (key: string): Promise<Record<string, unknown>> => {
      for (;;) {
        const { value, done } = await lines.next();
        if (done === true) throw new Error(`a zone process ended before printing ${key}`);
        const parsed = JSON.parse(value as string) as Record<string, unknown>;
        if (key in parsed) return parsed;
      }
    };
    const send = (line: string): void => void child.stdin.write(`${line}\n`);
    const report = async (): Promise<FleetZone[]> => {
      child.stdin.write("report\n");
      return Object.values((await next("report")).report as Record<string, FleetZone>);
    };
    return { next, report, send };
  });
  const syncStarted = performance.now();
  await Promise.all(fleets.map((f) => f.next("synced")));
  const syncedAt = performance.now();
  console.log(
    `restart storm: ${ZONES} zones synced in ${Math.round(performance.now() - syncStarted)} ms`,
  );
  // The global must hold every zone's Dataplanes before the kill, or those it had not yet written are not
  // resends when they come again: wait (bounded) until its database has them all.
  const store = postgres(storeUrl, { max: 1, onnotice: () => undefined });
  const heldStarted = performance.now();
  try {
    for (;;) {
      const [row] = await store<{ n: number }[]>`
        SELECT count(*)::int AS n FROM kds_resources WHERE kind = 'Dataplane'`;
      if ((row?.n ?? 0) >= ZONES * DATAPLANES) break;
      if (performance.now() - heldStarted > LIMIT_MS)
        throw new Error(
          `the global held ${row?.n ?? 0} of ${ZONES * DATAPLANES} Dataplanes after ${LIMIT_MS / 1000} s`,
        );
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await store.end();
  }
  console.log(
    `restart storm: the global holds all ${ZONES * DATAPLANES} Dataplanes ${Math.round(performance.now() - syncStarted)} ms after the zones started`,
  );
  // The zones of a fleet that held a global for a while: each session has lasted the backoff's
  // resetAfterMs (60 s by default), so a zone treats the kill as the end of a healthy session.
  const healthyMs = defaultBackoff.resetAfterMs + 1_000 - (performance.now() - syncedAt);
  if (healthyMs > 0) {
    console.log(
      `restart storm: waiting ${Math.round(healthyMs)} ms until every session has been up ${defaultBackoff.resetAfterMs} ms`,
    );
    await new Promise((resolve) => setTimeout(resolve, healthyMs));
  }
  const all = async (): Promise<FleetZone[]> =>
    (await Promise.all(fleets.map((f) => f.report()))).flat();
  const before = await all();
  const receivedBefore = before.reduce((n, z) => n + z.meshesReceived, 0);
  await Promise.all(
    fleets.map((f) => {
      f.send("mark");
      return f.next("marked");
    }),
  );

  const zoneProfiles = process.env.KDS_STORM_ZONE_PROFILE;
  if (zoneProfiles !== undefined && zoneProfiles !== "")
    await Promise.all(
      fleets.map((f) => {
        f.send("profile-start");
        return f.next("profiling");
      }),
    );
  const killedAt = performance.now();
  current.child.kill("SIGKILL");
  await new Promise((resolve) => current?.child.once("exit", resolve));
  current = global(storeUrl, new URL(first.mux).host);
  const second = await current.urls;
  const restartedAt = performance.now();
  const globalPid = current.child.pid as number;
  const cpuAtRestart = cpuSeconds(globalPid);
  const zonesCpu = (): number => children.reduce((n, c) => n + cpuSeconds(c.pid as number), 0);
  const zonesCpuAtRestart = zonesCpu();
  const upMs = Math.round(restartedAt - killedAt);
  // One Mesh changes while the zones come back: a zone counts as resynced once it holds the change, proof that its new session syncs.
  let appliedMs: number | undefined;
  const changing = run(
    ["apply", "-f", "-", "--server", second.admin],
    "type: Mesh\nname: m-0\nspec:\n  description: v1\n",
  ).then(() => {
    appliedMs = Math.round(performance.now() - killedAt);
  });
  let peakPerSecond = 0;
  let last = 0;
  let lastAt = restartedAt;
  let reconnectedMs: number | undefined;
  let progress: Progress;
  const progressOf = async (): Promise<Progress> => {
    const parts = await Promise.all(
      fleets.map(async (f) => {
        f.send("progress m-0 v1");
        return (await f.next("progress")).progress as Progress;
      }),
    );
    return parts.reduce((a, b) => ({
      zones: a.zones + b.zones,
      reconnected: a.reconnected + b.reconnected,
      resynced: a.resynced + b.resynced,
      retries: a.retries + b.retries,
      maxRetries: Math.max(a.maxRetries, b.maxRetries),
      told: a.told + b.told,
      overloaded: a.overloaded + b.overloaded,
    }));
  };
  for (;;) {
    const refused = await overloaded(second.admin);
    const now = performance.now();
    if (Number.isFinite(refused)) {
      peakPerSecond = Math.max(
        peakPerSecond,
        ((refused - last) * 1000) / Math.max(1, now - lastAt),
      );
      last = refused;
      lastAt = now;
    }
    progress = await progressOf();
    if (reconnectedMs === undefined && progress.reconnected === ZONES)
      reconnectedMs = Math.round(performance.now() - killedAt);
    if (progress.resynced === ZONES) break;
    if (now - killedAt > LIMIT_MS) {
      const why = new Map<string, number>();
      for (const z of await all())
        for (const f of z.failures) {
          const key = f
            .replace(/zone-\d+/g, "zone-N")
            .replace(/\d+/g, "N")
            .slice(0, 200);
          why.set(key, (why.get(key) ?? 0) + 1);
        }
      throw new Error(
        `not every zone came back within ${LIMIT_MS / 1000} s: ${ZONES - progress.resynced} missing (${JSON.stringify(progress)}); the zones' retries since the kill, by reason: ${JSON.stringify([...why].sort((a, b) => b[1] - a[1]).slice(0, 10))}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  const resyncedAt = performance.now();
  const load = loadavg().map((l) => Number(l.toFixed(2)));
  const globalCpuSeconds = Number((cpuSeconds(globalPid) - cpuAtRestart).toFixed(1));
  const zonesCpuSeconds = Number((zonesCpu() - zonesCpuAtRestart).toFixed(1));
  // The PostgreSQL backends serving the restarted global (the only sessions on this run's database now): their CPU since
  // they started, just before the global listened. NaN when the server's processes are not readable here (not Linux, or remote).
  const postgresCpuSeconds = Number(
    (await admin<{ pid: number }[]>`SELECT pid FROM pg_stat_activity WHERE datname = ${name}`)
      .reduce((n, r) => n + cpuSeconds(r.pid), 0)
      .toFixed(1),
  );
  if (zoneProfiles !== undefined && zoneProfiles !== "")
    await Promise.all(
      fleets.map((f, k) => {
        f.send(`profile-stop ${join(zoneProfiles, `zones-${k}.cpuprofile`)}`);
        return f.next("profiled");
      }),
    );
  await changing;
  const refusedTotal = await overloaded(second.admin);
  // KDS_STORM_METRICS=FILE keeps the restarted global's /metrics as they stand once every zone resynced.
  const metricsFile = process.env.KDS_STORM_METRICS;
  if (metricsFile !== undefined && metricsFile !== "")
    writeFileSync(
      metricsFile,
      await (
        await fetch(`${second.admin}/metrics`, { signal: AbortSignal.timeout(10_000) })
      ).text(),
    );
  const back = await all();
  // Each zone receives the one changed Mesh once: that is not a resend.
  const meshesResent = back.reduce((n, z) => n + z.meshesReceived, 0) - receivedBefore - ZONES;
  // Into a file, not a pipe: the CLI's large JSON written to a pipe was cut short when it exited.
  const inspectFile = join(tmpdir(), `${name}-zones.json`);
  const out = openSync(inspectFile, "w");
  const inspect = spawn(
    process.execPath,
    [bin, "inspect", "zones", "--server", second.admin, "-o", "json"],
    { stdio: ["ignore", out, "inherit"] },
  );
  await new Promise((resolve) => inspect.once("exit", resolve));
  closeSync(out);
  const json = readFileSync(inspectFile, "utf8");
  rmSync(inspectFile, { force: true });
  const zones = JSON.parse(json) as {
    types: { kind: string; resourcesReceived?: number | string }[];
  }[];
  const dataplanesResent = zones.reduce(
    (n, z) => n + Number(z.types.find((t) => t.kind === "Dataplane")?.resourcesReceived ?? 0),
    0,
  );
  const meshesHeld = ZONES * MESHES;
  const dataplanesHeld = ZONES * DATAPLANES;
  const summary = {
    zones: ZONES,
    zoneProcesses: PROCESSES,
    globalUpMs: upMs,
    reconnectedMs,
    changeAppliedMs: appliedMs,
    resyncMs: Math.round(resyncedAt - killedAt),
    resyncAfterRestartMs: Math.round(resyncedAt - restartedAt),
    refusedHandshakes: refusedTotal,
    refusedPeakPerSecond: Math.round(peakPerSecond),
    reconnectAttempts: progress.retries,
    maxAttemptsPerZone: progress.maxRetries,
    attemptsRefusedOverloaded: progress.overloaded,
    attemptsAsTold: progress.told,
    meshesResent,
    meshesResentShare: meshesResent / meshesHeld,
    dataplanesResent,
    dataplanesResentShare: dataplanesResent / dataplanesHeld,
    resentShare: (meshesResent + dataplanesResent) / (meshesHeld + dataplanesHeld),
    globalCpuSeconds,
    zonesCpuSeconds,
    postgresCpuSeconds,
    loadAverage: load,
  };
  const pct = (x: number): string => `${(x * 100).toFixed(2)}%`;
  console.log(
    `restart storm: ${ZONES} zones in ${PROCESSES} processes; the global listened again ${upMs} ms after SIGKILL; every zone had a new session ${reconnectedMs} ms, the Mesh change was applied ${appliedMs} ms (a CLI process), and every zone was resynced ${summary.resyncMs} ms after SIGKILL (${summary.resyncAfterRestartMs} ms after the restart); ` +
      `${refusedTotal} handshakes refused as overloaded (peak ${summary.refusedPeakPerSecond}/s); the zones dialed ${progress.retries} more times (at most ${progress.maxRetries} one zone; ${progress.overloaded} refused as overloaded, ${progress.told} when the global said); ` +
      `resent ${meshesResent} of ${meshesHeld} Meshes (${pct(summary.meshesResentShare)}) and ${dataplanesResent} of ${dataplanesHeld} Dataplanes (${pct(summary.dataplanesResentShare)}), ${pct(summary.resentShare)} in all; ` +
      `the restarted global used ${globalCpuSeconds} s CPU until then, the zone processes ${zonesCpuSeconds} s, its PostgreSQL backends ${postgresCpuSeconds} s; load average ${load.join(" ")}`,
  );
  console.log(JSON.stringify(summary));
} finally {
  for (const c of children) c.stdin.end();
  // The restarted global stops gracefully (so a --cpu-prof from KDS_BENCH_CHILD_ARGS is written), within 30 s.
  const last = current?.child;
  if (last !== undefined && last.exitCode === null && last.signalCode === null) {
    const exited = new Promise((resolve) => last.once("exit", resolve));
    last.kill("SIGTERM");
    const timer = setTimeout(() => last.kill("SIGKILL"), 30_000);
    await exited;
    clearTimeout(timer);
  }
  await admin.unsafe(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  await admin.end({ timeout: 5 });
  // The globals' errors are shown here (their log is a file, see global()).
  const errors = (
    statSync(globalLog, { throwIfNoEntry: false }) === undefined
      ? ""
      : readFileSync(globalLog, "utf8")
  )
    .split("\n")
    .filter((line) => / ERROR /.test(line));
  if (errors.length > 0)
    process.stderr.write(
      `restart storm: the globals logged ${errors.length} errors; the first:\n${errors.slice(0, 5).join("\n")}\n`,
    );
  if (!process.env.KDS_STORM_GLOBAL_LOG) rmSync(globalLog, { force: true });
}
