// npm run bench [-- --quick]: every scenario against its baseline in one run.
// Prints a markdown report, writes the machine-readable summary (every figure
// under the stable keys of bench/summary.ts, documented in bench/README.md)
// to bench/results/<quick|full>-<time>.json and prints that path. --quick
// runs every scenario at small sizes (a smoke run; no targets). Exits 1 when
// a key is missing or its value is not sane (bench/summary.ts), so the smoke
// run in `npm test` checks the summary too.
//
// KDS_BENCH_DATABASE_URL (else KDS_TEST_DATABASE_URL, else
// postgres://postgres@127.0.0.1:5432/postgres): the PostgreSQL server of the
// store rows; without an answer there they say "skipped: no server".
// KDS_BENCH_ZONES_PER_CONNECTION: zones sharing one HTTP/2 connection in the
// 10,000-zone scenario (default 1).
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { cpus, loadavg, totalmem } from "node:os";
import { fileURLToPath } from "node:url";
import { muxEcho, rawConnectEcho, grpcJsEcho, type EchoResult } from "./echo.ts";
import type { SyncResult } from "./sync.ts";
import type { FanoutOptions, FanoutResult } from "./fanout.ts";
import { inFreshProcess } from "./fresh.ts";
import type { MemoryResult } from "./memory.ts";
import {
  embeddedUrl,
  serverAnswers,
  serverUrl,
  stopEmbedded,
  type StoreKind,
} from "./bench-store.ts";
import { storesBench } from "./stores.ts";
import { SKIPPED, setAt, summaryProblems } from "./summary.ts";

const quick = process.argv.includes("--quick");
const quiet = process.argv.includes("--quiet");
const pkg = (name: string): string =>
  (
    JSON.parse(
      readFileSync(new URL(`../node_modules/${name}/package.json`, import.meta.url), "utf8"),
    ) as { version: string }
  ).version;
const started = performance.now();
const startedAt = new Date();
const load = loadavg();
const log = (line: string): void =>
  void process.stderr.write(`[${((performance.now() - started) / 1000).toFixed(0)} s] ${line}\n`);
const fdLimit = (flag: "-Sn" | "-Hn"): number =>
  Number(execFileSync("sh", ["-c", `ulimit ${flag}`], { encoding: "utf8" }).trim());

const plan = quick
  ? {
      echo: [
        [100, 3_000],
        [65_536, 200],
      ],
      sync: [1_000],
      fanout: [8],
      rounds: 2,
      zones10k: {
        zones: 8,
        processes: 2,
        rounds: 2,
        connectTimeoutMs: 60_000,
        roundTimeoutMs: 30_000,
      },
      storeZones: 6,
      multiZones: 6,
      memory: 30_000,
      stores: 1_000,
    }
  : {
      echo: [
        [100, 40_000],
        [1024, 30_000],
        [65_536, 3_000],
      ],
      sync: [1_000, 10_000, 100_000],
      fanout: [10, 100, 1000],
      rounds: 10,
      zones10k: {
        zones: 10_000,
        processes: 4,
        rounds: 5,
        connectTimeoutMs: 300_000,
        roundTimeoutMs: 60_000,
      },
      storeZones: 1_000,
      multiZones: 1_000,
      memory: 1_000_000,
      stores: 100_000,
    };
const zonesPerConnection = Number(process.env.KDS_BENCH_ZONES_PER_CONNECTION ?? 1);
const syncSize = plan.sync.at(-1) as number;
const fanoutSize = plan.fanout.at(-1) as number;
const storeKinds: StoreKind[] = ["memory", "embedded", "postgres"];
const serverUp = await serverAnswers();
// One embedded PostgreSQL for the whole run (each scenario gets a fresh schema); child processes find it in the environment.
process.env.KDS_BENCH_EMBEDDED_URL = await embeddedUrl();
const bigHeap = ["--max-old-space-size=8192"];
// The global of each sync run in a fresh process too, so what earlier scenarios leave behind (heap, connections) cannot skew it.
const syncBench = (
  n: number,
  mode: "sotw" | "delta",
  count: boolean,
  store: StoreKind = "memory",
): Promise<SyncResult | typeof SKIPPED> =>
  inFreshProcess(new URL("./sync.ts", import.meta.url).href, [
    n,
    mode,
    count ? "count" : "time",
    store,
  ]);
