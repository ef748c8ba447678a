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
import { ZONE_KIND, createTypeRegistry } from "../src/kinds/builtin-types.ts";
import { openDatabase, openStore, type BenchDatabase, type StoreKind } from "./bench-store.ts";
import { childNodeArgs, isMain } from "./fresh.ts";
import { SKIPPED } from "./summary.ts";
import { percentile } from "./percentile.ts";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { noopMetrics, type Metrics } from "../src/metrics.ts";

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
  /** Zones of one process connecting (started, not yet synced) at once. Default: all of them at once. */
  readonly dialsInFlight?: number;
  /** How long every zone may take to connect and sync; past it the run reports how many did, and no latency. Default 300 s. */
  readonly connectTimeoutMs?: number;
  /** How long one change may take to reach every zone; past it the run stops measuring and is incomplete. Default 60 s. */
  readonly roundTimeoutMs?: number;
  /** serveGlobal's `directMuxStream` (false: every zone through connect-node's handler, for A/B runs). Default true. */
  readonly directMuxStream?: boolean;
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
  /** Whether every zone connected and synced within `connectTimeoutMs` and every change reached them all within `roundTimeoutMs` (when not, `connectMs` or the latencies may be NaN). */
  readonly complete: boolean;
  /** Zones that mirrored the Mesh (all of them when complete; at the deadline when not). */
  readonly connected: number;
  /** From the first zone process starting to dial until every zone mirrors the Mesh. */
  readonly connectMs: number;
  /** Growth of the global process's heap (after GC) from before any zone dialed to all connected (to the deadline when not complete), per connected zone. */
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

