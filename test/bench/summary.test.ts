// The bench summary (bench/summary.ts): the smoke run in `npm test` fails
// when a key is missing or not sane, and bench/README.md documents exactly
// the keys a run writes.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { SKIPPED, SUMMARY_KEYS, setAt, summaryProblems, valueAt } from "../../bench/summary.ts";

/** A summary with a sane value under every key. */
function complete(): Record<string, unknown> {
  const summary: Record<string, unknown> = {};
  for (const { key, rule } of SUMMARY_KEYS)
    setAt(summary, key, rule === "text" ? "x" : rule === "boolean" ? false : 2);
  return summary;
}

describe("bench summary", () => {
  it("accepts a summary with every key, and the PostgreSQL server's figures skipped", () => {
    expect(summaryProblems(complete())).toEqual([]);
    const skipped = complete();
    for (const { key, rule } of SUMMARY_KEYS)
      if (rule === "positiveOrSkipped") setAt(skipped, key, SKIPPED);
    expect(summaryProblems(skipped)).toEqual([]);
  });

  it("reports a missing key, NaN, zero, a string where a number belongs, and a p99 below its p50", () => {
    const run = complete();
    delete (run.zones10k as Record<string, unknown>).p50Ms;
    setAt(run, "sync.delta.initialSeconds", Number.NaN);
    setAt(run, "fanout.connectSeconds", 0);
    setAt(run, "zones10k.heapPerZoneKiB", "77");
    setAt(run, "stores.sync.embedded.initialSeconds", SKIPPED); // only the server's rows may be skipped
    setAt(run, "fanout.p99Ms", 1);
    expect(summaryProblems(run)).toEqual([
      "sync.delta.initialSeconds: NaN (expected positive)",
      "fanout.connectSeconds: 0 (expected positive)",
      'zones10k.heapPerZoneKiB: "77" (expected finite)',
      "zones10k.p50Ms: missing (expected positive)",
      'stores.sync.embedded.initialSeconds: "skipped: no server" (expected positive)',
      "fanout.p99Ms: 1 is below its p50 2",
    ]);
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
