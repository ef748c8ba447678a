// The bench smoke run in `npm test` fails on a missing or non-numeric figure:
// the check it relies on (bench/figures.ts) must see each kind of gap.
import { describe, expect, it } from "vitest";
import { figureProblems, type CollectedFigures, type PlannedScenarios } from "../../bench/figures.ts";

const planned: PlannedScenarios = { echoSizes: [100, 1024], syncResources: [2_000], fanoutZones: [20] };

function complete(): CollectedFigures {
  const echo = (size: number) => {
    const side = { messages: 3_000, seconds: 0.5, msgPerSec: 6_000, mbPerSec: 0.6 };
    return { size, raw: { ...side }, mux: { ...side }, grpcJs: { ...side } };
  };
  const sync = (mode: string) => ({ resources: 2_000, mode, initialMs: 80, initialBytes: 300_000, resumeChanged: 2, resumeMs: 9, resumeBytes: 700, resumeResources: 2 });
  return {
    echo: [echo(100), echo(1024)],
    sync: [sync("delta"), sync("sotw")],
    fanout: [{ zones: 20, connectMs: 300, heapPerZoneKiB: 40, rssPerZoneKiB: 90, p50Ms: 3, p99Ms: 8, rounds: 3 }],
    memory: { messages: 50_000, seconds: 2, heapGrowthMiB: -0.3, rssGrowthMiB: 1.5, samples: [{ messages: 0, heapMiB: 12, rssMiB: 80 }, { messages: 50_000, heapMiB: 12.1, rssMiB: 81 }] },
  };
}

describe("bench figures check", () => {
  it("accepts a run that has every figure", () => {
    expect(figureProblems(planned, complete())).toEqual([]);
  });

  it("reports a planned scenario that produced no row", () => {
    const run = complete();
    expect(figureProblems(planned, { ...run, echo: run.echo.slice(0, 1) })).toEqual(["echo 1024 B: no result"]);
    expect(figureProblems(planned, { ...run, sync: run.sync.slice(0, 1) })).toEqual(["sync 2000 sotw: no result"]);
    expect(figureProblems(planned, { ...run, fanout: [] })).toEqual(["fan-out 20 zones: no result"]);
  });

  it("reports a figure that is missing, NaN, infinite or not a number", () => {
    const run = complete();
    const [first, second] = run.echo;
    const broken: CollectedFigures = {
      ...run,
      echo: [{ ...first!, mux: { ...(first!.mux as object), msgPerSec: Number.NaN } }, { ...second!, raw: { messages: 1, seconds: 1, msgPerSec: 1 } }],
      fanout: [{ ...(run.fanout[0] as object), p99Ms: Number.POSITIVE_INFINITY, connectMs: "300" }],
    };
    expect(figureProblems(planned, broken)).toEqual([
      "echo 100 B mux msgPerSec: NaN is not a finite number",
      "echo 1024 B raw mbPerSec: undefined is not a finite number",
      'fan-out 20 zones connectMs: "300" is not a finite number',
      "fan-out 20 zones p99Ms: Infinity is not a finite number",
    ]);
  });

  it("reports a rate or duration of zero, and too few memory samples", () => {
    const run = complete();
    const memory = run.memory as { samples: unknown[] };
    const problems = figureProblems(planned, {
      ...run,
      sync: [{ ...(run.sync[0] as object), initialMs: 0 }, run.sync[1]],
      memory: { ...memory, samples: memory.samples.slice(0, 1) },
    });
    expect(problems).toEqual(["sync 2000 delta initialMs: 0 is not above zero", "memory samples: expected at least 2 (first and last), got 1"]);
  });

  it("reports a result that is not an object", () => {
    expect(figureProblems(planned, { ...complete(), memory: null })).toContain("memory: expected a result object, got null");
  });
});
