// npm run bench [-- --quick] [-- --markdown]: every scenario against its
// baseline and floor in one run. Each headline scenario runs several times,
// interleaved with its floor (and the sync's stores in an order rotated per
// repetition), and the summary holds each figure as median [min–max]
// (bench/summary.ts). Prints a markdown report (its first table from
// bench/table.ts), writes the machine-readable summary (every figure under
// the stable keys of bench/summary.ts, documented in bench/README.md) to
// bench/results/<quick|full>-<time>.json and prints that path. --quick runs
// every scenario once or twice at small sizes (a smoke run; no targets).
// --markdown also writes the table into docs/performance.md. Exits 1 when a
// key is missing or its value is not sane, so the smoke run in `npm test`
// checks the summary too. The load average is recorded before and after
// each scenario and repetition; a scenario run above half the CPUs is
// flagged busy, with a warning on stderr.
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
import { grpcJsEcho, http2Echo, muxEcho, rawConnectEcho, type EchoResult } from "./echo.ts";
import type { SyncResult } from "./sync.ts";
import type { SyncFloorResult } from "./sync-floor.ts";
import type { FanoutOptions, FanoutResult, InstancePath } from "./fanout.ts";
import { inFreshProcess } from "./fresh.ts";
import { cpuMark, otherCpus, type CpuMark } from "./other-work.ts";
import type { MemoryResult } from "./memory.ts";
import {
  embeddedUrl,
  serverAnswers,
  serverUrl,
  stopEmbedded,
  type StoreKind,
} from "./bench-store.ts";
import { storesBench } from "./stores.ts";
import {
  LOAD_SCENARIOS,
  SKIPPED,
  ratioOf,
  setAt,
  spreadOf,
  summaryProblems,
  type Spread,
} from "./summary.ts";
import { performanceTable, writePerformanceDoc } from "./table.ts";

const quick = process.argv.includes("--quick");
const quiet = process.argv.includes("--quiet");
const markdown = process.argv.includes("--markdown");
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
        [100, 2_000],
        [65_536, 100],
      ],
      echoReps: 2,
      syncSmall: [] as number[],
      sync: 1_000,
      syncReps: 1,
      syncWarmUp: 0,
      fanoutSmall: [] as number[],
      fanout: 8,
      fanoutReps: 1,
      rounds: 2,
      // A few zones per process would take many rounds to warm (defaultWarmupRounds in fanout.ts): the smoke keeps 2.
      fanoutWarmupRounds: 2 as number | undefined,
      zones10k: {
        zones: 8,
        processes: 2,
        rounds: 2,
        connectTimeoutMs: 60_000,
        roundTimeoutMs: 30_000,
      },
      zones10kReps: 1,
      storeZones: 6,
      multiZones: 6,
      multiReps: 1,
      memory: 30_000,
      stores: 1_000,
    }
  : {
      echo: [
        [100, 20_000],
        [1024, 15_000],
        [65_536, 2_000],
      ],
      echoReps: 5,
      syncSmall: [1_000, 10_000],
      sync: 100_000,
      syncReps: 5,
      syncWarmUp: 10_000,
      fanoutSmall: [10, 100],
      fanout: 1_000,
      fanoutReps: 3,
      rounds: 10,
      fanoutWarmupRounds: undefined as number | undefined,
      zones10k: {
        zones: 10_000,
        processes: 4,
        rounds: 5,
        connectTimeoutMs: 300_000,
        roundTimeoutMs: 60_000,
      },
      zones10kReps: 3,
      storeZones: 1_000,
      multiZones: 1_000,
      multiReps: 3,
      memory: 1_000_000,
      stores: 100_000,
    };
const zonesPerConnection = Number(process.env.KDS_BENCH_ZONES_PER_CONNECTION ?? 1);
const storeKinds: StoreKind[] = ["memory", "embedded", "postgres"];
const serverUp = await serverAnswers();
// One embedded PostgreSQL for the whole run (each scenario gets a fresh schema); child processes find it in the environment.
process.env.KDS_BENCH_EMBEDDED_URL = await embeddedUrl();
const bigHeap = ["--max-old-space-size=8192"];

/** `list` rotated left by `by`: repetition i starts with a different entry, so no entry is always first. */
const rotate = <T>(list: readonly T[], by: number): T[] =>
  list.map((_, i) => list[(i + by) % list.length] as T);

