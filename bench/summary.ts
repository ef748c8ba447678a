// The machine-readable summary of a bench run: every figure under a stable
// key (a dotted path into the JSON object bench/run.ts writes). SUMMARY_KEYS
// is the one list of keys, with unit, meaning and target; bench/README.md
// documents each (test/bench/summary.test.ts checks it does), and
// summaryProblems() checks a run produced each one with a sane value, so the
// smoke run in `npm test` fails on a missing key, NaN, a spread out of order
// or a p99 below its p50. A headline figure is a Spread (median, min, max,
// runs) over its repetitions; targets are judged on the median.

/** How a key's value is checked. */
export type SummaryRule =
  /** A finite number above zero. */
  | "positive"
  /** A finite number (growth may be negative). */
  | "finite"
  /** A non-empty string. */
  | "text"
  /** A boolean. */
  | "boolean"
  /** A finite number above zero, or the string "skipped: no server" (needs the PostgreSQL server). */
  | "positiveOrSkipped"
  /** A {@link Spread} of positive figures. */
  | "spread"
  /** A {@link Spread} of finite figures (growth may be negative). */
  | "spreadFinite"
  /** A {@link Spread} of positive figures, or "skipped: no server". */
  | "spreadOrSkipped"
  /** A {@link Spread} of finite ratios, or null when a floor was not above zero in some repetition: memory growth over a few zones is noise that can round to no page, or below zero. */
  | "spreadOrNone";

/**
 * A figure measured several times in one run: the median (what targets are
 * judged on), the smallest and largest sample, and how many samples. A
 * ratio's samples are the ratios of each repetition's figure to the floor
 * measured beside it (so a slow moment of the machine slows both).
 */
export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
  readonly runs: number;
}

/** The spread of `samples` (NaN figures when there are none or one is not finite: a missing figure must not look measured). */
export function spreadOf(samples: readonly number[]): Spread {
  const sorted = [...samples].sort((a, b) => a - b);
  const bad = sorted.length === 0 || sorted.some((v) => !Number.isFinite(v));
  const mid = sorted.length >> 1;
  const median =
    sorted.length % 2 === 1
      ? (sorted[mid] as number)
      : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
  return bad
    ? { median: Number.NaN, min: Number.NaN, max: Number.NaN, runs: samples.length }
    : { median, min: sorted[0] as number, max: sorted.at(-1) as number, runs: samples.length };
}

/** The spread of figure_i / floor_i over repetitions i; null when a floor was not above zero. */
export function ratioOf(figures: readonly number[], floors: readonly number[]): Spread | null {
  if (floors.some((f) => !(f > 0))) return null;
  return spreadOf(figures.map((f, i) => f / (floors[i] ?? Number.NaN)));
}

/** One documented key. */
export interface SummaryKey {
  readonly key: string;
  readonly unit: string;
  readonly rule: SummaryRule;
  /** What it measures. */
  readonly measures: string;
  /** What it should be ("-" for context figures); judged on the median for a spread. */
  readonly target: string;
}

const key = (
  k: string,
  unit: string,
  rule: SummaryRule,
  measures: string,
  target = "-",
): SummaryKey => ({ key: k, unit, rule, measures, target });

/** The scenarios whose load average a run records (`load.<scenario>.*`), in run order. */
export const LOAD_SCENARIOS = [
  "echo",
  "sync",
  "fanout",
  "multiInstance",
  "stores",
  "memory",
  "zones10k",
] as const;

const loadKeys = (scenario: string): SummaryKey[] => [
  key(
    `load.${scenario}.before1m`,
    "load",
    "finite",
    `1-minute load average when the \`${scenario}\` scenario started`,
  ),
  key(`load.${scenario}.after1m`, "load", "finite", "the same when it ended"),
  key(
    `load.${scenario}.max1m`,
    "load",
    "finite",
    "the highest 1-minute load average sampled before and after each of its repetitions",
  ),
  key(
    `load.${scenario}.otherCpus`,
    "CPUs",
    "finite",
    "CPUs kept busy on average during the scenario by work other than the bench's (all CPU time from /proc/stat minus that of the bench's processes, their children and the PostgreSQL server's; bench/other-work.ts)",
  ),
  key(
    `load.${scenario}.busy`,
    "boolean",
    "boolean",
    "whether `otherCpus` was above `run.busyOtherCpus` (without /proc: whether the load maximum was above `run.busyThreshold1m`): its figures are inflated by other work",
    "false",
  ),
];

