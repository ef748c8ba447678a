// The churn scenario (bench/churn.ts) at a small size: it runs to the end,
// writes its summary keys in their order, each a sane figure (never a
// timing), and the global's store equals the union of the zones' stores.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { BENCH_LOADER } from "../../bench/fresh.ts";
import { CHURN_KEYS } from "../../bench/churn-keys.ts";
import { summaryProblems } from "../../bench/summary.ts";

const dir = mkdtempSync(join(tmpdir(), "kds-churn-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs bench/churn.ts under the bench's loader with `args`; resolves with its exit code and stderr. */
function churn(args: readonly string[], env: NodeJS.ProcessEnv) {
  const child = spawn(
    process.execPath,
    [
      "--import",
      BENCH_LOADER,
      fileURLToPath(new URL("../../bench/churn.ts", import.meta.url)),
      ...args,
    ],
    { stdio: ["ignore", "ignore", "pipe"], env },
  );
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise<{ code: number | null; stderr: string }>((resolve) =>
    child.once("exit", (code) => resolve({ code, stderr })),
  );
}

describe("the churn scenario, small", () => {
  it("writes churn.* in order, each a sane figure, and the stores agree", async () => {
    const out = join(dir, "churn.json");
    // The test server when there is one (as the other tests), else the bench's embedded PostgreSQL.
    const server = process.env.KDS_TEST_DATABASE_URL;
    const env = { ...process.env, ...(server ? { KDS_BENCH_DATABASE_URL: server } : {}) };
    const run = await churn(
      [
        ...["--zones", "3", "--resources", "5", "--rate", "20", "--seconds", "2"],
        ...["--quick", "--quiet", "--out", out],
      ],
      env,
    );
    expect(run.stderr).not.toMatch(/keys missing/);
    expect(run.code).toBe(0);
    const summary = JSON.parse(readFileSync(out, "utf8")) as {
      churn: Record<string, number>;
      details: { writes: number; stores: Record<string, number> };
    };
    expect(Object.keys(summary.churn)).toEqual([
      "zones",
      "resources",
      "changesPerSecond",
      "seconds",
      "lagP50Ms",
      "lagP99Ms",
      "lagMaxMs",
      "heapStartMiB",
      "heapEndMiB",
      "heapGrowthPercent",
      "rssStartMiB",
      "rssEndMiB",
      "storeMismatches",
    ]);
    expect(CHURN_KEYS.map((k) => k.key)).toEqual(
      Object.keys(summary.churn).map((k) => `churn.${k}`),
    );
    expect(summary.churn.zones).toBe(3);
    expect(summary.churn.resources).toBe(15);
    expect(summary.churn.seconds).toBe(2);
    expect(summary.details.writes).toBe(40);
    expect(summary.churn.storeMismatches).toBe(0);
    expect(summary.details.stores).toMatchObject({ zoneResources: 15, globalResources: 15 });
    expect(summary.churn.lagMaxMs).toBeGreaterThanOrEqual(summary.churn.lagP99Ms as number);
    expect(summaryProblems(summary, CHURN_KEYS)).toEqual([]);
  }, 120_000);
});