// Load average before and after each scenario and between its repetitions; other work over each scenario.
const busyThreshold = cpus().length * 0.5;
type Scenario = (typeof LOAD_SCENARIOS)[number];
/** Other work (bench/other-work.ts) above this many CPUs on average makes a scenario busy: a quarter of the machine. */
const busyOtherCpus = cpus().length * 0.25;
interface ScenarioLoad {
  before: number;
  after: number;
  max: number;
  /** CPU counters when the scenario started (undefined without /proc). */
  readonly start: CpuMark | undefined;
  /** CPUs other work kept busy on average over the scenario (NaN until it ended, or without /proc). */
  otherCpus: number;
}
const loads: Partial<Record<Scenario, ScenarioLoad>> = {};
/** Whether a scenario ran on a busy machine: by other work where /proc tells it, else by the load average. */
const isBusy = (l: ScenarioLoad): boolean =>
  Number.isFinite(l.otherCpus) ? l.otherCpus > busyOtherCpus : l.max > busyThreshold;
const loadStart = (s: Scenario): void => {
  const l = loadavg()[0] as number;
  loads[s] = { before: l, after: l, max: l, start: cpuMark(), otherCpus: Number.NaN };
};
const loadSample = (s: Scenario): void => {
  const l = loadavg()[0] as number;
  const entry = loads[s] as ScenarioLoad;
  entry.after = l;
  entry.max = Math.max(entry.max, l);
};
const loadEnd = (s: Scenario): void => {
  loadSample(s);
  const entry = loads[s] as ScenarioLoad;
  const end = cpuMark();
  if (entry.start !== undefined && end !== undefined) entry.otherCpus = otherCpus(entry.start, end);
  if (isBusy(entry))
    log(
      Number.isFinite(entry.otherCpus)
        ? `warning: the machine was busy during ${s} (other work kept ${entry.otherCpus.toFixed(2)} CPUs busy on average, above ${busyOtherCpus} = a quarter of ${cpus().length} CPUs): its figures are inflated`
        : `warning: the machine was busy during ${s} (1-minute load up to ${entry.max.toFixed(2)}, above ${busyThreshold} = half of ${cpus().length} CPUs): its figures are inflated`,
    );
};

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
  inFreshProcess(
    new URL("./fanout.ts", import.meta.url).href,
    [JSON.stringify({ warmupRounds: plan.fanoutWarmupRounds, ...options })],
    bigHeap,
  );
const onMemory = <T>(r: T | typeof SKIPPED): T => {
  if (r === SKIPPED) throw new Error("a memory-store scenario cannot be skipped");
  return r;
};

type EchoImpl = "raw" | "mux" | "grpcJs" | "http2";
const echoImpls: Record<EchoImpl, (size: number, count: number) => Promise<EchoResult>> = {
  raw: rawConnectEcho,
  mux: muxEcho,
  grpcJs: grpcJsEcho,
  http2: http2Echo,
};
/** Every echo run: size, repetition, implementation. */
const echoRuns: { size: number; rep: number; impl: EchoImpl; result: EchoResult }[] = [];
/** The headline syncs, by repetition and store, in the order they ran. */
const syncRuns: { rep: number; store: StoreKind; result: SyncResult | typeof SKIPPED }[] = [];
const syncFloors: SyncFloorResult[] = [];
/** One-off syncs (small sizes, state of the world, the counting runs). */
const sync: SyncResult[] = [];
const fanouts: FanoutResult[] = [];
const fanoutRuns: FanoutResult[] = [];
const storeFanout: Partial<Record<StoreKind, FanoutResult | typeof SKIPPED>> = {};
const multiRuns: (FanoutResult | typeof SKIPPED)[] = [];
let storeWrites: Awaited<ReturnType<typeof storesBench>> = [];
let memory: MemoryResult | undefined;
/** The cross-zone fan-out run, once it ran (flush runs before it, after every scenario). */
let crossZone: FanoutResult | undefined;
const zones10kRuns: FanoutResult[] = [];
const summaryFile = fileURLToPath(
  new URL(
    `./results/${quick ? "quick" : "full"}-${startedAt.toISOString().replace(/[:.]/g, "-")}.json`,
    import.meta.url,
  ),
);
mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
log(`summary file (rewritten after each scenario): ${summaryFile}`);

loadStart("echo");
for (let rep = 0; rep < plan.echoReps; rep++) {
  for (const [size, count] of plan.echo as [number, number][]) {
    const order = rotate(["raw", "mux", "grpcJs", "http2"] as const, rep);
    log(
      `echo ${size} B x ${count}, repetition ${rep + 1} of ${plan.echoReps}: ${order.join(", ")}`,
    );
    for (const impl of order)
      echoRuns.push({ size, rep, impl, result: await echoImpls[impl](size, count) });
  }
  loadSample("echo");
}
loadEnd("echo");
flush(false);