const fanout = (options: FanoutOptions): Promise<FanoutResult | typeof SKIPPED> =>
  inFreshProcess(new URL("./fanout.ts", import.meta.url).href, [JSON.stringify(options)], bigHeap);

const echo: { size: number; raw: EchoResult; mux: EchoResult; grpcJs: EchoResult }[] = [];
for (const [size, count] of plan.echo as [number, number][]) {
  log(`echo ${size} B x ${count}`);
  const raw = await rawConnectEcho(size, count);
  const mux = await muxEcho(size, count);
  const grpcJs = await grpcJsEcho(size, count);
  echo.push({ size, raw, mux, grpcJs });
}

const onMemory = (r: SyncResult | typeof SKIPPED): SyncResult => {
  if (r === SKIPPED) throw new Error("a memory-store scenario cannot be skipped");
  return r;
};
const sync: SyncResult[] = [];
for (const n of plan.sync) {
  for (const mode of ["delta", "sotw"] as const) {
    log(`sync ${n} ${mode}`);
    const timed = onMemory(await syncBench(n, mode, false));
    const counted = onMemory(await syncBench(n, mode, true));
    sync.push({
      ...timed,
      initialBytes: counted.initialBytes,
      resumeBytes: counted.resumeBytes,
      resumeResources: counted.resumeResources,
    });
  }
}
const storeSync: Partial<Record<StoreKind, SyncResult | typeof SKIPPED>> = {
  memory: sync.find((s) => s.resources === syncSize && s.mode === "delta"),
};
for (const kind of ["embedded", "postgres"] as const) {
  log(`sync ${syncSize} delta, global on ${kind}`);
  storeSync[kind] = await syncBench(syncSize, "delta", false, kind);
}

// The zones in two processes: in one, each zone's arrival also waited for the other zones sharing its event loop (real zones run on their own machines), so the figure measured the zones' loop as much as the global.
const fanoutProcesses = 2;
const fanouts: FanoutResult[] = [];
for (const zones of plan.fanout) {
  log(`fan-out ${zones} zones`);
  const r = await fanout({ zones, rounds: plan.rounds, processes: fanoutProcesses });
  if (r === SKIPPED) throw new Error("a memory-store scenario cannot be skipped");
  fanouts.push(r);
}
// The cross-zone flow at the largest size: one zone's zone-to-zones change reaching every other zone through the global.
log(`fan-out ${fanoutSize} zones, cross-zone`);
const crossZoneRun = await fanout({
  zones: fanoutSize,
  rounds: plan.rounds,
  processes: fanoutProcesses,
  crossZone: true,
});
if (crossZoneRun === SKIPPED) throw new Error("a memory-store scenario cannot be skipped");
const crossZone: FanoutResult = crossZoneRun;
const storeFanout: Partial<Record<StoreKind, FanoutResult | typeof SKIPPED>> = {
  memory: fanouts.find((f) => f.zones === fanoutSize),
};
for (const kind of ["embedded", "postgres"] as const) {
  log(`fan-out ${plan.storeZones} zones, global on ${kind}`);
  storeFanout[kind] = await fanout({
    zones: plan.storeZones,
    rounds: plan.rounds,
    store: kind,
    processes: fanoutProcesses,
  });
}

