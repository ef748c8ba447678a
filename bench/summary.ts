// The machine-readable summary of a bench run: every figure under a stable
// key (a dotted path into the JSON object bench/run.ts writes). SUMMARY_KEYS
// is the one list of keys, with unit, meaning and target; bench/README.md
// documents each (test/bench/summary.test.ts checks it does), and
// summaryProblems() checks a run produced each one with a sane value, so the
// smoke run in `npm test` fails on a missing key, NaN or a p99 below its p50.

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
  | "positiveOrSkipped";

/** One documented key. */
export interface SummaryKey {
  readonly key: string;
  readonly unit: string;
  readonly rule: SummaryRule;
  /** What it measures. */
  readonly measures: string;
  /** What it should be ("-" for context figures). */
  readonly target: string;
}

const key = (
  k: string,
  unit: string,
  rule: SummaryRule,
  measures: string,
  target = "-",
): SummaryKey => ({ key: k, unit, rule, measures, target });

const storeKeys = (
  store: "memory" | "embedded" | "postgres",
  rule: SummaryRule,
  label: string,
): SummaryKey[] => [
  key(
    `stores.sync.${store}.initialSeconds`,
    "s",
    rule,
    `initial delta sync of \`sync.resources\` resources with the global on ${label}`,
    store === "memory" ? "<= 1.5" : "-",
  ),
  key(
    `stores.fanout.${store}.connectSeconds`,
    "s",
    rule,
    `\`stores.fanout.zones\` zones all connected and synced, global on ${label}`,
  ),
  key(
    `stores.fanout.${store}.p50Ms`,
    "ms",
    rule,
    `one change reaching each of \`stores.fanout.zones\` zones, p50, global on ${label}`,
  ),
  key(
    `stores.fanout.${store}.p99Ms`,
    "ms",
    rule,
    `the same, p99`,
    store === "memory" ? "<= 250" : "-",
  ),
  key(
    `stores.writes.${store}.writesPerSec`,
    "resources/s",
    rule,
    `resources written in transactions of 1,000 (\`stores.writes.resources\` of them) on ${label}`,
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
    "true for `npm run bench:quick` (small sizes, a smoke run: not for comparison)",
  ),
  key("run.startedAt", "ISO 8601", "text", "when the run started (UTC)"),
  key(
    "run.durationSeconds",
    "s",
    "positive",
    "how long the whole run took",
    "<= 900 (full run, 2 cores)",
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

  key(
    "echo.100B.muxPerRaw",
    "ratio",
    "positive",
    "mux msg/s over raw Connect bidi msg/s, 100-byte echo",
    ">= 1",
  ),
  key(
    "echo.100B.muxPerGrpcJs",
    "ratio",
    "positive",
    "mux msg/s over @grpc/grpc-js bidi msg/s, 100-byte echo",
    ">= 1",
  ),
  key(
    "echo.64KiB.muxPerRaw",
    "ratio",
    "positive",
    "mux msg/s over raw Connect bidi msg/s, 64 KiB echo",
    ">= 1",
  ),
  key(
    "echo.64KiB.muxPerGrpcJs",
    "ratio",
    "positive",
    "mux msg/s over @grpc/grpc-js bidi msg/s, 64 KiB echo",
    ">= 1",
  ),
  key("echo.64KiB.muxMBps", "MB/s", "positive", "mux payload throughput, 64 KiB echo"),

  key(
    "sync.resources",
    "count",
    "positive",
    "resources of the sync scenario (100,000; 1,000 in a quick run)",
  ),
  key(
    "sync.delta.catchUpSeconds",
    "s",
    "finite",
    "delta: from the last write until the global serves every resource (the zone dials only then; this plus `sync.delta.initialSeconds` is from the writes to the zone)",
  ),
  key(
    "sync.delta.initialSeconds",
    "s",
    "positive",
    "delta: from the zone dialing, with the global serving every resource, until the zone holds all of them (global on memory)",
    "<= 1.5",
  ),
  key("sync.sotw.initialSeconds", "s", "positive", "the same in state-of-the-world mode"),
  key(
    "sync.delta.initialMiB",
    "MiB",
    "positive",
    "bytes on the wire to the zone for the initial delta sync",
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
    "positive",
    "delta: reconnect until the last changed resource arrived",
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
  key("fanout.connectSeconds", "s", "positive", "every zone connected and holding the Mesh"),
  key(
    "fanout.p50Ms",
    "ms",
    "positive",
    "one change on the global reaching a zone's store, p50 over zones and rounds",
  ),
  key("fanout.p99Ms", "ms", "positive", "the same, p99", "<= 250"),
  key(
    "idleZone.heapKiB",
    "KiB",
    "finite",
    "global heap growth per connected idle zone (after GC; the `fanout` run)",
    "<= 64",
  ),
  key(
    "idleZone.rssKiB",
    "KiB",
    "finite",
    "global RSS growth per connected idle zone (the `fanout` run)",
    "<= 100",
  ),

  key(
    "zones10k.zones",
    "count",
    "positive",
    "zones of the scale scenario (10,000; 8 in a quick run)",
  ),
  key(
    "zones10k.complete",
    "boolean",
    "boolean",
    "whether every zone connected and synced within 300 s and every change reached every zone within 60 s; when false, the figures below cover the zones that did (`zones10k.connected`) and the missing ones are NaN",
  ),
  key(
    "zones10k.connected",
    "count",
    "positive",
    "zones that connected and synced (all of them when complete)",
  ),
  key("zones10k.processes", "count", "positive", "child processes running the zones"),
  key(
    "zones10k.connections",
    "count",
    "positive",
    "HTTP/2 connections the zones opened (one per zone unless `KDS_BENCH_ZONES_PER_CONNECTION` is set)",
  ),
  key(
    "zones10k.connectSeconds",
    "s",
    "positive",
    "from the first zone dialing until every zone holds the Mesh",
  ),
  key(
    "zones10k.heapPerZoneKiB",
    "KiB",
    "finite",
    "global heap growth per connected zone (after GC)",
    "<= 64",
  ),
  key("zones10k.rssPerZoneKiB", "KiB", "finite", "global RSS growth per connected zone", "<= 100"),
  key(
    "zones10k.p50Ms",
    "ms",
    "positive",
    "one change on the global reaching a zone's store, p50 over every zone and round",
  ),
  key("zones10k.p99Ms", "ms", "positive", "the same, p99"),

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
  ...storeKeys("memory", "positive", "memory"),
  ...storeKeys("embedded", "positive", "the embedded PostgreSQL 18 (a fresh data dir)"),
  ...storeKeys("postgres", "positiveOrSkipped", "the PostgreSQL server (a fresh schema)"),

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
    "multiInstance.connectSeconds",
    "s",
    "positiveOrSkipped",
    "every zone connected and holding the Mesh",
  ),
  key(
    "multiInstance.p50Ms",
    "ms",
    "positiveOrSkipped",
    "one change written through instance 0 reaching a zone's store on any instance, p50",
  ),
  key("multiInstance.p99Ms", "ms", "positiveOrSkipped", "the same, p99"),

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

/** Lists every key that is missing or whose value breaks its rule, and p99 figures below their p50 (empty when the summary is complete). */
export function summaryProblems(summary: unknown): string[] {
  const problems: string[] = [];
  for (const { key: path, rule } of SUMMARY_KEYS) {
    const value = valueAt(summary, path);
    const shown =
      value === undefined
        ? "missing"
        : typeof value === "number"
          ? String(value)
          : (JSON.stringify(value) ?? String(value));
    const positive = typeof value === "number" && Number.isFinite(value) && value > 0;
    const ok =
      rule === "positive"
        ? positive
        : rule === "finite"
          ? typeof value === "number" && Number.isFinite(value)
          : rule === "text"
            ? typeof value === "string" && value !== ""
            : rule === "boolean"
              ? typeof value === "boolean"
              : positive || value === SKIPPED;
    if (!ok) problems.push(`${path}: ${shown} (expected ${rule})`);
  }
  for (const { key: path } of SUMMARY_KEYS.filter((k) => k.key.endsWith(".p99Ms"))) {
    const p99 = valueAt(summary, path);
    const p50 = valueAt(summary, path.replace(/p99Ms$/, "p50Ms"));
    if (typeof p99 === "number" && typeof p50 === "number" && p99 < p50)
      problems.push(`${path}: ${p99} is below its p50 ${p50}`);
  }
  return problems;
}
