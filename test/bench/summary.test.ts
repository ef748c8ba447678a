// The bench summary (bench/summary.ts): the smoke run in `npm test` fails
// when a key is missing or not sane, and bench/README.md documents exactly
// the keys a run writes. The performance table (bench/table.ts) is made from
// a summary alone and replaces only its own section of docs/performance.md.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { CHURN_KEYS } from "../../bench/churn-keys.ts";
import {
  SKIPPED,
  SUMMARY_KEYS,
  ratioOf,
  setAt,
  spreadOf,
  summaryProblems,
  valueAt,
} from "../../bench/summary.ts";
import { BEGIN_MARKER, END_MARKER, meets, performanceTable, withTable } from "../../bench/table.ts";

const spread = (median: number) => ({ median, min: median / 2, max: median * 2, runs: 3 });

/** A summary with a sane value under every key. */
function complete(): Record<string, unknown> {
  const summary: Record<string, unknown> = {};
  for (const { key, rule } of SUMMARY_KEYS)
    setAt(
      summary,
      key,
      rule === "text"
        ? "x"
        : rule === "boolean"
          ? false
          : rule.startsWith("spread")
            ? spread(2)
            : 2,
    );
  return summary;
}

describe("bench summary", () => {
  it("accepts a summary with every key, and the PostgreSQL server's figures skipped", () => {
    expect(summaryProblems(complete())).toEqual([]);
    const skipped = complete();
    for (const { key, rule } of SUMMARY_KEYS)
      if (rule === "positiveOrSkipped" || rule === "spreadOrSkipped") setAt(skipped, key, SKIPPED);
    expect(summaryProblems(skipped)).toEqual([]);
    // Memory growth over a few zones is noise: an idle zone's ratio to its floor may come out below zero.
    const noisy = complete();
    setAt(noisy, "idleZone.rssPerFloor", { median: -12, min: -12, max: -12, runs: 1 });
    expect(summaryProblems(noisy)).toEqual([]);
  });

  it("reports a missing key, NaN, zero, a string where a number belongs, a bad spread and a p99 below its p50", () => {
    const run = complete();
    delete (run.zones10k as Record<string, unknown>).p50Ms;
    setAt(run, "sync.resources", Number.NaN);
    setAt(run, "fanout.zones", 0);
    setAt(run, "memory.heapGrowthMiB", "77");
    setAt(run, "stores.sync.embedded.initialSeconds", SKIPPED); // only the server's rows may be skipped
    setAt(run, "sync.delta.initialSeconds", { median: 3, min: 4, max: 5, runs: 5 });
    setAt(run, "sync.floor.seconds", 1.2); // a plain number where a spread belongs
    setAt(run, "idleZone.rssPerFloor", null); // allowed: a floor of no RSS growth
    setAt(run, "idleZone.heapKiB", null); // not allowed there
    setAt(run, "fanout.p99Ms", spread(1));
    expect(summaryProblems(run)).toEqual([
      "sync.resources: NaN (expected positive)",
      "sync.floor.seconds: 1.2 (expected spread)",
      'sync.delta.initialSeconds: {"median":3,"min":4,"max":5,"runs":5} (expected spread)',
      "fanout.zones: 0 (expected positive)",
      "idleZone.heapKiB: null (expected spreadFinite)",
      "zones10k.p50Ms: missing (expected spread)",
      'stores.sync.embedded.initialSeconds: "skipped: no server" (expected spread)',
      'memory.heapGrowthMiB: "77" (expected finite)',
      "fanout.p99Ms: 1 is below its p50 2",
    ]);
  });

  it("checks a churn run's lag p99 against its lag p50", () => {
    const run: Record<string, unknown> = {};
    for (const { key } of CHURN_KEYS) setAt(run, key, 2);
    expect(summaryProblems(run, CHURN_KEYS)).toEqual([]);
    setAt(run, "churn.lagP99Ms", 1);
    expect(summaryProblems(run, CHURN_KEYS)).toEqual(["churn.lagP99Ms: 1 is below its p50 2"]);
  });

  it("makes spreads and per-repetition ratios", () => {
    expect(spreadOf([3, 1, 2])).toEqual({ median: 2, min: 1, max: 3, runs: 3 });
    expect(spreadOf([4, 1, 2, 3])).toEqual({ median: 2.5, min: 1, max: 4, runs: 4 });
    expect(spreadOf([1, Number.NaN]).median).toBeNaN();
    expect(spreadOf([]).median).toBeNaN();
    // Each figure over the floor of its own repetition, not median over median.
    expect(ratioOf([10, 40, 20], [5, 10, 20])).toEqual({ median: 2, min: 1, max: 4, runs: 3 });
    expect(ratioOf([10, 20], [5, 0])).toBeNull();
  });

  it("reads and writes dotted keys", () => {
    const summary: Record<string, unknown> = {};
    setAt(summary, "echo.64KiB.muxPerGrpcJs", 1.5);
    expect(summary).toEqual({ echo: { "64KiB": { muxPerGrpcJs: 1.5 } } });
    expect(valueAt(summary, "echo.64KiB.muxPerGrpcJs")).toBe(1.5);
    expect(valueAt(summary, "echo.100B.muxPerGrpcJs")).toBeUndefined();
  });

  it("bench/README.md documents every key, and no other", () => {
    const readme = readFileSync(new URL("../../bench/README.md", import.meta.url), "utf8");
    const documented = [...readme.matchAll(/^\| `([a-z][\w.]+)` \|/gm)].map((m) => m[1]);
    expect(documented).toEqual(SUMMARY_KEYS.map((k) => k.key));
  });
});