loadStart("sync");
if (plan.syncWarmUp > 0) {
  // Not counted: whatever the first sync of a run pays once (a cold page cache, tsx's transform cache, the embedded PostgreSQL's first work) is paid here.
  log(`sync ${plan.syncWarmUp} delta (warm-up, not counted)`);
  onMemory(await syncBench(plan.syncWarmUp, "delta", false));
}
for (let rep = 0; rep < plan.syncReps; rep++) {
  const order = rotate(["floor", ...storeKinds] as const, rep);
  log(`sync ${plan.sync} delta, repetition ${rep + 1} of ${plan.syncReps}: ${order.join(", ")}`);
  for (const kind of order) {
    if (kind === "floor")
      syncFloors[rep] = await inFreshProcess<SyncFloorResult>(
        new URL("./sync-floor.ts", import.meta.url).href,
        [plan.sync],
      );
    else
      syncRuns.push({ rep, store: kind, result: await syncBench(plan.sync, "delta", false, kind) });
  }
  loadSample("sync");
  flush(false);
}
for (const n of [...plan.syncSmall, plan.sync]) {
  for (const mode of ["delta", "sotw"] as const) {
    log(`sync ${n} ${mode} (one run${n === plan.sync ? ", counting bytes" : ""})`);
    const timed =
      n === plan.sync && mode === "delta"
        ? onMemory(syncRuns.find((r) => r.store === "memory")?.result as SyncResult)
        : onMemory(await syncBench(n, mode, false));
    const counted = onMemory(await syncBench(n, mode, true));
    sync.push({
      ...timed,
      initialBytes: counted.initialBytes,
      resumeBytes: counted.resumeBytes,
      resumeResources: counted.resumeResources,
    });
  }
}
loadEnd("sync");
flush(false);

// The zones in two processes: in one, each zone's arrival also waited for the other zones sharing its event loop (real zones run on their own machines), so the figure measured the zones' loop as much as the global.
const fanoutProcesses = 2;
loadStart("fanout");
for (const zones of plan.fanoutSmall) {
  log(`fan-out ${zones} zones (one run)`);
  fanouts.push(onMemory(await fanout({ zones, rounds: plan.rounds, processes: fanoutProcesses })));
}
for (let rep = 0; rep < plan.fanoutReps; rep++) {
  log(
    `fan-out ${plan.fanout} zones, repetition ${rep + 1} of ${plan.fanoutReps}, floor interleaved`,
  );
  fanoutRuns.push(
    onMemory(await fanout({ zones: plan.fanout, rounds: plan.rounds, processes: fanoutProcesses })),
  );
  loadSample("fanout");
}
for (const kind of ["embedded", "postgres"] as const) {
  log(`fan-out ${plan.storeZones} zones, global on ${kind} (one run)`);
  storeFanout[kind] = await fanout({
    zones: plan.storeZones,
    rounds: plan.rounds,
    store: kind,
    processes: fanoutProcesses,
    floor: "none",
  });
}
// The cross-zone flow at the fan-out's size: one zone's zone-to-zones change reaching every other zone through the global (one run).
log(`fan-out ${plan.fanout} zones, cross-zone (one run)`);
crossZone = onMemory(
  await fanout({
    zones: plan.fanout,
    rounds: plan.rounds,
    processes: fanoutProcesses,
    floor: "none",
    crossZone: true,
  }),
);
loadEnd("fanout");
flush(false);

loadStart("multiInstance");
for (let rep = 0; rep < plan.multiReps; rep++) {
  log(
    `3 global instances on the PostgreSQL server, ${plan.multiZones} zones, repetition ${rep + 1} of ${plan.multiReps}`,
  );
  const r = await fanout({
    zones: plan.multiZones,
    rounds: plan.rounds,
    store: "postgres",
    instances: 3,
    processes: 2,
  });
  multiRuns.push(r);
  loadSample("multiInstance");
  if (r === SKIPPED) break;
}
loadEnd("multiInstance");
flush(false);

loadStart("stores");
log(`stores ${plan.stores} resources: ${storeKinds.join(", ")}`);
storeWrites = await storesBench(plan.stores, storeKinds);
loadEnd("stores");
flush(false);

loadStart("memory");
log(`memory ${plan.memory} messages`);
memory = await inFreshProcess<MemoryResult>(new URL("./memory.ts", import.meta.url).href, [
  plan.memory,
]);
loadEnd("memory");
flush(false);

// Last, as the longest: the figures above are in the summary file even if it does not finish.
loadStart("zones10k");
for (let rep = 0; rep < plan.zones10kReps; rep++) {
  log(
    `scale: ${plan.zones10k.zones} zones in ${plan.zones10k.processes} processes, ${zonesPerConnection} per HTTP/2 connection, repetition ${rep + 1} of ${plan.zones10kReps}`,
  );
  // Bounded in time: a run that does not connect every zone (or deliver every change) says so in zones10k.complete and run.complete.
  zones10kRuns.push(onMemory(await fanout({ ...plan.zones10k, zonesPerConnection })));
  loadSample("zones10k");
  flush(false);
}
loadEnd("zones10k");
await stopEmbedded();
const durationSeconds = (performance.now() - started) / 1000;
const summary = flush(true);