const orSkipped = <T extends object>(
  r: T | typeof SKIPPED | undefined,
  figure: (r: T) => number,
): number | string => (r === undefined ? Number.NaN : r === SKIPPED ? SKIPPED : figure(r));
let multi: FanoutResult | typeof SKIPPED | undefined;
let storeWrites: Awaited<ReturnType<typeof storesBench>> = [];
let memory: MemoryResult | undefined;
let zones10k: FanoutResult | undefined;
const summaryFile = fileURLToPath(
  new URL(
    `./results/${quick ? "quick" : "full"}-${startedAt.toISOString().replace(/[:.]/g, "-")}.json`,
    import.meta.url,
  ),
);
mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
flush(false);
log(`summary file (rewritten after each scenario): ${summaryFile}`);

log(`3 global instances on the PostgreSQL server, ${plan.multiZones} zones`);
multi = await fanout({
  zones: plan.multiZones,
  rounds: plan.rounds,
  store: "postgres",
  instances: 3,
  processes: 2,
});
flush(false);

log(`stores ${plan.stores} resources: ${storeKinds.join(", ")}`);
storeWrites = await storesBench(plan.stores, storeKinds);
flush(false);

log(`memory ${plan.memory} messages`);
memory = await inFreshProcess<MemoryResult>(new URL("./memory.ts", import.meta.url).href, [
  plan.memory,
]);
flush(false);

// Last, as the longest: the figures above are in the summary file even if it does not finish.
log(
  `scale: ${plan.zones10k.zones} zones in ${plan.zones10k.processes} processes, ${zonesPerConnection} per HTTP/2 connection`,
);
// Bounded in time: a run that does not connect every zone (or deliver every change) says so in zones10k.complete and run.complete.
const scale = await fanout({ ...plan.zones10k, zonesPerConnection });
if (scale === SKIPPED) throw new Error("a memory-store scenario cannot be skipped");
zones10k = scale;
await stopEmbedded();
const durationSeconds = (performance.now() - started) / 1000;
const summary = flush(true);

/**
 * Writes the summary file with every figure measured so far under its
 * stable key (bench/summary.ts, bench/README.md); `run.complete` says
 * whether every scenario ran.
 */