describe("performance table", () => {
  it("judges a target on the median", () => {
    expect(meets({ median: 0.9, min: 0.5, max: 3, runs: 5 }, "<= 1.0")).toBe(true);
    expect(meets({ median: 1.1, min: 0.5, max: 1.2, runs: 5 }, "<= 1.0")).toBe(false);
    expect(meets(1.2, ">= 1")).toBe(true);
    expect(meets(spread(2), "-")).toBeUndefined();
    expect(meets(SKIPPED, "<= 250")).toBeUndefined();
  });

  it("shows each figure as median [min–max] beside its floor and ratio, and the load", () => {
    const summary = complete();
    setAt(summary, "stores.sync.memory.initialSeconds", {
      median: 1.25,
      min: 1.1,
      max: 3.5,
      runs: 5,
    });
    setAt(summary, "load.sync.busy", true);
    setAt(summary, "run.busyScenarios", 1);
    const table = performanceTable(summary);
    expect(table).toContain(
      "| 2 delta sync, global on memory | **1.25** s [1.10–3.50] | 2.00 s | **2.00**x [1.00–4.00] | <= 1.0 s | **no** | `stores.sync.memory.initialSeconds` |",
    );
    expect(table).toContain("| sync | 2.00 | 2.00 | 2.00 | 2.00 | **yes** |");
    expect(table).toContain("**1 scenario(s) ran on a busy machine**");
    // The README's copy: the same figures and the busy warning, without the load of each scenario.
    const short = performanceTable(summary, { loads: false });
    expect(short).toContain("`stores.sync.memory.initialSeconds` |");
    expect(short).not.toContain("| sync | 2.00 |");
    expect(short).toContain("**1 scenario(s) ran on a busy machine**");
    // A summary written before other work was measured says what its busy flags are worth.
    delete (summary.run as Record<string, unknown>).busyOtherCpus;
    expect(performanceTable(summary)).toContain("measured the load average only");
  });

  it("the README and docs/performance.md each hold the generated section's markers once", () => {
    for (const file of ["../../README.md", "../../docs/performance.md"]) {
      const text = readFileSync(new URL(file, import.meta.url), "utf8");
      expect(text.split(BEGIN_MARKER)).toHaveLength(2);
      expect(text.split(END_MARKER)).toHaveLength(2);
    }
  });

  it("replaces only the section between its markers", () => {
    const doc = `# Performance\n\nintro\n\n${BEGIN_MARKER}\nold\n${END_MARKER}\n\nafter\n`;
    expect(withTable(doc, "new")).toBe(
      `# Performance\n\nintro\n\n${BEGIN_MARKER}\n\nnew\n\n${END_MARKER}\n\nafter\n`,
    );
    expect(withTable("# Performance\n", "new")).toBe(
      `# Performance\n\n${BEGIN_MARKER}\n\nnew\n\n${END_MARKER}\n`,
    );
  });
});