const storeKeys = (store: "memory" | "embedded" | "postgres", label: string): SummaryKey[] => {
  const spread: SummaryRule = store === "postgres" ? "spreadOrSkipped" : "spread";
  const rule: SummaryRule = store === "postgres" ? "positiveOrSkipped" : "positive";
  return [
    key(
      `stores.sync.${store}.initialSeconds`,
      "s",
      spread,
      `initial delta sync of \`sync.resources\` resources with the global on ${label} (\`sync.repetitions\` times)`,
      "<= 1.0",
    ),
    key(
      `stores.sync.${store}.perFloor`,
      "ratio",
      spread,
      "that sync over the sync floor measured in the same repetition (`sync.floor.seconds`)",
    ),
    key(
      `stores.sync.${store}.zoneCpuSeconds`,
      "s",
      spread,
      "the zone process's CPU time (user + system) over that sync: steadier than wall time on a loaded machine",
    ),
    key(
      `stores.sync.${store}.globalCpuSeconds`,
      "s",
      spread,
      "the global process's CPU time over that sync",
    ),
    key(
      `stores.fanout.${store}.connectSeconds`,
      "s",
      rule,
      `\`stores.fanout.zones\` zones all connected and synced, global on ${label} (one run)`,
    ),
    key(
      `stores.fanout.${store}.p50Ms`,
      "ms",
      rule,
      `one change reaching each of \`stores.fanout.zones\` zones, p50, global on ${label} (one run)`,
    ),
    key(`stores.fanout.${store}.p99Ms`, "ms", rule, "the same, p99"),
    key(
      `stores.writes.${store}.writesPerSec`,
      "resources/s",
      rule,
      `resources written in transactions of 1,000 (\`stores.writes.resources\` of them) on ${label}`,
    ),
  ];
};

/** The keys of a fan-out scenario measured `repetitions` times beside its floor. */
const fanoutKeys = (
  prefix: string,
  what: string,
  p99Target: string,
  spread: "spread" | "spreadOrSkipped",
): SummaryKey[] => [
  key(
    `${prefix}.connectSeconds`,
    "s",
    spread,
    `${what}: from the first zone dialing until every zone holds the Mesh`,
  ),
  key(
    `${prefix}.p50Ms`,
    "ms",
    spread,
    `${what}: one change on the global reaching a zone's store, p50 over every zone and round of a repetition`,
  ),
  key(`${prefix}.p99Ms`, "ms", spread, "the same, p99", p99Target),
  key(
    `${prefix}.floor.p50Ms`,
    "ms",
    spread,
    "the floor in the same processes: the same bytes (one change's mux frame) written once to a plain node:http2 stream per zone, held open by the same zone processes; until a stream has read them, p50 over every stream and round",
  ),
  key(`${prefix}.floor.p99Ms`, "ms", spread, "the same, p99"),
  key(`${prefix}.p50PerFloor`, "ratio", spread, "p50 over the floor's p50, per repetition"),
  key(`${prefix}.p99PerFloor`, "ratio", spread, "p99 over the floor's p99, per repetition"),
  key(
    `${prefix}.globalCpuUsPerZoneChange`,
    "µs",
    spread,
    "the global process's CPU time from each change until every zone has it, per zone and change",
  ),
  key(
    `${prefix}.lastWriteMs`,
    "ms",
    spread,
    "from each change until the global handed the last zone's response frame to its transport, median over the rounds of a repetition: the global's own part of the latency (the rest of p99Ms is the zones' processes, on the same cores, reading and applying it)",
  ),
  key(
    `${prefix}.zonesCpuUsPerZoneChange`,
    "µs",
    spread,
    "the zone processes' CPU time (summed) from each change's first arrival in a process to its last there, per zone and change: what applying a change costs the bench's zones, which share the machine's cores with the global",
  ),
  key(
    `${prefix}.floor.globalCpuUsPerStream`,
    "µs",
    spread,
    "the floor's server process's CPU time per stream and round, from writing the bytes to every floor stream until every stream has read them",
  ),
  key(
    `${prefix}.floor.zonesCpuUsPerStream`,
    "µs",
    spread,
    "the zone processes' CPU time (summed) per floor stream and round, in each from the round's first arrival there to its last: reading the bytes on a plain node:http2 stream (the floor's streams send nothing back, where a zone ACKs each change)",
  ),
  key(
    `${prefix}.globalCpuPerFloor`,
    "ratio",
    spread,
    "globalCpuUsPerZoneChange over floor.globalCpuUsPerStream, per repetition",
  ),
  key(
    `${prefix}.zonesCpuPerFloor`,
    "ratio",
    spread,
    "zonesCpuUsPerZoneChange over floor.zonesCpuUsPerStream, per repetition",
  ),
];