/** The spread of `figure` over `runs`, or SKIPPED when the runs were skipped (no PostgreSQL server). */
function spreadOrSkipped<T extends object>(
  runs: readonly (T | typeof SKIPPED)[],
  figure: (r: T) => number,
): Spread | typeof SKIPPED {
  if (runs.length > 0 && runs.every((r) => r === SKIPPED)) return SKIPPED;
  return spreadOf(runs.map((r) => (r === SKIPPED ? Number.NaN : figure(r))));
}

/** The figure of a fan-out's floor (NaN when it has none). */
function floorOf(
  r: FanoutResult,
  figure: (f: NonNullable<FanoutResult["floor"]>) => number,
): number {
  return r.floor === undefined ? Number.NaN : figure(r.floor);
}

/**
 * Writes the summary file with every figure measured so far under its
 * stable key (bench/summary.ts, bench/README.md); `run.complete` says
 * whether every scenario ran.
 */
function flush(complete: boolean): Record<string, unknown> {
  const summary: Record<string, unknown> = {};
  const set = (key: string, value: unknown): void => setAt(summary, key, value);
  const zones10kComplete =
    zones10kRuns.length === plan.zones10kReps && zones10kRuns.every((r) => r.complete);
  set("run.complete", complete && zones10kComplete);
  set("run.quick", quick);
  set("run.startedAt", startedAt.toISOString());
  set("run.durationSeconds", (performance.now() - started) / 1000);
  set("run.busyThreshold1m", busyThreshold);
  set("run.busyOtherCpus", busyOtherCpus);
  set("run.busyScenarios", Object.values(loads).filter(isBusy).length);
  set("machine.cpus", cpus().length);
  set("machine.cpuModel", cpus()[0]?.model ?? "?");
  set("machine.memoryGiB", totalmem() / 2 ** 30);
  set("machine.node", process.version);
  set("machine.connect", pkg("@connectrpc/connect"));
  set("machine.loadAverage1m", load[0]);
  set("machine.loadAverage5m", load[1]);
  set("machine.fdSoftLimit", fdLimit("-Sn"));
  set("machine.fdHardLimit", fdLimit("-Hn"));
  for (const s of LOAD_SCENARIOS) {
    const l = loads[s];
    set(`load.${s}.before1m`, l?.before ?? Number.NaN);
    set(`load.${s}.after1m`, l?.after ?? Number.NaN);
    set(`load.${s}.max1m`, l?.max ?? Number.NaN);
    set(`load.${s}.otherCpus`, l?.otherCpus ?? Number.NaN);
    set(`load.${s}.busy`, l !== undefined && isBusy(l));
  }

  set("echo.repetitions", plan.echoReps);
  for (const [label, size] of [
    ["100B", 100],
    ["64KiB", 65_536],
  ] as const) {
    const per = (impl: EchoImpl): number[] =>
      echoRuns
        .filter((e) => e.size === size && e.impl === impl)
        .sort((a, b) => a.rep - b.rep)
        .map((e) => e.result.msgPerSec);
    const mux = per("mux");
    set(`echo.${label}.muxMsgPerSec`, spreadOf(mux));
    set(`echo.${label}.floor.msgPerSec`, spreadOf(per("http2")));
    set(`echo.${label}.perFloor`, ratioOf(mux, per("http2")));
    set(`echo.${label}.muxPerRaw`, ratioOf(mux, per("raw")));
    set(`echo.${label}.muxPerGrpcJs`, ratioOf(mux, per("grpcJs")));
  }
  set(
    "echo.64KiB.muxMBps",
    spreadOf(
      echoRuns.filter((e) => e.size === 65_536 && e.impl === "mux").map((e) => e.result.mbPerSec),
    ),
  );

  set("sync.resources", plan.sync);
  set("sync.repetitions", plan.syncReps);
  const floorMs = syncFloors.map((f) => f.floorMs);
  set("sync.floor.seconds", spreadOf(floorMs.map((ms) => ms / 1000)));
  set("sync.floor.bytes", syncFloors[0]?.bytes ?? Number.NaN);
  const byStore = (kind: StoreKind) =>
    syncRuns.filter((r) => r.store === kind).sort((a, b) => a.rep - b.rep);
  for (const kind of storeKinds) {
    const runs = byStore(kind);
    const results = runs.map((r) => r.result);
    set(
      `stores.sync.${kind}.initialSeconds`,
      spreadOrSkipped(results, (r) => r.initialMs / 1000),
    );
    set(
      `stores.sync.${kind}.perFloor`,
      runs.length > 0 && results.every((r) => r === SKIPPED)
        ? SKIPPED
        : ratioOf(
            results.map((r) => (r === SKIPPED ? Number.NaN : r.initialMs)),
            runs.map((r) => floorMs[r.rep] ?? Number.NaN),
          ),
    );
    set(
      `stores.sync.${kind}.zoneCpuSeconds`,
      spreadOrSkipped(results, (r) => r.initialZoneCpuMs / 1000),
    );
    set(
      `stores.sync.${kind}.globalCpuSeconds`,
      spreadOrSkipped(results, (r) => r.phases.global.initial.cpuMs / 1000),
    );
  }
  const memoryRuns = byStore("memory").map((r) => onMemory(r.result));
  set("sync.delta.initialSeconds", spreadOf(memoryRuns.map((r) => r.initialMs / 1000)));
  set(
    "sync.delta.perFloor",
    ratioOf(
      memoryRuns.map((r) => r.initialMs),
      byStore("memory").map((r) => floorMs[r.rep] ?? Number.NaN),
    ),
  );
  // The first counted sync of the run (repetition 0's first store that ran), against its store's median.
  const first = syncRuns.find((r) => r.result !== SKIPPED);
  const firstOf = (figure: (r: SyncResult) => number): number => {
    if (first === undefined) return Number.NaN;
    const same = byStore(first.store).map((r) => onMemory(r.result));
    return figure(onMemory(first.result)) / spreadOf(same.map(figure)).median;
  };
  set(
    "sync.firstPerMedian",
    firstOf((r) => r.initialMs),
  );
  set(
    "sync.firstZoneCpuPerMedian",
    firstOf((r) => r.initialZoneCpuMs),
  );
  const delta = sync.find((s) => s.resources === plan.sync && s.mode === "delta");
  const sotw = sync.find((s) => s.resources === plan.sync && s.mode === "sotw");
  set("sync.delta.catchUpSeconds", (memoryRuns[0]?.catchUpMs ?? Number.NaN) / 1000);
  set("sync.sotw.initialSeconds", (sotw?.initialMs ?? Number.NaN) / 1000);
  set("sync.delta.initialMiB", (delta?.initialBytes ?? Number.NaN) / 2 ** 20);
  set("sync.resumeChanged", memoryRuns[0]?.resumeChanged ?? Number.NaN);
  set("sync.delta.resumeMs", spreadOf(memoryRuns.map((r) => r.resumeMs)));
  set("sync.delta.resumeResources", delta?.resumeResources ?? Number.NaN);
  set("sync.sotw.resumeResources", sotw?.resumeResources ?? Number.NaN);

  const fanoutFigures = (
    prefix: string,
    runs: readonly (FanoutResult | typeof SKIPPED)[],
  ): void => {
    const skipped = runs.length > 0 && runs.every((r) => r === SKIPPED);
    const measured = runs.filter((r): r is FanoutResult => r !== SKIPPED);
    const ratio = (figure: (r: FanoutResult) => number, floor: (r: FanoutResult) => number) =>
      skipped ? SKIPPED : ratioOf(measured.map(figure), measured.map(floor));
    /** A figure of each run under `key`. */
    const figure = (key: string, of: (r: FanoutResult) => number): void =>
      set(`${prefix}.${key}`, spreadOrSkipped(runs, of));
    /** The floor's figure under `floor.<floorKey>`, and each run's figure over it under `ratioKey`. */
    const besideFloor = (
      floorKey: string,
      ratioKey: string,
      of: (r: FanoutResult) => number,
      floorFigure: (f: NonNullable<FanoutResult["floor"]>) => number,
    ): void => {
      const floor = (r: FanoutResult): number => floorOf(r, floorFigure);
      set(`${prefix}.floor.${floorKey}`, spreadOrSkipped(runs, floor));
      set(`${prefix}.${ratioKey}`, ratio(of, floor));
    };
    figure("connectSeconds", (r) => r.connectMs / 1000);
    figure("p50Ms", (r) => r.p50Ms);
    figure("p99Ms", (r) => r.p99Ms);
    for (const p of ["p50", "p99"] as const)
      besideFloor(
        `${p}Ms`,
        `${p}PerFloor`,
        (r) => r[`${p}Ms`],
        (f) => f[`${p}Ms`],
      );
    figure("globalCpuUsPerZoneChange", (r) => r.globalCpuUsPerZoneChange);
    figure("lastWriteMs", (r) => r.lastWriteMs);
    figure("zonesCpuUsPerZoneChange", (r) => r.zonesCpuUsPerZoneChange);
    for (const side of ["global", "zones"] as const)
      besideFloor(
        `${side}CpuUsPerStream`,
        `${side}CpuPerFloor`,
        (r) => r[`${side}CpuUsPerZoneChange`],
        (f) => f[`${side}CpuUsPerStream`],
      );
  };
  set("fanout.zones", plan.fanout);
  set("fanout.repetitions", plan.fanoutReps);
  fanoutFigures("fanout", fanoutRuns);
  set("fanout.crossZone.p50Ms", crossZone?.p50Ms ?? Number.NaN);
  set("fanout.crossZone.p99Ms", crossZone?.p99Ms ?? Number.NaN);
  set("idleZone.heapKiB", spreadOf(fanoutRuns.map((r) => r.heapPerZoneKiB)));
  set("idleZone.rssKiB", spreadOf(fanoutRuns.map((r) => r.rssPerZoneKiB)));
  const idleFloor = (figure: (f: NonNullable<FanoutResult["floor"]>) => number) =>
    fanoutRuns.map((r) => floorOf(r, figure));
  set("idleZone.floor.heapKiB", spreadOf(idleFloor((f) => f.heapPerStreamKiB)));
  set("idleZone.floor.rssKiB", spreadOf(idleFloor((f) => f.rssPerStreamKiB)));
  set("idleZone.floor.zoneSideHeapKiB", spreadOf(idleFloor((f) => f.clientHeapPerStreamKiB)));
  set("idleZone.floor.zoneSideRssKiB", spreadOf(idleFloor((f) => f.clientRssPerStreamKiB)));
  set(
    "idleZone.heapPerFloor",
    ratioOf(
      fanoutRuns.map((r) => r.heapPerZoneKiB),
      idleFloor((f) => f.heapPerStreamKiB),
    ),
  );
  set(
    "idleZone.rssPerFloor",
    ratioOf(
      fanoutRuns.map((r) => r.rssPerZoneKiB),
      idleFloor((f) => f.rssPerStreamKiB),
    ),
  );

  set("zones10k.zones", plan.zones10k.zones);
  set("zones10k.repetitions", plan.zones10kReps);
  set("zones10k.complete", zones10kComplete);
  set(
    "zones10k.connected",
    zones10kRuns.length === 0 ? Number.NaN : Math.min(...zones10kRuns.map((r) => r.connected)),
  );
  set("zones10k.processes", zones10kRuns[0]?.processes ?? Number.NaN);
  set("zones10k.connections", zones10kRuns[0]?.connections ?? Number.NaN);
  fanoutFigures("zones10k", zones10kRuns);
  set("zones10k.heapPerZoneKiB", spreadOf(zones10kRuns.map((r) => r.heapPerZoneKiB)));
  set("zones10k.rssPerZoneKiB", spreadOf(zones10kRuns.map((r) => r.rssPerZoneKiB)));

  set("stores.fanout.zones", plan.storeZones);
  set("stores.writes.resources", plan.stores);
  for (const kind of storeKinds) {
    const f =
      kind === "memory" ? fanoutRuns[0] : (storeFanout[kind] as FanoutResult | typeof SKIPPED);
    const one = (figure: (r: FanoutResult) => number): number | string =>
      f === undefined ? Number.NaN : f === SKIPPED ? SKIPPED : figure(f);
    set(
      `stores.fanout.${kind}.connectSeconds`,
      one((r) => r.connectMs / 1000),
    );
    set(
      `stores.fanout.${kind}.p50Ms`,
      one((r) => r.p50Ms),
    );
    set(
      `stores.fanout.${kind}.p99Ms`,
      one((r) => r.p99Ms),
    );
    const row = storeWrites.find((r) => r.store === kind);
    set(
      `stores.writes.${kind}.writesPerSec`,
      row === undefined ? Number.NaN : "skipped" in row ? row.skipped : row.writesPerSec,
    );
  }
  set("multiInstance.instances", 3);
  set("multiInstance.zones", plan.multiZones);
  set("multiInstance.repetitions", plan.multiReps);
  fanoutFigures("multiInstance", multiRuns);
  // The change's way through PostgreSQL: instance 0 wrote it, the others learn of it by NOTIFY (the slowest of them).
  const others = (r: FanoutResult, figure: (p: InstancePath) => number): number =>
    Math.max(...(r.path ?? []).filter((p) => p.instance > 0).map(figure));
  const writer = (r: FanoutResult, figure: (p: InstancePath) => number): number => {
    const own = r.path?.find((p) => p.instance === 0);
    return own === undefined ? Number.NaN : figure(own);
  };
  set(
    "multiInstance.path.committedMs",
    spreadOrSkipped(multiRuns, (r) => writer(r, (p) => p.committedMs)),
  );
  set(
    "multiInstance.path.writerSeenMs",
    spreadOrSkipped(multiRuns, (r) => writer(r, (p) => p.seenMs)),
  );
  set(
    "multiInstance.path.writerP99Ms",
    spreadOrSkipped(multiRuns, (r) => writer(r, (p) => p.p99Ms)),
  );
  set(
    "multiInstance.path.othersSeenMs",
    spreadOrSkipped(multiRuns, (r) => others(r, (p) => p.seenMs)),
  );
  set(
    "multiInstance.path.othersP99Ms",
    spreadOrSkipped(multiRuns, (r) => others(r, (p) => p.p99Ms)),
  );
  set("memory.messages", memory?.messages ?? Number.NaN);
  set("memory.heapGrowthMiB", memory?.heapGrowthMiB ?? Number.NaN);
  set("memory.rssGrowthMiB", memory?.rssGrowthMiB ?? Number.NaN);
  writeFileSync(
    summaryFile,
    `${JSON.stringify(
      {
        ...summary,
        details: {
          echo: echoRuns,
          syncRuns,
          syncFloors,
          sync,
          fanout: fanouts,
          fanoutRuns,
          storeFanout,
          zones10k: zones10kRuns,
          multiInstance: multiRuns,
          storeWrites,
          memory,
          serverUrl: serverUrl.replace(/\/\/[^@]*@/, "//…@"),
        },
      },
      null,
      2,
    )}\n`,
  );
  return summary;
}