function flush(complete: boolean): Record<string, unknown> {
  const summary: Record<string, unknown> = {};
  const set = (key: string, value: unknown): void => setAt(summary, key, value);
  set("run.complete", complete && zones10k?.complete === true);
  set("run.quick", quick);
  set("run.startedAt", startedAt.toISOString());
  set("run.durationSeconds", (performance.now() - started) / 1000);
  set("machine.cpus", cpus().length);
  set("machine.cpuModel", cpus()[0]?.model ?? "?");
  set("machine.memoryGiB", totalmem() / 2 ** 30);
  set("machine.node", process.version);
  set("machine.connect", pkg("@connectrpc/connect"));
  set("machine.loadAverage1m", load[0]);
  set("machine.loadAverage5m", load[1]);
  set("machine.fdSoftLimit", fdLimit("-Sn"));
  set("machine.fdHardLimit", fdLimit("-Hn"));
  const echoAt = (size: number) => echo.find((e) => e.size === size);
  for (const [label, size] of [
    ["100B", 100],
    ["64KiB", 65_536],
  ] as const) {
    const e = echoAt(size);
    set(
      `echo.${label}.muxPerRaw`,
      e === undefined ? Number.NaN : e.mux.msgPerSec / e.raw.msgPerSec,
    );
    set(
      `echo.${label}.muxPerGrpcJs`,
      e === undefined ? Number.NaN : e.mux.msgPerSec / e.grpcJs.msgPerSec,
    );
  }
  set("echo.64KiB.muxMBps", echoAt(65_536)?.mux.mbPerSec ?? Number.NaN);
  const delta = sync.find((s) => s.resources === syncSize && s.mode === "delta");
  const sotw = sync.find((s) => s.resources === syncSize && s.mode === "sotw");
  set("sync.resources", syncSize);
  set("sync.delta.catchUpSeconds", (delta?.catchUpMs ?? Number.NaN) / 1000);
  set("sync.delta.initialSeconds", (delta?.initialMs ?? Number.NaN) / 1000);
  set("sync.sotw.initialSeconds", (sotw?.initialMs ?? Number.NaN) / 1000);
  set("sync.delta.initialMiB", (delta?.initialBytes ?? Number.NaN) / 2 ** 20);
  set("sync.resumeChanged", delta?.resumeChanged ?? Number.NaN);
  set("sync.delta.resumeMs", delta?.resumeMs ?? Number.NaN);
  set("sync.delta.resumeResources", delta?.resumeResources ?? Number.NaN);
  set("sync.sotw.resumeResources", sotw?.resumeResources ?? Number.NaN);
  const big = fanouts.find((f) => f.zones === fanoutSize);
  set("fanout.zones", fanoutSize);
  set("fanout.connectSeconds", (big?.connectMs ?? Number.NaN) / 1000);
  set("fanout.p50Ms", big?.p50Ms ?? Number.NaN);
  set("fanout.p99Ms", big?.p99Ms ?? Number.NaN);
  set("fanout.crossZone.p50Ms", crossZone.p50Ms);
  set("fanout.crossZone.p99Ms", crossZone.p99Ms);
  set("idleZone.heapKiB", big?.heapPerZoneKiB ?? Number.NaN);
  set("idleZone.rssKiB", big?.rssPerZoneKiB ?? Number.NaN);
  set("zones10k.zones", zones10k?.zones ?? Number.NaN);
  set("zones10k.complete", zones10k?.complete ?? false);
  set("zones10k.connected", zones10k?.connected ?? Number.NaN);
  set("zones10k.processes", zones10k?.processes ?? Number.NaN);
  set("zones10k.connections", zones10k?.connections ?? Number.NaN);
  set("zones10k.connectSeconds", (zones10k?.connectMs ?? Number.NaN) / 1000);
  set("zones10k.heapPerZoneKiB", zones10k?.heapPerZoneKiB ?? Number.NaN);
  set("zones10k.rssPerZoneKiB", zones10k?.rssPerZoneKiB ?? Number.NaN);
  set("zones10k.p50Ms", zones10k?.p50Ms ?? Number.NaN);
  set("zones10k.p99Ms", zones10k?.p99Ms ?? Number.NaN);
  set("stores.fanout.zones", plan.storeZones);
  set("stores.writes.resources", plan.stores);
  for (const kind of storeKinds) {
    set(
      `stores.sync.${kind}.initialSeconds`,
      orSkipped(storeSync[kind], (r) => r.initialMs / 1000),
    );
    set(
      `stores.fanout.${kind}.connectSeconds`,
      orSkipped(storeFanout[kind], (r) => r.connectMs / 1000),
    );
    set(
      `stores.fanout.${kind}.p50Ms`,
      orSkipped(storeFanout[kind], (r) => r.p50Ms),
    );
    set(
      `stores.fanout.${kind}.p99Ms`,
      orSkipped(storeFanout[kind], (r) => r.p99Ms),
    );
    const row = storeWrites.find((r) => r.store === kind);
    set(
      `stores.writes.${kind}.writesPerSec`,
      row === undefined ? Number.NaN : "skipped" in row ? row.skipped : row.writesPerSec,
    );
  }
  set("multiInstance.instances", 3);
  set("multiInstance.zones", plan.multiZones);
  set(
    "multiInstance.connectSeconds",
    orSkipped(multi, (r) => r.connectMs / 1000),
  );
  set(
    "multiInstance.p50Ms",
    orSkipped(multi, (r) => r.p50Ms),
  );
  set(
    "multiInstance.p99Ms",
    orSkipped(multi, (r) => r.p99Ms),
  );
  set("memory.messages", memory?.messages ?? Number.NaN);
  set("memory.heapGrowthMiB", memory?.heapGrowthMiB ?? Number.NaN);
  set("memory.rssGrowthMiB", memory?.rssGrowthMiB ?? Number.NaN);
  writeFileSync(
    summaryFile,
    `${JSON.stringify({ ...summary, details: { echo, sync, fanout: fanouts, storeSync, storeFanout, zones10k, multiInstance: multi, storeWrites, memory, serverUrl: serverUrl.replace(/\/\/[^@]*@/, "//…@") } }, null, 2)}\n`,
  );
  return summary;
}

