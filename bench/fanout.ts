// Fan-out: N zones on one global (or on several global instances sharing one
// PostgreSQL). The zones run in `processes` child processes
// (bench/fanout-zones.ts), each zone a real session over HTTP/2 on loopback,
// `zonesPerConnection` zones sharing one HTTP/2 connection (1: a connection
// each, as separate machines would). Measures how long every zone takes to
// connect and mirror the Mesh, the global's heap and RSS per connected zone
// (after GC, in this process, which holds nothing but the global), and how
// long one change takes to reach every zone (p50 and p99 over zones and
// rounds; arrival times on the common clock performance.timeOrigin + now).
//
//   npx tsx bench/fanout.ts '{"zones":1000,"rounds":5,"processes":4}'
import { create } from "@bufbuild/protobuf";
import { spawn, type ChildProcessByStdio } from "node:child_process";
import { setMaxListeners } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { serveGlobal, type ServedGlobal } from "../src/adapters/node/serve-global.ts";
import { MeshSpecSchema, exampleTypes } from "../examples/example-kinds/index.ts";
import { ZoneSpecSchema } from "../src/gen/kds/v1/resource_pb.ts";
import { GlobalControlPlane } from "../src/global/global-control-plane.ts";
import { silentLogger } from "../src/log.ts";
import { ZONE_KIND, createTypeRegistry } from "../src/sync/builtin-types.ts";
import { openDatabase, openStore, type BenchDatabase, type StoreKind } from "./bench-store.ts";
import { childNodeArgs, isMain } from "./fresh.ts";
import { SKIPPED } from "./summary.ts";
import { percentile } from "./percentile.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

/** What to run. */
export interface FanoutOptions {
  readonly zones: number;
  /** Changes made (and timed) after every zone connected. */
  readonly rounds: number;
  /** Child processes running the zones (zones spread evenly). Default 1. */
  readonly processes?: number;
  /** Zones sharing one HTTP/2 connection. Default 1 (a connection per zone). */
  readonly zonesPerConnection?: number;
  /** The global's store. Default memory. */
  readonly store?: StoreKind;
  /** Global instances sharing the store (zone i dials instance i mod instances); more than 1 needs a PostgreSQL store. Default 1. */
  readonly instances?: number;
}

/** One fan-out run's figures. */
export interface FanoutResult {
  readonly zones: number;
  readonly rounds: number;
  readonly processes: number;
  /** HTTP/2 connections the zones opened in all. */
  readonly connections: number;
  readonly store: StoreKind;
  readonly instances: number;
  /** From the first zone process starting to dial until every zone mirrors the Mesh. */
  readonly connectMs: number;
  /** Growth of the global process's heap (after GC) from before any zone dialed to all connected, per zone. */
  readonly heapPerZoneKiB: number;
  /** The same for RSS. */
  readonly rssPerZoneKiB: number;
  /** One change to the Mesh on the global (instance 0) until a zone's store has it: p50 over every zone and round. */
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** CPU time (user + system) of the global's process from each change until every zone has it, per change and zone, in microseconds: the global's work per zone, which wall-clock times hide on a loaded machine. */
  readonly globalCpuUsPerZoneChange: number;
}

function memory(): { heap: number; rss: number } {
  for (let i = 0; i < 3; i++) gc();
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss };
}

type Line = Record<string, unknown>;
type Child = ChildProcessByStdio<Writable, Readable, null>;