/** Every key of the summary, in the order bench/README.md lists them. */
export const SUMMARY_KEYS: readonly SummaryKey[] = [
  key(
    "run.complete",
    "boolean",
    "boolean",
    "false while the run is going (the file is rewritten after each scenario, so a run cut short leaves what it measured), true at the end if every scenario finished (the 10,000-zone one included: `zones10k.complete`)",
  ),
  key(
    "run.quick",
    "boolean",
    "boolean",
    "true for `npm run bench:quick` (small sizes, one or two repetitions: a smoke run, not for comparison)",
  ),
  key("run.startedAt", "ISO 8601", "text", "when the run started (UTC)"),
  key("run.durationSeconds", "s", "positive", "how long the whole run took"),
  key(
    "run.busyThreshold1m",
    "load",
    "positive",
    "where /proc is missing (not Linux), the 1-minute load average above which a scenario counts as run on a busy machine: half the logical CPUs (the bench's own processes count in it)",
  ),
  key(
    "run.busyOtherCpus",
    "CPUs",
    "positive",
    "the CPUs other work may keep busy on average during a scenario before it counts as run on a busy machine: a quarter of the logical CPUs (bench/other-work.ts)",
  ),
  key(
    "run.busyScenarios",
    "count",
    "finite",
    "scenarios whose `load.<scenario>.busy` is true (0 for figures worth publishing)",
    "0",
  ),
  key("machine.cpus", "count", "positive", "logical CPUs"),
  key("machine.cpuModel", "text", "text", "CPU model"),
  key("machine.memoryGiB", "GiB", "positive", "total memory"),
  key("machine.node", "text", "text", "Node version"),
  key("machine.connect", "text", "text", "@connectrpc/connect version"),
  key(
    "machine.loadAverage1m",
    "load",
    "finite",
    "1-minute load average when the run started (above `machine.cpus`: the figures are inflated)",
  ),
  key("machine.loadAverage5m", "load", "finite", "5-minute load average when the run started"),
  key(
    "machine.fdSoftLimit",
    "count",
    "positive",
    "soft limit on open files (`ulimit -n`); 10,000 zones need about 10,000 on the global",
  ),
  key("machine.fdHardLimit", "count", "positive", "hard limit on open files"),
  ...LOAD_SCENARIOS.flatMap(loadKeys),

  key(
    "echo.repetitions",
    "count",
    "positive",
    "repetitions of each echo size (5; 2 in a quick run), each running raw Connect, the mux, grpc-js and raw node:http2 in a rotated order",
  ),
  ...(["100B", "64KiB"] as const).flatMap((size) => {
    const label = size === "100B" ? "100-byte" : "64 KiB";
    return [
      key(`echo.${size}.muxMsgPerSec`, "msg/s", "spread", `one logical mux stream, ${label} echo`),
      key(
        `echo.${size}.floor.msgPerSec`,
        "msg/s",
        "spread",
        `the floor: plain node:http2, one stream, the same encoded frame length-prefixed, ${label} echo`,
      ),
      key(
        `echo.${size}.perFloor`,
        "ratio",
        "spread",
        "mux msg/s over the floor's msg/s, per repetition (at most 1)",
      ),
      key(
        `echo.${size}.muxPerRaw`,
        "ratio",
        "spread",
        `mux msg/s over raw Connect bidi msg/s, ${label} echo, per repetition`,
        ">= 1",
      ),
      key(
        `echo.${size}.muxPerGrpcJs`,
        "ratio",
        "spread",
        `mux msg/s over @grpc/grpc-js bidi msg/s, ${label} echo, per repetition`,
        ">= 1",
      ),
    ];
  }),
  key("echo.64KiB.muxMBps", "MB/s", "spread", "mux payload throughput, 64 KiB echo"),

  key(
    "sync.resources",
    "count",
    "positive",
    "resources of the sync scenario (100,000; 1,000 in a quick run)",
  ),
  key(
    "sync.repetitions",
    "count",
    "positive",
    "repetitions of the sync on each store and of its floor (5; 1 in a quick run), after one uncounted warm-up sync; repetition i runs floor, memory, embedded, postgres rotated by i",
  ),
  key(
    "sync.floor.seconds",
    "s",
    "spread",
    "the sync's floor: protobuf-es encode of the same resources (as delta-response frames of about 512 KiB), their bytes over plain node:http2 between two processes, and protobuf-es decode of every frame, envelope and spec (bench/sync-floor.ts; the three timed apart and added)",
  ),
  key(
    "sync.floor.bytes",
    "bytes",
    "positive",
    "bytes the floor transfers (compare `sync.delta.initialMiB`)",
  ),
  key(
    "sync.delta.initialSeconds",
    "s",
    "spread",
    "delta: from the zone dialing, with the global serving every resource, until the zone holds all of them (global on memory; the samples of `stores.sync.memory.initialSeconds`)",
    "<= 1.0",
  ),
  key(
    "sync.delta.perFloor",
    "ratio",
    "spread",
    "that sync over the floor measured in the same repetition",
  ),
  key(
    "sync.firstPerMedian",
    "ratio",
    "positive",
    "the run's first counted 100k sync over the median of its store's samples (above 1: the first is slower; order and warm-up effects show here)",
  ),
  key(
    "sync.firstZoneCpuPerMedian",
    "ratio",
    "positive",
    "the same for the zone process's CPU time (a first sync slower in wall time but not in CPU time points at the machine)",
  ),
  key(
    "sync.delta.catchUpSeconds",
    "s",
    "finite",
    "delta: from the last write until the global serves every resource (global on memory, first repetition; the zone dials only then)",
  ),
  key("sync.sotw.initialSeconds", "s", "positive", "the same in state-of-the-world mode (one run)"),
  key(
    "sync.delta.initialMiB",
    "MiB",
    "positive",
    "bytes on the wire to the zone for the initial delta sync (a counting run)",
  ),
  key(
    "sync.resumeChanged",
    "count",
    "positive",
    "resources changed while the zone was away (0.1%)",
  ),
  key(
    "sync.delta.resumeMs",
    "ms",
    "spread",
    "delta: reconnect until the last changed resource arrived (global on memory)",
  ),
  key(
    "sync.delta.resumeResources",
    "count",
    "positive",
    "resources sent on that delta resume",
    "= `sync.resumeChanged`",
  ),
  key(
    "sync.sotw.resumeResources",
    "count",
    "positive",
    "resources sent on a state-of-the-world resume (all of them, by design)",
  ),

  key(
    "fanout.zones",
    "count",
    "positive",
    "zones of the fan-out scenario (1,000; 8 in a quick run), one HTTP/2 connection each, in two child processes",
  ),
  key(
    "fanout.repetitions",
    "count",
    "positive",
    "repetitions of the fan-out, each a fresh global with its floor interleaved round by round (3; 1 in a quick run)",
  ),
  ...fanoutKeys("fanout", "`fanout.zones` zones on one global", "<= 150", "spread"),
  key(
    "fanout.crossZone.p50Ms",
    "ms",
    "positive",
    "the cross-zone flow: one zone's ZoneIngress change reaching each of the `fanout.zones` other zones through the global (zone, global, zones), p50 over zones and rounds",
  ),
  key("fanout.crossZone.p99Ms", "ms", "positive", "the same, p99"),
  key(
    "idleZone.heapKiB",
    "KiB",
    "spreadFinite",
    "global heap growth per connected idle zone (after GC; the `fanout` runs, the floor's streams already held)",
    "<= 60",
  ),
  key(
    "idleZone.rssKiB",
    "KiB",
    "spreadFinite",
    "global RSS growth per connected idle zone (the `fanout` runs)",
    "<= 96",
  ),
  key(
    "idleZone.floor.heapKiB",
    "KiB",
    "spreadFinite",
    "the floor: global-process heap growth per held plain node:http2 stream (one connection each, as the zones'), after GC",
  ),
  key("idleZone.floor.rssKiB", "KiB", "spreadFinite", "the same for RSS"),
  key(
    "idleZone.floor.zoneSideHeapKiB",
    "KiB",
    "spreadFinite",
    "the other side of the floor: the zone processes' heap growth per held stream",
  ),
  key("idleZone.floor.zoneSideRssKiB", "KiB", "spreadFinite", "the same for RSS"),
  key(
    "idleZone.heapPerFloor",
    "ratio",
    "spreadOrNone",
    "heap per idle zone over the floor's heap per held stream (global side), per repetition",
  ),
  key(
    "idleZone.rssPerFloor",
    "ratio",
    "spreadOrNone",
    "RSS per idle zone over the floor's RSS per held stream (global side), per repetition",
  ),

  key(
    "zones10k.zones",
    "count",
    "positive",
    "zones of the scale scenario (10,000; 8 in a quick run)",
  ),
  key(
    "zones10k.repetitions",
    "count",
    "positive",
    "repetitions (3; 1 in a quick run); the floor runs after the zones stopped (twice 10,000 sockets do not fit the open-file limit)",
  ),
  key(
    "zones10k.complete",
    "boolean",
    "boolean",
    "whether in every repetition every zone connected and synced within 300 s and every change reached every zone within 60 s; when false, the figures cover what did (`zones10k.connected`)",
  ),
  key(
    "zones10k.connected",
    "count",
    "positive",
    "zones that connected and synced, fewest over the repetitions (all of them when complete)",
  ),
  key("zones10k.processes", "count", "positive", "child processes running the zones"),
  key(
    "zones10k.connections",
    "count",
    "positive",
    "HTTP/2 connections the zones opened (one per zone unless `KDS_BENCH_ZONES_PER_CONNECTION` is set)",
  ),
  ...fanoutKeys("zones10k", "`zones10k.zones` zones on one global", "<= 1000", "spread"),
  key(
    "zones10k.heapPerZoneKiB",
    "KiB",
    "spreadFinite",
    "global heap growth per connected zone (after GC)",
    "<= 60",
  ),
  key(
    "zones10k.rssPerZoneKiB",
    "KiB",
    "spreadFinite",
    "global RSS growth per connected zone",
    "<= 96",
  ),

  key(
    "stores.fanout.zones",
    "count",
    "positive",
    "zones of the store fan-out rows (1,000; 6 in a quick run)",
  ),
  key(
    "stores.writes.resources",
    "count",
    "positive",
    "resources of the store write rows (100,000; 1,000 in a quick run)",
  ),
  ...storeKeys("memory", "memory"),
  ...storeKeys("embedded", "the embedded PostgreSQL 18 (a fresh data dir)"),
  ...storeKeys("postgres", "the PostgreSQL server (a fresh schema)"),

  key(
    "multiInstance.instances",
    "count",
    "positive",
    "global instances sharing one PostgreSQL server (in one process, each its own store connection and HTTP/2 port)",
  ),
  key(
    "multiInstance.zones",
    "count",
    "positive",
    "zones, zone i on instance i mod 3 (1,000; 6 in a quick run)",
  ),
  key(
    "multiInstance.repetitions",
    "count",
    "positive",
    "repetitions (3; 1 in a quick run), each with its floor interleaved",
  ),
  ...fanoutKeys(
    "multiInstance",
    "change written through instance 0, zones on any instance",
    "<= 250",
    "spreadOrSkipped",
  ),
  key(
    "multiInstance.path.committedMs",
    "ms",
    "spreadOrSkipped",
    "the change's way through PostgreSQL, each figure from the write's start, median over rounds, spread over repetitions: until instance 0's write committed",
  ),
  key(
    "multiInstance.path.writerSeenMs",
    "ms",
    "spreadOrSkipped",
    "until a watcher on instance 0's (the writer's) store yielded the change",
  ),
  key(
    "multiInstance.path.writerP99Ms",
    "ms",
    "spreadOrSkipped",
    "until instance 0's zones had it, p99 over its zones and rounds",
  ),
  key(
    "multiInstance.path.othersSeenMs",
    "ms",
    "spreadOrSkipped",
    "until a watcher on another instance's store yielded it (NOTIFY, LISTEN wake, catch-up query), the slowest other instance",
  ),
  key(
    "multiInstance.path.othersP99Ms",
    "ms",
    "spreadOrSkipped",
    "until the other instances' zones had it, p99 of the slowest other instance",
  ),

  key(
    "memory.messages",
    "count",
    "positive",
    "messages one session received (1,000,000; 30,000 in a quick run)",
  ),
  key(
    "memory.heapGrowthMiB",
    "MiB",
    "finite",
    "zone-process heap after the last message minus after warm-up (after GC)",
    "< 4",
  ),
  key("memory.rssGrowthMiB", "MiB", "finite", "the same for RSS"),
];

