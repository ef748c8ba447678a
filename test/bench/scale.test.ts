// The scale scenario (bench/scale.ts) at a small size: it runs to the end and
// writes its summary keys in their order, each a sane figure (never a
// timing); and the zones it runs (bench/fanout-zones.ts with `failover`, as
// the scenario starts them) pass the conformance kit's zone mode, the checks
// of `kds-mux conformance zone`.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { BENCH_LOADER } from "../../bench/fresh.ts";
import { SCALE_KEYS } from "../../bench/scale-keys.ts";
import { summaryProblems } from "../../bench/summary.ts";
import { listenForZone } from "../../src/adapters/node/conformance-link.ts";
import { checkZone } from "../../src/conformance/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { kindCatalog } from "../../src/sync/kind-catalog.ts";

const dir = mkdtempSync(join(tmpdir(), "kds-scale-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `file` under the bench's loader with `args`; resolves with its exit code and stderr. */
function bench(file: string, args: readonly string[], env: NodeJS.ProcessEnv) {
  const child = spawn(
    process.execPath,
    ["--import", BENCH_LOADER, fileURLToPath(new URL(file, import.meta.url)), ...args],
    { stdio: ["ignore", "ignore", "pipe"], env },
  );
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise<{ code: number | null; stderr: string }>((resolve) =>
    child.once("exit", (code) => resolve({ code, stderr })),
  );
}

describe("the scale scenario, small", () => {
  it("writes scale.* in order, each a sane figure", async () => {
    const out = join(dir, "scale.json");
    // The test server when there is one (as the other tests), else the bench's embedded PostgreSQL.
    const server = process.env.KDS_TEST_DATABASE_URL;
    const env = { ...process.env, ...(server ? { KDS_BENCH_DATABASE_URL: server } : {}) };
    const run = await bench(
      "../../bench/scale.ts",
      ["--instances", "2", "--zones", "200", "--rounds", "2", "--quick", "--quiet", "--out", out],
      env,
    );
    expect(run.stderr).not.toMatch(/keys missing/);
    expect(run.code).toBe(0);
    const summary = JSON.parse(readFileSync(out, "utf8")) as { scale: Record<string, unknown> };
    expect(Object.keys(summary.scale)).toEqual([
      "instances",
      "zones",
      "connectSeconds",
      "rssTotalMiB",
      "heapPerZoneKiB",
      "p50Ms",
      "p99Ms",
      "floorP99Ms",
      "p99PerFloor",
      "failoverSeconds",
      "failoverResentPercent",
    ]);
    expect(SCALE_KEYS.map((k) => k.key)).toEqual(
      Object.keys(summary.scale).map((k) => `scale.${k}`),
    );
    expect(summary.scale.instances).toBe(2);
    expect(summary.scale.zones).toBe(200);
    for (const key of ["p50Ms", "p99Ms", "floorP99Ms", "p99PerFloor"])
      expect(Object.keys(summary.scale[key] as object)).toEqual(["median", "min", "max", "runs"]);
    expect((summary.scale.p99Ms as { runs: number }).runs).toBe(2);
    expect(summaryProblems(summary, SCALE_KEYS)).toEqual([]);
  }, 300_000);

  it("runs zones that pass the conformance kit's zone mode (kds-mux conformance zone)", async () => {
    const stop = new AbortController();
    const listener = await listenForZone("127.0.0.1", 0, stop.signal);
    const tokensFile = join(dir, "tokens.json");
    writeFileSync(tokensFile, "[]");
    // One zone as bench/scale.ts starts them (failover over the given URLs, a Dataplane of its own),
    // with the quick backoff (100 ms to 2 s) so the kit's four sessions do not wait out the default one.
    const config = {
      urls: [listener.url],
      from: 0,
      count: 1,
      zonesPerConnection: 1,
      tokensFile,
      floorBytes: 1,
      floorAckBytes: 0,
      failover: true,
      dataplanes: 1,
    };
    const zones = spawn(
      process.execPath,
      [
        "--import",
        BENCH_LOADER,
        fileURLToPath(new URL("../../bench/fanout-zones.ts", import.meta.url)),
        JSON.stringify(config),
      ],
      { stdio: ["pipe", "pipe", "inherit"] },
    );
    // Its lines are read (and dropped) so a full pipe cannot stall it.
    createInterface({ input: zones.stdout }).on("line", () => undefined);
    zones.stdin.write(`${JSON.stringify({ startZones: 1 })}\n`);
    try {
      const results = await checkZone({
        accept: listener.accept,
        catalog: kindCatalog(createTypeRegistry(exampleTypes).list()),
        dialWaitMs: 30_000,
        signal: stop.signal,
      });
      expect(results.length).toBeGreaterThan(0);
      expect(results.filter((r) => r.outcome === "fail")).toEqual([]);
    } finally {
      zones.stdin.end();
      await new Promise((r) => zones.once("exit", r));
      stop.abort();
      await listener.close();
    }
  }, 120_000);
});
