/**
 * The results of a conformance run: one row per check, printed as a table
 * or as JSON.
 *
 * @module
 */
import { rule, type RuleName } from "./rules.ts";

/**
 * The outcome of one check: `pass`, `fail`, or `skip` when the kit could
 * not exercise the rule against this peer (the detail says why; a skip does
 * not fail the run).
 */
export type Outcome = "pass" | "fail" | "skip";

/** One row of the report. */
export interface CheckResult {
  readonly rule: RuleName;
  /** The anchor of the rule's section in docs/protocol.md. */
  readonly section: string;
  readonly outcome: Outcome;
  /** What was seen: the evidence for a pass, what went wrong for a fail, why for a skip. */
  readonly detail: string;
}

/** Collects results; a rule checked twice keeps its worst outcome. */
export class Report {
  readonly #results = new Map<RuleName, CheckResult>();

  /** Records `outcome` for `name`. */
  add(name: RuleName, outcome: Outcome, detail: string): void {
    const previous = this.#results.get(name);
    const rank = { fail: 2, pass: 1, skip: 0 } as const;
    if (previous !== undefined && rank[previous.outcome] >= rank[outcome]) return;
    this.#results.set(name, { rule: name, section: rule(name).section, outcome, detail });
  }

  /** Records a pass when `ok`, else a fail; `detail` describes what was seen either way. */
  expect(name: RuleName, ok: boolean, detail: string): void {
    this.add(name, ok ? "pass" : "fail", detail);
  }

  /** The results in the order the rules were first checked. */
  results(): CheckResult[] {
    return [...this.#results.values()];
  }

  /** True when no check failed. */
  passed(): boolean {
    return this.results().every((r) => r.outcome !== "fail");
  }
}

/** The results as a plain-text table: rule, section, result, detail. */
export function formatTable(results: readonly CheckResult[]): string {
  const rows = results.map((r) => [
    r.rule,
    `#${r.section}`,
    r.outcome.toUpperCase(),
    r.detail.replace(/\s+/g, " "),
  ]);
  const header = ["RULE", "SECTION (docs/protocol.md)", "RESULT", "DETAIL"];
  const widths = header.map((title, i) =>
    Math.max(title.length, ...rows.map((row) => row[i]?.length ?? 0)),
  );
  const line = (cells: string[]): string =>
    cells.map((c, i) => (i < 3 ? c.padEnd(widths[i] ?? 0) : c)).join("  ");
  const failed = results.filter((r) => r.outcome === "fail").length;
  const skipped = results.filter((r) => r.outcome === "skip").length;
  const summary = `${results.length - failed - skipped} passed, ${failed} failed, ${skipped} skipped`;
  return [line(header), ...rows.map(line), "", summary].join("\n");
}