/** The value at dotted `path` in `summary` (undefined when any step is missing). */
export function valueAt(summary: unknown, path: string): unknown {
  let value: unknown = summary;
  for (const part of path.split(".")) {
    if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

/** Sets `value` at dotted `path` in `summary`, creating objects on the way. */
export function setAt(summary: Record<string, unknown>, path: string, value: unknown): void {
  const parts = path.split(".");
  let node = summary;
  for (const part of parts.slice(0, -1)) {
    node[part] ??= {};
    node = node[part] as Record<string, unknown>;
  }
  node[parts.at(-1) as string] = value;
}

/** What a PostgreSQL-server figure holds when no server answered. */
export const SKIPPED = "skipped: no server";

/** Whether `value` is a {@link Spread} whose figures pass `figure` and min <= median <= max. */
function isSpread(value: unknown, figure: (v: unknown) => boolean): boolean {
  if (typeof value !== "object" || value === null) return false;
  const { median, min, max, runs } = value as Record<string, unknown>;
  return (
    figure(median) &&
    figure(min) &&
    figure(max) &&
    typeof runs === "number" &&
    Number.isInteger(runs) &&
    runs >= 1 &&
    (min as number) <= (median as number) &&
    (median as number) <= (max as number)
  );
}

/** A figure's median when `value` is a {@link Spread}, else the value itself. */
export function medianOf(value: unknown): unknown {
  return typeof value === "object" && value !== null && "median" in value
    ? (value as Spread).median
    : value;
}

/** Lists every key of `keys` (default: the run's) that is missing or whose value breaks its rule, and p99 figures below their p50 (empty when the summary is complete). */
export function summaryProblems(
  summary: unknown,
  keys: readonly SummaryKey[] = SUMMARY_KEYS,
): string[] {
  const problems: string[] = [];
  const positive = (v: unknown): boolean => typeof v === "number" && Number.isFinite(v) && v > 0;
  const finite = (v: unknown): boolean => typeof v === "number" && Number.isFinite(v);
  for (const { key: path, rule } of keys) {
    const value = valueAt(summary, path);
    const shown =
      value === undefined
        ? "missing"
        : typeof value === "number"
          ? String(value)
          : (JSON.stringify(value) ?? String(value));
    const ok =
      rule === "positive"
        ? positive(value)
        : rule === "finite"
          ? finite(value)
          : rule === "text"
            ? typeof value === "string" && value !== ""
            : rule === "boolean"
              ? typeof value === "boolean"
              : rule === "positiveOrSkipped"
                ? positive(value) || value === SKIPPED
                : rule === "spread"
                  ? isSpread(value, positive)
                  : rule === "spreadFinite"
                    ? isSpread(value, finite)
                    : rule === "spreadOrSkipped"
                      ? isSpread(value, positive) || value === SKIPPED
                      : isSpread(value, finite) || value === null;
    if (!ok) problems.push(`${path}: ${shown} (expected ${rule})`);
  }
  // `x.p99Ms` beside `x.p50Ms`, and `x.lagP99Ms` beside `x.lagP50Ms`.
  for (const { key: path } of keys.filter((k) => /(\.p|P)99Ms$/.test(k.key))) {
    const p99 = medianOf(valueAt(summary, path));
    const p50 = medianOf(
      valueAt(
        summary,
        path.replace(/([pP])99Ms$/, (_, p: string) => `${p}50Ms`),
      ),
    );
    if (typeof p99 === "number" && typeof p50 === "number" && p99 < p50)
      problems.push(`${path}: ${p99} is below its p50 ${p50}`);
  }
  return problems;
}