/** Runs one fan-out; the string when its store is the PostgreSQL server and none answers. */
export async function fanoutBench(options: FanoutOptions): Promise<FanoutResult | typeof SKIPPED> {
  const { zones, rounds } = options;
  const processes = Math.max(1, Math.min(options.processes ?? 1, zones));
  const zonesPerConnection = Math.max(1, options.zonesPerConnection ?? 1);
  const storeKind = options.store ?? "memory";
  const instanceCount = options.instances ?? 1;
  if (instanceCount > 1 && storeKind === "memory") throw new Error("several global instances need a shared PostgreSQL store");
  const database: BenchDatabase | undefined = storeKind === "memory" ? undefined : await openDatabase(storeKind);
  if (storeKind !== "memory" && database === undefined) return SKIPPED;
  const stop = new AbortController();
  setMaxListeners(0, stop.signal); // every instance follows its store, zones and leases until the bench stops
  const types = createTypeRegistry(exampleTypes);
  const globals: GlobalControlPlane[] = [];
  const served: ServedGlobal[] = [];
  const children: Child[] = [];
  const dir = mkdtempSync(join(tmpdir(), "kds-mux-fanout-"));
  try {
    for (let i = 0; i < instanceCount; i++) {
      const store = await openStore(types, database, 100_000);
      const global = new GlobalControlPlane({ types, store, id: "global", instance: `g${i}`, logger: silentLogger });
      global.start(stop.signal);
      globals.push(global);
      served.push(await serveGlobal(global.server));
    }
    const first = globals[0] as GlobalControlPlane;
    for (let i = 0; i < zones; i += 500) {
      const batch = Array.from({ length: Math.min(500, zones - i) }, (_, j) => ({ op: "put" as const, input: { kind: ZONE_KIND, name: `zone-${i + j}`, spec: create(ZoneSpecSchema, { enabled: true }) } }));
      await first.store.apply(batch);
    }
    await first.store.put({ kind: "Mesh", name: "default", spec: create(MeshSpecSchema, { description: "start" }) });
    // Every zone proves its name with its own token, as deployed; too many for argv, so they go through a file.
    const tokens: string[] = [];
    for (let i = 0; i < zones; i++) tokens.push((await first.tokens.issueZoneToken(`zone-${i}`)).token);
    const tokensFile = join(dir, "tokens.json");
    writeFileSync(tokensFile, JSON.stringify(tokens));
    const before = memory(); // no zone has dialed yet

    const urls = served.map((s) => s.url);
    const perProcess = Math.ceil(zones / processes);
    const lines: AsyncIterator<string>[] = [];
    for (let p = 0; p < processes; p++) {
      const from = p * perProcess;
      const count = Math.min(perProcess, zones - from);
      const config = { urls, from, count, zonesPerConnection, tokensFile };
      const child = spawn(process.execPath, [...childNodeArgs(), "--import", "tsx", fileURLToPath(new URL("./fanout-zones.ts", import.meta.url)), JSON.stringify(config)], { stdio: ["pipe", "pipe", "inherit"] });
      children.push(child);
      lines.push(createInterface({ input: child.stdout })[Symbol.asyncIterator]());
    }
    const next = async (p: number): Promise<Line> => {
      const r = await (lines[p] as AsyncIterator<string>).next();
      if (r.done === true) throw new Error(`zones process ${p} ended early`);
      return JSON.parse(r.value as string) as Line;
    };
    const ready = await Promise.all(children.map((_, p) => next(p)));
    const connectMs = Math.max(...ready.map((r) => r.readyAt as number)) - Math.min(...ready.map((r) => r.startedAt as number));
    const connections = ready.reduce((sum, r) => sum + (r.connections as number), 0);
    await new Promise((r) => setTimeout(r, 1_000));
    const after = memory();

    const latencies: number[] = [];
    let cpuUs = 0;
    for (let seq = 1; seq <= rounds; seq++) {
      const sentAt = performance.timeOrigin + performance.now();
      const cpuBefore = process.cpuUsage();
      await first.store.put({ kind: "Mesh", name: "default", spec: create(MeshSpecSchema, { description: `seq-${seq}` }) });
      const done = await Promise.all(children.map((_, p) => next(p)));
      const cpu = process.cpuUsage(cpuBefore);
      cpuUs += cpu.user + cpu.system;
      for (const d of done) {
        if (d.seq !== seq) throw new Error(`expected the arrivals of change ${seq}, got ${JSON.stringify(d).slice(0, 200)}`);
        for (const at of d.arrivals as number[]) latencies.push(at - sentAt);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    latencies.sort((a, b) => a - b);
    return {
      zones,
      rounds,
      processes,
      connections,
      store: storeKind,
      instances: instanceCount,
      connectMs,
      heapPerZoneKiB: (after.heap - before.heap) / zones / 1024,
      rssPerZoneKiB: (after.rss - before.rss) / zones / 1024,
      p50Ms: percentile(latencies, 50),
      p99Ms: percentile(latencies, 99),
      maxMs: latencies.at(-1) ?? Number.NaN,
      globalCpuUsPerZoneChange: cpuUs / rounds / zones,
    };
  } finally {
    for (const child of children) child.stdin.end();
    await Promise.all(children.map((child) => (child.exitCode !== null ? undefined : new Promise((r) => child.once("exit", r)))));
    stop.abort();
    for (const s of served) await s.close();
    for (const g of globals) await (g.store as { close?: () => Promise<void> }).close?.();
    await database?.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (isMain(import.meta.url)) {
  const result = await fanoutBench(JSON.parse(process.argv[2] as string) as FanoutOptions);
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(0);
}