const fmt = (n: number, digits = 0): string =>
  n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
const figure = (v: number | string, digits = 0): string =>
  typeof v === "string" ? v : fmt(v, digits);
const lines: string[] = [];
lines.push(`# kds-mux benchmark${quick ? " (quick smoke run: not for comparison)" : ""}`);
lines.push("");
lines.push(
  `Machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}, ${fmt(totalmem() / 2 ** 30)} GiB, load average ${load.map((l) => fmt(l, 2)).join(" / ")} at start, open files ${fdLimit("-Sn")} (soft) / ${fdLimit("-Hn")} (hard); Node ${process.version}; @connectrpc/connect ${pkg("@connectrpc/connect")}, @connectrpc/connect-node ${pkg("@connectrpc/connect-node")}, @bufbuild/protobuf ${pkg("@bufbuild/protobuf")}, @grpc/grpc-js ${pkg("@grpc/grpc-js")}.`,
);
lines.push("");
lines.push(
  "Every Connect client here passes `acceptCompression: []`: connect-node compresses by default (gzip/br above 1 KiB), which on loopback costs 3-8x throughput with random payloads, and grpc-js does not compress by default.",
);
lines.push("");
lines.push(
  "## Throughput: one logical mux stream vs raw Connect vs grpc-js (gRPC over h2c, echo, random payloads)",
);
lines.push("");
lines.push(
  "| payload | raw Connect msg/s | mux msg/s | grpc-js msg/s | mux / raw | mux / grpc-js | mux MB/s |",
);
lines.push("|---:|---:|---:|---:|---:|---:|---:|");
for (const e of echo) {
  lines.push(
    `| ${e.size} B | ${fmt(e.raw.msgPerSec)} | ${fmt(e.mux.msgPerSec)} | ${fmt(e.grpcJs.msgPerSec)} | ${fmt(e.mux.msgPerSec / e.raw.msgPerSec, 2)}x | ${fmt(e.mux.msgPerSec / e.grpcJs.msgPerSec, 2)}x | ${fmt(e.mux.mbPerSec, 1)} |`,
  );
}
lines.push("");
lines.push(
  "## Sync global -> zone over gRPC: initial, then resume after a reconnect with 0.1% changed",
);
lines.push("");
lines.push(
  "| resources | mode | initial | initial bytes | resume (changed) | resume | resume bytes | resources resent |",
);
lines.push("|---:|---|---:|---:|---:|---:|---:|---:|");
for (const s of sync) {
  lines.push(
    `| ${fmt(s.resources)} | ${s.mode} | ${fmt(s.initialMs)} ms | ${fmt(s.initialBytes / 1024)} KiB | ${fmt(s.resumeChanged)} | ${fmt(s.resumeMs)} ms | ${fmt(s.resumeBytes / 1024, 1)} KiB | ${fmt(s.resumeResources)} |`,
  );
}
lines.push("");
lines.push("## Fan-out: zones in child processes (global in a fresh process)");
lines.push("");
lines.push(
  "| zones | store | global instances | zone processes | HTTP/2 connections | all connected and synced | global heap / zone | global RSS / zone | change to all zones p50 | p99 |",
);
lines.push("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
const fanoutRow = (label: string, f: FanoutResult | typeof SKIPPED | undefined): void => {
  if (f === undefined) return;
  if (f === SKIPPED) lines.push(`| ${label} | ${SKIPPED} | | | | | | | | |`);
  else
    lines.push(
      `| ${fmt(f.zones)} | ${f.store} | ${f.instances} | ${f.processes} | ${fmt(f.connections)} | ${f.complete ? `${fmt(f.connectMs)} ms` : `**incomplete**: ${fmt(f.connected)} synced`} | ${fmt(f.heapPerZoneKiB)} KiB | ${fmt(f.rssPerZoneKiB)} KiB | ${fmt(f.p50Ms, 1)} ms | ${fmt(f.p99Ms, 1)} ms |`,
    );
};
for (const f of fanouts) fanoutRow(String(f.zones), f);
fanoutRow(`${plan.storeZones} embedded`, storeFanout.embedded);
fanoutRow(`${plan.storeZones} postgres`, storeFanout.postgres);
fanoutRow(String(zones10k.zones), zones10k);
fanoutRow(`${plan.multiZones} on 3 instances`, multi);
lines.push("");
lines.push(
  `Heap and RSS per zone are measured in the global's process (after GC) and include every instance and store client in it; with several instances, zone i dials instance i mod 3 and the change is written through instance 0.`,
);
lines.push("");
lines.push("## Stores");
lines.push("");
lines.push(
  `PostgreSQL server: ${serverUp ? "answered (a fresh schema per scenario, dropped after)" : SKIPPED}; embedded: PostgreSQL 18 from the npm-shipped binaries, one server per run in a fresh data dir, a fresh schema per scenario.`,
);
lines.push("");
lines.push(
  `| store | initial delta sync of ${fmt(syncSize)} | ${fmt(plan.storeZones)}-zone fan-out p50 / p99 | writes/s (${fmt(plan.stores)} in batches of 1,000) | list all | watch catch-up changes/s |`,
);
lines.push("|---|---:|---:|---:|---:|---:|");
for (const kind of storeKinds) {
  const row = storeWrites.find((r) => r.store === kind);
  const writes =
    row === undefined
      ? "?"
      : "skipped" in row
        ? row.skipped
        : `${fmt(row.writesPerSec)} | ${fmt(row.listMs)} ms | ${fmt(row.catchUpPerSec)}`;
  const f = storeFanout[kind];
  const fan =
    f === undefined ? "?" : f === SKIPPED ? SKIPPED : `${fmt(f.p50Ms, 1)} / ${fmt(f.p99Ms, 1)} ms`;
  lines.push(
    `| ${kind} | ${figure(
      orSkipped(storeSync[kind], (r) => r.initialMs / 1000),
      2,
    )}${storeSync[kind] === SKIPPED ? "" : " s"} | ${fan} | ${writes} |`,
  );
}
lines.push("");
lines.push(
  `## Memory over a long session (${fmt(memory.messages)} messages in ${fmt(memory.seconds, 1)} s, after GC, fresh process)`,
);
lines.push("");
lines.push("| messages | heap MiB | RSS MiB |");
lines.push("|---:|---:|---:|");
for (const s of memory.samples)
  lines.push(`| ${fmt(s.messages)} | ${fmt(s.heapMiB, 1)} | ${fmt(s.rssMiB, 1)} |`);
lines.push("");
lines.push(
  `Heap growth ${fmt(memory.heapGrowthMiB, 2)} MiB, RSS growth ${fmt(memory.rssGrowthMiB, 1)} MiB. Total run ${fmt(durationSeconds, 1)} s.`,
);

const report = lines.join("\n");
if (!quiet) console.log(report);
const kind = quick ? "quick" : "full";
writeFileSync(new URL(`./results/${kind}-latest.md`, import.meta.url), `${report}\n`);
console.log(
  `bench ${quick ? "smoke" : "run"} (${fmt(durationSeconds, 1)} s): summary in ${summaryFile}, report in ${fileURLToPath(new URL(`./results/${kind}-latest.md`, import.meta.url))}`,
);
const problems = summaryProblems(summary);
if (problems.length > 0) {
  log(`bench: ${problems.length} summary key(s) missing or not sane:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
console.log(
  `bench: every summary key present and sane${serverUp ? "" : ` (PostgreSQL server rows: ${SKIPPED})`}`,
);
process.exit(0);
