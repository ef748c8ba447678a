// Checks that a bench run produced every figure its report prints: one entry
// per planned scenario, and each figure a finite number (rates, sizes and
// durations also above zero). bench/run.ts exits non-zero when this finds a
// problem, so the smoke run inside `npm test` cannot pass on a report full of
// NaN, undefined or missing rows.

/** The scenarios a run planned; every one must come back with its figures. */
export interface PlannedScenarios {
  /** Payload sizes of the echo scenarios, in bytes. */
  readonly echoSizes: readonly number[];
  /** Resource counts of the sync scenarios (each runs in delta and sotw). */
  readonly syncResources: readonly number[];
  /** Zone counts of the fan-out scenarios. */
  readonly fanoutZones: readonly number[];
}

/** What bench/run.ts collected; `unknown` leaves because results come back from child processes as JSON. */
export interface CollectedFigures {
  readonly echo: readonly { readonly size: unknown; readonly raw: unknown; readonly mux: unknown; readonly grpcJs: unknown }[];
  readonly sync: readonly unknown[];
  readonly fanout: readonly unknown[];
  readonly memory: unknown;
}

type Rule = "finite" | "positive";

const ECHO_FIGURES: Record<string, Rule> = { messages: "positive", seconds: "positive", msgPerSec: "positive", mbPerSec: "positive" };
const SYNC_FIGURES: Record<string, Rule> = {
  resources: "positive",
  initialMs: "positive",
  initialBytes: "positive",
  resumeChanged: "positive",
  resumeMs: "positive",
  resumeBytes: "positive",
  resumeResources: "positive",
};
const FANOUT_FIGURES: Record<string, Rule> = {
  zones: "positive",
  connectMs: "positive",
  heapPerZoneKiB: "finite",
  rssPerZoneKiB: "finite",
  p50Ms: "positive",
  p99Ms: "positive",
  rounds: "positive",
};
const MEMORY_FIGURES: Record<string, Rule> = { messages: "positive", seconds: "positive", heapGrowthMiB: "finite", rssGrowthMiB: "finite" };
const MEMORY_SAMPLE_FIGURES: Record<string, Rule> = { messages: "finite", heapMiB: "positive", rssMiB: "positive" };

/** Lists every missing or non-numeric figure (empty when the run is complete). */
export function figureProblems(planned: PlannedScenarios, collected: CollectedFigures): string[] {
  const problems: string[] = [];
  for (const size of planned.echoSizes) {
    const row = collected.echo.find((e) => e.size === size);
    if (row === undefined) {
      problems.push(`echo ${size} B: no result`);
      continue;
    }
    for (const side of ["raw", "mux", "grpcJs"] as const) checkRecord(problems, `echo ${size} B ${side}`, row[side], ECHO_FIGURES);
  }
  for (const resources of planned.syncResources) {
    for (const mode of ["delta", "sotw"]) {
      const row = collected.sync.find((s) => isRecord(s) && s.resources === resources && s.mode === mode);
      if (row === undefined) problems.push(`sync ${resources} ${mode}: no result`);
      else checkRecord(problems, `sync ${resources} ${mode}`, row, SYNC_FIGURES);
    }
  }
  for (const zones of planned.fanoutZones) {
    const row = collected.fanout.find((f) => isRecord(f) && f.zones === zones);
    if (row === undefined) problems.push(`fan-out ${zones} zones: no result`);
    else checkRecord(problems, `fan-out ${zones} zones`, row, FANOUT_FIGURES);
  }
  checkRecord(problems, "memory", collected.memory, MEMORY_FIGURES);
  const samples = isRecord(collected.memory) ? collected.memory.samples : undefined;
  if (!Array.isArray(samples) || samples.length < 2) {
    problems.push(`memory samples: expected at least 2 (first and last), got ${Array.isArray(samples) ? samples.length : describe(samples)}`);
  } else {
    samples.forEach((sample: unknown, i) => checkRecord(problems, `memory sample ${i}`, sample, MEMORY_SAMPLE_FIGURES));
  }
  return problems;
}

function checkRecord(problems: string[], where: string, record: unknown, figures: Record<string, Rule>): void {
  if (!isRecord(record)) {
    problems.push(`${where}: expected a result object, got ${describe(record)}`);
    return;
  }
  for (const [name, rule] of Object.entries(figures)) {
    const value = record[name];
    if (typeof value !== "number" || !Number.isFinite(value)) problems.push(`${where} ${name}: ${describe(value)} is not a finite number`);
    else if (rule === "positive" && value <= 0) problems.push(`${where} ${name}: ${value} is not above zero`);
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  return typeof value === "number" ? String(value) : value === undefined ? "undefined" : JSON.stringify(value) ?? typeof value;
}