const fmt = (n: number, digits = 0): string =>
  n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
const lines: string[] = [];
lines.push(`# kds-mux benchmark${quick ? " (quick smoke run: not for comparison)" : ""}`);
lines.push("");
lines.push(
  `Machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}, ${fmt(totalmem() / 2 ** 30)} GiB, load average ${load.map((l) => fmt(l, 2)).join(" / ")} at start, open files ${fdLimit("-Sn")} (soft) / ${fdLimit("-Hn")} (hard); Node ${process.version}; @connectrpc/connect ${pkg("@connectrpc/connect")}, @connectrpc/connect-node ${pkg("@connectrpc/connect-node")}, @bufbuild/protobuf ${pkg("@bufbuild/protobuf")}, @grpc/grpc-js ${pkg("@grpc/grpc-js")}.`,
);
lines.push("");
lines.push("## Headline figures, floors and ratios");
lines.push("");
lines.push(performanceTable(summary));
lines.push("");
lines.push(
  "Every Connect client here passes `acceptCompression: []`: connect-node compresses by default (gzip/br above 1 KiB), which on loopback costs 3-8x throughput with random payloads, and grpc-js does not compress by default.",
);
lines.push("");
lines.push(
  "## Echo: one logical mux stream vs raw Connect vs grpc-js vs plain node:http2 (h2c, random payloads; median msg/s of the repetitions)",
);
lines.push("");
lines.push(
  "| payload | raw Connect | mux | grpc-js | node:http2 (floor) | mux / raw | mux / grpc-js | mux / floor |",
);
lines.push("|---:|---:|---:|---:|---:|---:|---:|---:|");
for (const [size] of plan.echo as [number, number][]) {
  const med = (impl: EchoImpl): number =>
    spreadOf(
      echoRuns.filter((e) => e.size === size && e.impl === impl).map((e) => e.result.msgPerSec),
    ).median;
  lines.push(
    `| ${size} B | ${fmt(med("raw"))} | ${fmt(med("mux"))} | ${fmt(med("grpcJs"))} | ${fmt(med("http2"))} | ${fmt(med("mux") / med("raw"), 2)}x | ${fmt(med("mux") / med("grpcJs"), 2)}x | ${fmt(med("mux") / med("http2"), 2)}x |`,
  );
}
lines.push("");
lines.push(
  `## Sync of ${fmt(plan.sync)}, delta, each repetition in the order it ran (wall s; zone / global CPU s in brackets)`,
);
lines.push("");
lines.push("| repetition | order | floor | memory | embedded | postgres |");
lines.push("|---:|---|---:|---:|---:|---:|");
for (let rep = 0; rep < plan.syncReps; rep++) {
  const cell = (kind: StoreKind): string => {
    const r = syncRuns.find((s) => s.rep === rep && s.store === kind)?.result;
    return r === undefined
      ? "?"
      : r === SKIPPED
        ? SKIPPED
        : `${fmt(r.initialMs / 1000, 2)} (${fmt(r.initialZoneCpuMs / 1000, 2)} / ${fmt(r.phases.global.initial.cpuMs / 1000, 2)})`;
  };
  const f = syncFloors[rep];
  lines.push(
    `| ${rep + 1} | ${rotate(["floor", ...storeKinds], rep).join(", ")} | ${f === undefined ? "?" : `${fmt(f.floorMs / 1000, 2)} (${fmt(f.encodeMs / 1000, 2)} + ${fmt(f.transferMs / 1000, 2)} + ${fmt(f.decodeMs / 1000, 2)})`} | ${cell("memory")} | ${cell("embedded")} | ${cell("postgres")} |`,
  );
}
lines.push("");
lines.push("The floor's cell: encode + transfer + decode.");
lines.push("");
lines.push(
  "## Sync global -> zone over gRPC: initial, then resume after a reconnect with 0.1% changed (one run each)",
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
lines.push("## Fan-out: zones in child processes (global in a fresh process), every run");
lines.push("");
lines.push(
  "| zones | store | global instances | HTTP/2 connections | all connected and synced | global heap / zone | global RSS / zone | change to all zones p50 | p99 | floor p50 / p99 | floor heap / RSS per stream |",
);
lines.push("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
const fanoutRow = (f: FanoutResult | typeof SKIPPED | undefined, label = ""): void => {
  if (f === undefined) return;
  if (f === SKIPPED) lines.push(`| ${label} | ${SKIPPED} | | | | | | | | | |`);
  else
    lines.push(
      `| ${fmt(f.zones)} | ${f.store} | ${f.instances} | ${fmt(f.connections)} | ${f.complete ? `${fmt(f.connectMs)} ms` : `**incomplete**: ${fmt(f.connected)} synced`} | ${fmt(f.heapPerZoneKiB, 1)} KiB | ${fmt(f.rssPerZoneKiB, 1)} KiB | ${fmt(f.p50Ms, 1)} ms | ${fmt(f.p99Ms, 1)} ms | ${f.floor === undefined ? "-" : `${fmt(f.floor.p50Ms, 1)} / ${fmt(f.floor.p99Ms, 1)} ms (${f.floor.mode})`} | ${f.floor === undefined ? "-" : `${fmt(f.floor.heapPerStreamKiB, 1)} / ${fmt(f.floor.rssPerStreamKiB, 1)} KiB`} |`,
    );
};
for (const f of [...fanouts, ...fanoutRuns]) fanoutRow(f);
fanoutRow(storeFanout.embedded, `${plan.storeZones} embedded`);
fanoutRow(storeFanout.postgres, `${plan.storeZones} postgres`);
for (const f of multiRuns) fanoutRow(f, `${plan.multiZones} on 3 instances`);
for (const f of zones10kRuns) fanoutRow(f);
lines.push("");
lines.push(
  `Heap and RSS per zone are measured in the global's process (after GC) and include every instance and store client in it; with several instances, zone i dials instance i mod 3 and the change is written through instance 0. The floor: the same bytes written once to a plain node:http2 stream per zone, held by the same zone processes (interleaved: round by round beside the zones; after: once the zones stopped).`,
);
lines.push("");
lines.push("## Stores");
lines.push("");
lines.push(
  `PostgreSQL server: ${serverUp ? "answered (a fresh schema per scenario, dropped after)" : SKIPPED}; embedded: PostgreSQL 18 from the npm-shipped binaries, one server per run in a fresh data dir, a fresh schema per scenario.`,
);
lines.push("");
lines.push(
  `| store | writes/s (${fmt(plan.stores)} in batches of 1,000) | list all | watch catch-up changes/s |`,
);
lines.push("|---|---:|---:|---:|");
for (const kind of storeKinds) {
  const row = storeWrites.find((r) => r.store === kind);
  lines.push(
    `| ${kind} | ${row === undefined ? "?" : "skipped" in row ? row.skipped : `${fmt(row.writesPerSec)} | ${fmt(row.listMs)} ms | ${fmt(row.catchUpPerSec)}`} |`,
  );
}
if (memory !== undefined) {
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
}

const report = lines.join("\n");
if (!quiet) console.log(report);
const kind = quick ? "quick" : "full";
writeFileSync(new URL(`./results/${kind}-latest.md`, import.meta.url), `${report}\n`);
console.log(
  `bench ${quick ? "smoke" : "run"} (${fmt(durationSeconds, 1)} s): summary in ${summaryFile}, report in ${fileURLToPath(new URL(`./results/${kind}-latest.md`, import.meta.url))}`,
);
if (markdown) console.log(`bench: table written into ${writePerformanceDoc(summary)}`);
const busyScenarios = Object.entries(loads).filter(([, l]) => isBusy(l));
if (busyScenarios.length > 0)
  console.log(
    `bench: busy machine during ${busyScenarios.map(([s, l]) => (Number.isFinite(l.otherCpus) ? `${s} (other work ${fmt(l.otherCpus, 2)} CPUs)` : `${s} (load up to ${fmt(l.max, 1)})`)).join(", ")}: figures inflated, not for publishing`,
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
