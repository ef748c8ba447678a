// Fan-out: N zones (in a child process, one HTTP/2 connection each) on one
// global. Memory per connected zone on the global, and how long one change
// takes to reach every zone (p50 and p99 over zones and rounds).
import { create } from "@bufbuild/protobuf";
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { serveGlobal } from "../src/adapters/node/serve-global.ts";
import { MeshSpecSchema, exampleTypes } from "../examples/example-kinds/index.ts";
import { GlobalControlPlane } from "../src/global/global-control-plane.ts";
import { silentLogger } from "../src/log.ts";
import { createTypeRegistry } from "../src/sync/builtin-types.ts";
import { isMain } from "./fresh.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

export interface FanoutResult {
  readonly zones: number;
  readonly connectMs: number;
  readonly heapPerZoneKiB: number;
  readonly rssPerZoneKiB: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly rounds: number;
}

function memory(): { heap: number; rss: number } {
  for (let i = 0; i < 3; i++) gc();
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss };
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

/** Connects `zones` zones, then makes `rounds` changes and times their arrival everywhere. */
export async function fanoutBench(zones: number, rounds: number): Promise<FanoutResult> {
  const stop = new AbortController();
  const global = new GlobalControlPlane({ types: createTypeRegistry(exampleTypes), logger: silentLogger });
  global.start(stop.signal);
  const served = await serveGlobal(global.server);
  for (let i = 0; i < zones; i++) await global.registerZone(`zone-${i}`);
  await global.store.put({ kind: "Mesh", name: "default", spec: create(MeshSpecSchema, { description: "start" }) });
  const before = memory(); // no zone has dialed yet
  // Every zone proves its name with its own token, as deployed; too many for argv, so they go through a file.
  const tokensFile = join(mkdtempSync(join(tmpdir(), "kds-mux-fanout-")), "tokens.json");
  const tokens: string[] = [];
  for (let i = 0; i < zones; i++) tokens.push((await global.tokens.issueZoneToken(`zone-${i}`)).token);
  writeFileSync(tokensFile, JSON.stringify(tokens));
  const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(new URL("./fanout-zones.ts", import.meta.url)), served.url, String(zones), tokensFile], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  try {
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    const next = async (): Promise<Record<string, unknown>> => {
      const r = await lines.next();
      if (r.done === true) throw new Error("the zones process ended early");
      return JSON.parse(r.value) as Record<string, unknown>;
    };
    const t0 = performance.now();
    await next(); // {"ready": N}
    const connectMs = performance.now() - t0;
    await new Promise((r) => setTimeout(r, 500));
    const after = memory();
    const latencies: number[] = [];
    for (let seq = 1; seq <= rounds; seq++) {
      const sentAt = performance.timeOrigin + performance.now();
      await global.store.put({ kind: "Mesh", name: "default", spec: create(MeshSpecSchema, { description: `seq-${seq}` }) });
      const done = await next();
      for (const at of done.arrivals as number[]) latencies.push(at - sentAt);
      await new Promise((r) => setTimeout(r, 100));
    }
    latencies.sort((a, b) => a - b);
    return {
      zones,
      connectMs,
      heapPerZoneKiB: (after.heap - before.heap) / zones / 1024,
      rssPerZoneKiB: (after.rss - before.rss) / zones / 1024,
      p50Ms: percentile(latencies, 50),
      p99Ms: percentile(latencies, 99),
      rounds,
    };
  } finally {
    child.stdin?.end();
    await new Promise((r) => child.once("exit", r));
    stop.abort();
    await served.close();
  }
}

if (isMain(import.meta.url)) {
  const result = await fanoutBench(Number(process.argv[2]), Number(process.argv[3]));
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(0);
}