/** What `promise` resolves to, or undefined when it takes longer than `ms`. */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<undefined>(
    (resolve) => (timer = setTimeout(() => resolve(undefined), ms)),
  );
  try {
    return await Promise.race([promise, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}
type Child = ChildProcessByStdio<Writable, Readable, null>;

/** Runs one fan-out; the string when its store is the PostgreSQL server and none answers. */
export async function fanoutBench(options: FanoutOptions): Promise<FanoutResult | typeof SKIPPED> {
  const { zones, rounds } = options;
  const processes = Math.max(1, Math.min(options.processes ?? 1, zones));
  const zonesPerConnection = Math.max(1, options.zonesPerConnection ?? 1);
  const storeKind = options.store ?? "memory";
  const instanceCount = options.instances ?? 1;
  if (instanceCount > 1 && storeKind === "memory")
    throw new Error("several global instances need a shared PostgreSQL store");
  const database: BenchDatabase | undefined =
    storeKind === "memory" ? undefined : await openDatabase(storeKind);
  if (storeKind !== "memory" && database === undefined) return SKIPPED;
  const stop = new AbortController();
  setMaxListeners(0, stop.signal); // every instance follows its store, zones and leases until the bench stops
  const types = createTypeRegistry(exampleTypes);
  const globals: GlobalControlPlane[] = [];
  const served: ServedGlobal[] = [];
  const children: Child[] = [];
  const dir = mkdtempSync(join(tmpdir(), "kds-mux-fanout-"));
  let traceTimer: ReturnType<typeof setInterval> | undefined;
  try {
    const trace = process.env.KDS_BENCH_TRACE === "1";
    const counts = new Map<string, number>();
    const count = (key: string): void => void counts.set(key, (counts.get(key) ?? 0) + 1);
    const metrics: Metrics | undefined = trace
      ? {
          ...noopMetrics,
          admission: (r) => count(`admit.${r}`),
          sessionOpened: () => count("opened"),
          sessionClosed: (_p, code) => count(`closed.${code}`),
          connection: (_l, e) => count(`conn.${e}`),
        }
      : undefined;
    for (let i = 0; i < instanceCount; i++) {
      const store = await openStore(types, database, 100_000);
      const global = new GlobalControlPlane({
        types,
        store,
        id: "global",
        instance: `g${i}`,
        logger: silentLogger,
        metrics,
      });
      global.start(stop.signal);
      globals.push(global);
      const limits = trace
        ? { listener: "zones" as const, maxConnections: 1_000_000, idleTimeoutMs: 2 ** 30, metrics }
        : undefined;
      served.push(
        await serveGlobal(global.server, { limits, directMuxStream: options.directMuxStream }),
      );
    }
    const first = globals[0] as GlobalControlPlane;
    for (let i = 0; i < zones; i += 500) {
      const batch = Array.from({ length: Math.min(500, zones - i) }, (_, j) => ({
        op: "put" as const,
        input: {
          kind: ZONE_KIND,
          name: `zone-${i + j}`,
          spec: create(ZoneSpecSchema, { enabled: true }),
        },
      }));
      await first.store.apply(batch);
    }
    await first.store.put({
      kind: "Mesh",
      name: "default",
      spec: create(MeshSpecSchema, { description: "start" }),
    });
    // Every zone proves its name with its own token, as deployed; too many for argv, so they go through a file.
    const tokens: string[] = [];
    for (let i = 0; i < zones; i++)
      tokens.push((await first.tokens.issueZoneToken(`zone-${i}`)).token);
    const tokensFile = join(dir, "tokens.json");
    writeFileSync(tokensFile, JSON.stringify(tokens));
    const before = memory(); // no zone has dialed yet

    const loop = monitorEventLoopDelay({ resolution: 20 });
    loop.enable();
    traceTimer = trace
      ? setInterval(() => {
          process.stderr.write(
            `fan-out global: handshaking ${globals.map((g) => g.server.handshaking).join(",")} sessions ${globals.map((g) => g.server.sessions().length).join(",")} loop p99 ${Math.round(loop.percentile(99) / 1e6)} ms max ${Math.round(loop.max / 1e6)} ms ${JSON.stringify(Object.fromEntries(counts))}\n`,
          );
          loop.reset();
        }, 5_000)
      : undefined;
    const urls = served.map((s) => s.url);
    const perProcess = Math.ceil(zones / processes);
    const lines: AsyncIterator<string>[] = [];
    for (let p = 0; p < processes; p++) {
      const from = p * perProcess;
      const count = Math.min(perProcess, zones - from);
      const config = {
        urls,
        from,
        count,
        zonesPerConnection,
        tokensFile,
        dialsInFlight: options.dialsInFlight,
      };
      const child = spawn(
        process.execPath,
        [
          ...childNodeArgs(),
          "--import",
          "tsx",
          fileURLToPath(new URL("./fanout-zones.ts", import.meta.url)),
          JSON.stringify(config),
        ],
        { stdio: ["pipe", "pipe", "inherit"] },
      );
      children.push(child);
      lines.push(createInterface({ input: child.stdout })[Symbol.asyncIterator]());
    }
    // Each child's lines; progress lines ({"progress"}) only update how many of its zones are synced.
    const synced = children.map(() => 0);
    const next = async (p: number): Promise<Line> => {
      for (;;) {
        const r = await (lines[p] as AsyncIterator<string>).next();
        if (r.done === true) throw new Error(`zones process ${p} ended early`);
        const line = JSON.parse(r.value as string) as Line;
        if (typeof line.progress === "number") synced[p] = line.progress;
        else return line;
      }
    };
    const connectTimeoutMs = options.connectTimeoutMs ?? 300_000;
    const ready = await within(Promise.all(children.map((_, p) => next(p))), connectTimeoutMs);
    let complete = ready !== undefined;
    const connectMs =
      ready !== undefined
        ? Math.max(...ready.map((r) => r.readyAt as number)) -
          Math.min(...ready.map((r) => r.startedAt as number))
        : Number.NaN;
    const connected = ready !== undefined ? zones : synced.reduce((a, b) => a + b, 0);
    const connections =
      ready !== undefined
        ? ready.reduce((sum, r) => sum + (r.connections as number), 0)
        : Number.NaN;
    if (!complete)
      process.stderr.write(
        `fan-out: only ${connected} of ${zones} zones connected and synced within ${connectTimeoutMs / 1000} s; no change latency measured\n`,
      );
    await new Promise((r) => setTimeout(r, 1_000));
    const after = memory();

    const latencies: number[] = [];
    let cpuUs = 0;
    let measuredRounds = 0;
    const roundTimeoutMs = options.roundTimeoutMs ?? 60_000;
    for (let seq = 1; complete && seq <= rounds; seq++) {
      const sentAt = performance.timeOrigin + performance.now();
      const cpuBefore = process.cpuUsage();
      await first.store.put({
        kind: "Mesh",
        name: "default",
        spec: create(MeshSpecSchema, { description: `seq-${seq}` }),
      });
      const done = await within(Promise.all(children.map((_, p) => next(p))), roundTimeoutMs);
      const cpu = process.cpuUsage(cpuBefore);
      if (done === undefined) {
        process.stderr.write(
          `fan-out: change ${seq} did not reach every zone within ${roundTimeoutMs / 1000} s; the run is incomplete\n`,
        );
        complete = false;
        break;
      }
      cpuUs += cpu.user + cpu.system;
      measuredRounds += 1;
      for (const d of done) {
        if (d.seq !== seq)
          throw new Error(
            `expected the arrivals of change ${seq}, got ${JSON.stringify(d).slice(0, 200)}`,
          );
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
      complete,
      connected,
      connectMs,
      heapPerZoneKiB: (after.heap - before.heap) / Math.max(1, connected) / 1024,
      rssPerZoneKiB: (after.rss - before.rss) / Math.max(1, connected) / 1024,
      p50Ms: percentile(latencies, 50),
      p99Ms: percentile(latencies, 99),
      maxMs: latencies.at(-1) ?? Number.NaN,
      globalCpuUsPerZoneChange: measuredRounds === 0 ? Number.NaN : cpuUs / measuredRounds / zones,
    };
  } finally {
    clearInterval(traceTimer);
    for (const child of children) child.stdin.end();
    await Promise.all(
      children.map((child) =>
        child.exitCode !== null ? undefined : new Promise((r) => child.once("exit", r)),
      ),
    );
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
