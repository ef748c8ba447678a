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
// The floor, in the same processes: a plain node:http2 server in this
// process, one stream per zone held open by the same zone processes (its
// connections shared as the zones' are); each floor round writes the bytes of
// one change's mux frame (bench/floor-wire.ts) once to every stream, and the
// latency is until each stream has read them; its CPU per stream, this
// process's and the zone processes', is the floor of what a change costs each
// side (with `floorAckBytes`, each stream also writes an ACK of that size
// back, which this process reads). Its memory per held stream (this
// process, and the zone processes' side) is the idle zone's floor. With room
// for both sets of sockets (`floor: "interleaved"`) the floor streams open
// before the zones and stay open, and each change is followed by a floor
// round; without (10,000 zones need about 20,000 open files on this process,
// `floor: "after"`) the floor runs after the zones stopped.
//
//   node --import ./bench/loader/register.mjs bench/fanout.ts '{"zones":1000,"rounds":5,"processes":4}'
//
// Diagnostics of the global (this process), set in the environment:
//   KDS_BENCH_CPU_PROFILE=<file>  a V8 CPU profile over the timed rounds only
//                                 (not the connecting), for Chrome DevTools or
//                                 any .cpuprofile reader; with
//                                 KDS_BENCH_HEAP_SAMPLING=1 a sampling heap
//                                 profile (allocations) instead, and with
//                                 KDS_BENCH_HEAP_SAMPLING=survivors one of the
//                                 allocations no scavenge collected (promoted
//                                 to the old generation, or still live; see
//                                 bench/profile.ts);
//                                 KDS_BENCH_CPU_PROFILE_INTERVAL_US=<µs> sets
//                                 the CPU profile's sampling interval (V8's
//                                 default is 1,000 µs)
//   KDS_BENCH_IDLE_MS=<ms>        before the rounds, the global's CPU time over
//                                 that long with every zone connected and no
//                                 change (heartbeats, lease renewals, timers),
//                                 printed to stderr; KDS_BENCH_IDLE_PROFILE=<file>
//                                 profiles it. This work grows with the zones
//                                 and goes on during a round, so a round that
//                                 lasts longer (more zones) counts more of it
//                                 per zone in globalCpuUsPerZoneChange.
//   KDS_BENCH_HEAP_SNAPSHOT=<file> a V8 heap snapshot of the global once every
//                                 zone connected (where the idle zone's heap,
//                                 heapPerZoneKiB, goes), for Chrome DevTools
import { create } from "@bufbuild/protobuf";
import { execFileSync, spawn, type ChildProcessByStdio } from "node:child_process";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { setMaxListeners } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { setFlagsFromString, writeHeapSnapshot } from "node:v8";
import { runInNewContext } from "node:vm";
import { serveGlobal, type ServedGlobal } from "../src/adapters/node/serve-global.ts";
import {
  MeshSpecSchema,
  ZoneIngressSpecSchema,
  exampleTypes,
} from "../examples/example-kinds/index.ts";
import { memoryMuxTransport } from "../src/transport/memory.ts";
import { ZoneControlPlane } from "../src/zone/zone-control-plane.ts";
import { ZoneSpecSchema } from "../src/gen/kds/v1/resource_pb.ts";
import { GlobalControlPlane } from "../src/global/global-control-plane.ts";
import { silentLogger } from "../src/log.ts";
import { ZONE_KIND, createTypeRegistry } from "../src/kinds/builtin-types.ts";
import { openDatabase, openStore, type BenchDatabase, type StoreKind } from "./bench-store.ts";
import { childNodeArgs, isMain, BENCH_LOADER } from "./fresh.ts";
import { profileOf } from "./profile.ts";
import { SKIPPED, spreadOf } from "./summary.ts";
import { percentile } from "./percentile.ts";
import { meshChangeFrame } from "./floor-wire.ts";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { gcSince } from "./gc-since.ts";
import {
  noopMetrics,
  type AdmissionResult,
  type ConnectionEvent,
  type ListenerName,
  type Metrics,
} from "../src/metrics.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

/** What to run. */
export interface FanoutOptions {
  readonly zones: number;
  /** Changes made (and timed) after every zone connected. */
  readonly rounds: number;
  /**
   * Changes made first, after every zone connected, and not counted (each
   * followed by an uncounted floor write): the change path's first runs
   * compile it, and until a zone process has run it some thousands of times
   * a round costs it two to three times a later one, enough to make a
   * 10-round p99 mostly the first counted round's slowest zones. As the 100k
   * sync runs one uncounted warm-up sync. Default: enough rounds for each
   * zone process to take {@link WARM_CHANGES_PER_PROCESS} changes, at least
   * 2 and at most 10 ({@link defaultWarmupRounds}).
   */
  readonly warmupRounds?: number;
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
  /** How the floor runs (see the top of this file): "interleaved", "after" or "none". Default: "interleaved" when this process may open twice the zones' sockets, else "after". */
  readonly floor?: FloorMode;
  /**
   * Bytes each floor stream writes back when it has read a round (as a zone
   * ACKs a change), and the floor's server reads before the round's CPU is
   * taken: the floor of a change and its ACK. Default 0 (nothing back, as
   * `npm run bench` runs it).
   */
  readonly floorAckBytes?: number;
  /**
   * The cross-zone flow: what changes is not the Mesh on the global but a
   * ZoneIngress (zone-to-zones) made in one more zone, the origin (in this
   * process, over the in-memory transport to instance 0), which reaches every
   * other zone through the global: zone, global, zones. Default false.
   */
  readonly crossZone?: boolean;
}

/** When the fan-out's floor runs: beside the zones, after them, or not at all. */
export type FloorMode = "interleaved" | "after" | "none";

/** The fan-out's floor: the same bytes to plain node:http2 streams held by the same zone processes. */
export interface FanoutFloor {
  readonly mode: FloorMode;
  /** Bytes written to every stream per round (one change's mux frame). */
  readonly bytes: number;
  /** Bytes every stream wrote back per round (`floorAckBytes`). */
  readonly ackBytes: number;
  /** Write to every stream until a stream has read the bytes: p50 over every stream and round. */
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** This process's heap growth per held stream (after GC). With "after" it also holds what the stopped zones released (often below zero): a floor only with "interleaved". */
  readonly heapPerStreamKiB: number;
  /** This process's RSS growth per held stream. */
  readonly rssPerStreamKiB: number;
  /** The zone processes' heap growth per held stream (after GC). */
  readonly clientHeapPerStreamKiB: number;
  /** The zone processes' RSS growth per held stream. */
  readonly clientRssPerStreamKiB: number;
  /** CPU time of this process (the floor's server) per round and stream, microseconds: from the write until every stream has read it (and, with `ackBytes`, until it has read every stream's ACK). */
  readonly globalCpuUsPerStream: number;
  /** CPU time of the zone processes (summed) per round and stream, microseconds: in each, from a round's first arrival there to its last (as `zonesCpuUsPerZoneChange`; with `ackBytes`, the ACKs written by then included). */
  readonly zonesCpuUsPerStream: number;
}

/** One fan-out run's figures. */
export interface FanoutResult {
  readonly zones: number;
  readonly rounds: number;
  /** Uncounted changes made before the rounds (see {@link FanoutOptions.warmupRounds}). */
  readonly warmupRounds: number;
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
  /** Growth of the global process's heap (after GC) from before any zone dialed (with "interleaved", after the floor's streams opened) to all connected (to the deadline when not complete), per connected zone. */
  readonly heapPerZoneKiB: number;
  /** The same for RSS. */
  readonly rssPerZoneKiB: number;
  /** One change to the Mesh on the global (instance 0), or to the origin zone's ZoneIngress (`crossZone`), until a zone's store has it: p50 over every zone and round. */
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /**
   * From each change until the global (every instance) handed the last zone's response frame to its
   * transport to write, median over the rounds: the global's own part of the latency. The rest, up to
   * p99Ms, is the write, the zones' processes reading and applying it (on the same cores here) and the
   * clock of their arrival.
   */
  readonly lastWriteMs: number;
  /** CPU time (user + system) of the global's process from each change until every zone has it, per change and zone, in microseconds: the global's work per zone, which wall-clock times hide on a loaded machine. */
  readonly globalCpuUsPerZoneChange: number;
  /**
   * The zone processes' CPU time (summed) from each change's first arrival in a process to its last
   * there, per change and zone, in microseconds: what applying a change costs the bench's zones, which
   * share this machine's cores with the global (the ACKs after the last arrival are not counted).
   */
  readonly zonesCpuUsPerZoneChange: number;
  /** The same up to 200 ms after every zone has it (the ACKs handled by then): the global's whole work per zone and change. */
  readonly globalSettledCpuUsPerZoneChange: number;
  /** The floor; undefined when `floor` was "none". */
  readonly floor?: FanoutFloor;
  /** With several instances, each instance's part of a change's way (instance 0 wrote it); undefined with one. */
  readonly path?: readonly InstancePath[];
}

/**
 * Where one change's time goes with several instances on one PostgreSQL
 * (the change written through instance 0): each figure from the write's start,
 * median (or percentile) over the rounds.
 */
export interface InstancePath {
  /** Its index; 0 wrote the change. */
  readonly instance: number;
  /** Zones connected to it. */
  readonly zones: number;
  /** Until instance 0's write committed (the store's `put` returned), the same for every instance. */
  readonly committedMs: number;
  /**
   * Until a watcher on this instance's store yielded the change: its own
   * commit for instance 0; for the others the NOTIFY, their LISTEN
   * connection waking and the catch-up query that reads the change. The
   * instance's engine wakes from the same NOTIFY with a query of its own.
   */
  readonly seenMs: number;
  /** Until its zones' stores had the change, p50 and p99 over its zones and the rounds. */
  readonly p50Ms: number;
  readonly p99Ms: number;
}

/** This process's soft limit on open files. */
export function fdSoftLimit(): number {
  return Number(execFileSync("sh", ["-c", "ulimit -Sn"], { encoding: "utf8" }).trim());
}

function memory(): { heap: number; rss: number } {
  for (let i = 0; i < 3; i++) gc();
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss };
}

type Line = Record<string, unknown>;

/** The common clock of this process and the zone processes (see the top of this file). */
const clock = (): number => performance.timeOrigin + performance.now();

/** What `promise` resolves to, or undefined when it takes longer than `ms`. */
export async function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
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

/**
 * Changes each zone process takes, over the uncounted rounds, before the
 * counted ones by default: its zones' change path is then compiled. At 1,000
 * zones in 2 processes (500 each) the zones' CPU per round kept falling until
 * about the seventh change (3,500 per process), from 90-115 ms to 30-50
 * (`KDS_BENCH_TRACE=1`, bench/README.md); 10,000 zones in 4 processes took
 * 5,000 each in the 2 rounds they always had.
 */
export const WARM_CHANGES_PER_PROCESS = 5_000;

/** The uncounted rounds for `zonesPerProcess` zones in each zone process: see {@link WARM_CHANGES_PER_PROCESS}. */
export function defaultWarmupRounds(zonesPerProcess: number): number {
  return Math.min(
    MAX_WARMUP_ROUNDS,
    Math.max(2, Math.ceil(WARM_CHANGES_PER_PROCESS / zonesPerProcess)),
  );
}

/** At most this many uncounted rounds by default, however few zones each process holds (10 at 1,000 zones in 2 processes). */
const MAX_WARMUP_ROUNDS = 10;

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
  // Twice the zones' sockets (theirs and the floor's) plus room for the store, the children and the files.
  const floorMode: FloorMode =
    options.floor ?? (2 * zones + 1_000 <= fdSoftLimit() ? "interleaved" : "after");
  const floorFrame = meshChangeFrame("seq-1");
  const floorStreams: http2.ServerHttp2Stream[] = [];
  const floorAckBytes = options.floorAckBytes ?? 0;
  /** Bytes the floor's streams wrote back (their ACKs), and a wait for a total of them. */
  let floorAcked = 0;
  let ackWait: { bytes: number; resolve: () => void } | undefined;
  const floorServer = http2.createServer();
  floorServer.on("stream", (stream) => {
    // A zone process that ends destroys its streams: that reset is the end of the bench, not a fault to report.
    stream.on("error", () => undefined);
    stream.respond({ ":status": 200 });
    stream.on("data", (chunk: Buffer) => {
      floorAcked += chunk.byteLength;
      if (ackWait !== undefined && floorAcked >= ackWait.bytes) {
        ackWait.resolve();
        ackWait = undefined;
      }
    });
    floorStreams.push(stream);
  });
  /** Resolves once the floor's streams wrote `bytes` back in all. */
  const floorAckedUpTo = (bytes: number): Promise<void> =>
    floorAcked >= bytes
      ? Promise.resolve()
      : new Promise((resolve) => {
          ackWait = { bytes, resolve };
        });
  try {
    await new Promise<void>((r) =>
      floorServer.listen({ port: 0, host: "127.0.0.1", backlog: 4096 }, r),
    );
    const floorUrl = `http://127.0.0.1:${(floorServer.address() as AddressInfo).port}`;
    const trace = process.env.KDS_BENCH_TRACE === "1";
    const counts = new Map<string, number>();
    const count = (key: string): void => void counts.set(key, (counts.get(key) ?? 0) + 1);
    /** When a response frame was last handed to a zone's transport (lastWriteMs). */
    let lastResponseAt = 0;
    const metrics: Metrics = {
      ...noopMetrics,
      frames: (direction, lane) => {
        if (direction === "sent" && lane === "responses") lastResponseAt = clock();
      },
      ...(trace
        ? {
            admission: (r: AdmissionResult) => count(`admit.${r}`),
            sessionOpened: () => count("opened"),
            sessionClosed: (_p: string, code: string) => count(`closed.${code}`),
            connection: (_l: ListenerName, e: ConnectionEvent) => count(`conn.${e}`),
          }
        : {}),
    };
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
    const origin = options.crossZone === true ? await originZone(first, stop.signal) : undefined;
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
        floorBytes: floorFrame.byteLength,
        floorAckBytes,
      };
      const child = spawn(
        process.execPath,
        [
          ...childNodeArgs(),
          "--import",
          BENCH_LOADER,
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
    const tell = (command: unknown): void => {
      for (const child of children) child.stdin.write(`${JSON.stringify(command)}\n`);
    };
    const roundTimeoutMs = options.roundTimeoutMs ?? 60_000;
    /** Opens the floor's streams; their memory per stream on both sides. */
    const openFloor = async () => {
      const base = memory();
      tell({ floorOpen: floorUrl });
      const opened = await within(Promise.all(children.map((_, p) => next(p))), 300_000);
      if (opened === undefined) throw new Error("the floor's streams did not open within 300 s");
      if (floorStreams.length !== zones)
        throw new Error(`the floor server holds ${floorStreams.length} of ${zones} streams`);
      await new Promise((r) => setTimeout(r, 1_000));
      const held = memory();
      const sum = (k: string): number => opened.reduce((a, o) => a + (o[k] as number), 0);
      return {
        held,
        heapPerStreamKiB: (held.heap - base.heap) / zones / 1024,
        rssPerStreamKiB: (held.rss - base.rss) / zones / 1024,
        clientHeapPerStreamKiB: sum("heapBytes") / zones / 1024,
        clientRssPerStreamKiB: sum("rssBytes") / zones / 1024,
      };
    };
    const floorLatencies: number[] = [];
    let floorCpuUs = 0;
    let floorZonesCpuUs = 0;
    /** Floor rounds written, warm-ups included (each stream writes `floorAckBytes` back per round). */
    let floorWrites = 0;
    let floorRounds = 0;
    /** Writes the frame once to every floor stream (counted unless a warm-up); false when a stream did not read it in time. */
    const floorRound = async (seq: number, counted = true): Promise<boolean> => {
      const sentAt = performance.timeOrigin + performance.now();
      const cpuBefore = process.cpuUsage();
      for (const stream of floorStreams) stream.write(floorFrame);
      floorWrites++;
      const done = await within(
        Promise.all(children.map((_, p) => next(p))).then(async (arrived) => {
          await floorAckedUpTo(floorWrites * floorStreams.length * floorAckBytes);
          return arrived;
        }),
        roundTimeoutMs,
      );
      const cpu = process.cpuUsage(cpuBefore);
      if (done === undefined) {
        process.stderr.write(
          `fan-out floor: write ${seq} did not reach every stream within ${roundTimeoutMs / 1000} s\n`,
        );
        return false;
      }
      for (const d of done)
        if (d.floorSeq !== seq)
          throw new Error(
            `expected the floor's arrivals of write ${seq}, got ${JSON.stringify(d).slice(0, 200)}`,
          );
      if (counted) {
        floorCpuUs += cpu.user + cpu.system;
        floorRounds++;
        for (const d of done) {
          floorZonesCpuUs += d.cpuUs as number;
          for (const at of d.arrivals as number[]) floorLatencies.push(at - sentAt);
        }
      }
      await new Promise((r) => setTimeout(r, 200));
      return true;
    };
    const floorMemory = floorMode === "interleaved" ? await openFloor() : undefined;
    const zonesBase = floorMemory?.held ?? before;
    tell({ startZones: 1 });
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
    if (process.env.KDS_BENCH_HEAP_SNAPSHOT !== undefined)
      process.stderr.write(
        `fan-out: heap snapshot of the global with ${connected} idle zones: ${writeHeapSnapshot(process.env.KDS_BENCH_HEAP_SNAPSHOT)}\n`,
      );

    const latencies: number[] = [];
    /** Per round: from the change until the last response frame went to a zone's transport. */
    const lastWrites: number[] = [];
    let cpuUs = 0;
    /** The zone processes' CPU time, summed, from each change's first arrival in each to its last there. */
    let zonesCpuUs = 0;
    let settledCpuUs = 0;
    let measuredRounds = 0;
    // Several instances: when each instance's store yields each round's change, and its zones' latencies.
    const committed: number[] = [];
    const sentAtOf = new Map<number, number>();
    const seenAt = globals.map(() => new Map<number, number>());
    const instanceLatencies = globals.map((): number[] => []);
    if (instanceCount > 1 && origin === undefined)
      for (const [k, g] of globals.entries()) {
        const from = await g.store.revision({ signal: stop.signal });
        void (async () => {
          for await (const change of g.store.watch(from, { signal: stop.signal, kinds: ["Mesh"] }))
            if (change.op === "put") {
              const m = /^seq-(\d+)$/.exec(
                (change.resource.spec as { description?: string } | undefined)?.description ?? "",
              );
              if (m !== null) (seenAt[k] as Map<number, number>).set(Number(m[1]), clock());
            }
        })().catch((error: unknown) => {
          // The bench stopping ends the watch; anything else leaves this instance's path figures NaN, so say why.
          if (!stop.signal.aborted)
            process.stderr.write(
              `fan-out: the watch of instance ${k}'s store failed: ${String(error)}\n`,
            );
        });
      }
    let floorComplete = true;
    const idleMs = Number(process.env.KDS_BENCH_IDLE_MS ?? 0);
    if (complete && idleMs > 0) {
      const idleProfile = await profileOf(process.env.KDS_BENCH_IDLE_PROFILE);
      const idleBefore = process.cpuUsage();
      await new Promise((r) => setTimeout(r, idleMs));
      const idle = process.cpuUsage(idleBefore);
      await idleProfile?.();
      const usPerSecond = ((idle.user + idle.system) * 1000) / idleMs;
      process.stderr.write(
        `fan-out: the global idle with ${zones} zones: ${(usPerSecond / 1000).toFixed(1)} ms of CPU per second, ${(usPerSecond / zones).toFixed(1)} µs per zone and second\n`,
      );
    }
    /** Makes change `seq`: the Mesh on instance 0, or the origin zone's ZoneIngress. */
    const change = async (seq: number): Promise<void> => {
      if (origin !== undefined)
        await origin.store.put({
          kind: "ZoneIngress",
          name: "ingress",
          spec: create(ZoneIngressSpecSchema, { address: `seq-${seq}`, port: 10001 }),
        });
      else
        await first.store.put({
          kind: "Mesh",
          name: "default",
          spec: create(MeshSpecSchema, { description: `seq-${seq}` }),
        });
    };
    // Uncounted changes first (see FanoutOptions.warmupRounds): the counted rounds are seq warmup + 1 on.
    const warmup = options.warmupRounds ?? defaultWarmupRounds(zones / processes);
    for (let seq = 1; complete && seq <= warmup; seq++) {
      await change(seq);
      const done = await within(Promise.all(children.map((_, p) => next(p))), roundTimeoutMs);
      if (done === undefined || done.some((d) => d.seq !== seq)) {
        process.stderr.write(
          `fan-out: warm-up change ${seq} did not reach every zone within ${roundTimeoutMs / 1000} s; the run is incomplete\n`,
        );
        complete = false;
        break;
      }
      await new Promise((r) => setTimeout(r, 200));
      if (floorMode === "interleaved" && floorComplete)
        floorComplete = await floorRound(seq, false);
    }
    const profile = await profileOf(process.env.KDS_BENCH_CPU_PROFILE);
    const roundGc = trace ? gcSince() : undefined;
    for (let seq = warmup + 1; complete && seq <= warmup + rounds; seq++) {
      const sentAt = clock();
      sentAtOf.set(seq, sentAt);
      const cpuBefore = process.cpuUsage();
      await change(seq);
      if (origin === undefined) committed.push(clock() - sentAt);
      const done = await within(Promise.all(children.map((_, p) => next(p))), roundTimeoutMs);
      const cpu = process.cpuUsage(cpuBefore);
      lastWrites.push(lastResponseAt - sentAt);
      if (done === undefined) {
        process.stderr.write(
          `fan-out: change ${seq} did not reach every zone within ${roundTimeoutMs / 1000} s; the run is incomplete\n`,
        );
        complete = false;
        break;
      }
      cpuUs += cpu.user + cpu.system;
      measuredRounds += 1;
      if (process.env.KDS_BENCH_TRACE === "1") {
        // Each zone process's own latencies this round (p50 / p99 / max), and the global's garbage collection.
        const own = done.map((d) => {
          const l = (d.arrivals as number[]).map((at) => at - sentAt).sort((a, b) => a - b);
          return `${Math.round(percentile(l, 50))}/${Math.round(percentile(l, 99))}/${Math.round(l.at(-1) ?? Number.NaN)}`;
        });
        process.stderr.write(
          `fan-out: change ${seq}: global ${Math.round((cpu.user + cpu.system) / 1000)} ms CPU (GC ${roundGc?.()}; heap ${Math.round(process.memoryUsage().heapUsed / 2 ** 20)} MiB after), zone processes ${done.map((d) => `${Math.round((d.cpuUs as number) / 1000)} (GC ${String(d.gc)})`).join(" + ")} ms; latency p50/p99/max by process ${own.join(", ")} ms\n`,
        );
      }
      for (const d of done) {
        if (d.seq !== seq)
          throw new Error(
            `expected the arrivals of change ${seq}, got ${JSON.stringify(d).slice(0, 200)}`,
          );
        zonesCpuUs += d.cpuUs as number;
        const instances = d.instances as number[];
        for (const [j, at] of (d.arrivals as number[]).entries()) {
          latencies.push(at - sentAt);
          instanceLatencies[instances[j] as number]?.push(at - sentAt);
        }
      }
      await new Promise((r) => setTimeout(r, 200));
      const settled = process.cpuUsage(cpuBefore);
      settledCpuUs += settled.user + settled.system;
      if (floorMode === "interleaved" && floorComplete) floorComplete = await floorRound(seq);
    }
    await profile?.();
    let afterMemory: Awaited<ReturnType<typeof openFloor>> | undefined;
    if (floorMode === "after") {
      tell({ stopZones: 1 });
      const stopped = await within(Promise.all(children.map((_, p) => next(p))), 60_000);
      if (stopped === undefined) throw new Error("the zones did not stop within 60 s");
      afterMemory = await openFloor();
      for (let seq = 1; floorComplete && seq <= warmup + rounds; seq++)
        floorComplete = await floorRound(seq, seq > warmup);
    }
    latencies.sort((a, b) => a - b);
    floorLatencies.sort((a, b) => a - b);
    const floorHeld = floorMemory ?? afterMemory;
    const floor: FanoutFloor | undefined =
      floorHeld === undefined || !floorComplete
        ? undefined
        : {
            mode: floorMode,
            bytes: floorFrame.byteLength,
            ackBytes: floorAckBytes,
            p50Ms: percentile(floorLatencies, 50),
            p99Ms: percentile(floorLatencies, 99),
            maxMs: floorLatencies.at(-1) ?? Number.NaN,
            heapPerStreamKiB: floorHeld.heapPerStreamKiB,
            rssPerStreamKiB: floorHeld.rssPerStreamKiB,
            clientHeapPerStreamKiB: floorHeld.clientHeapPerStreamKiB,
            clientRssPerStreamKiB: floorHeld.clientRssPerStreamKiB,
            globalCpuUsPerStream: floorRounds === 0 ? Number.NaN : floorCpuUs / floorRounds / zones,
            zonesCpuUsPerStream:
              floorRounds === 0 ? Number.NaN : floorZonesCpuUs / floorRounds / zones,
          };
    return {
      zones,
      rounds,
      warmupRounds: warmup,
      processes,
      connections,
      store: storeKind,
      instances: instanceCount,
      complete,
      connected,
      connectMs,
      heapPerZoneKiB: (after.heap - zonesBase.heap) / Math.max(1, connected) / 1024,
      rssPerZoneKiB: (after.rss - zonesBase.rss) / Math.max(1, connected) / 1024,
      p50Ms: percentile(latencies, 50),
      p99Ms: percentile(latencies, 99),
      maxMs: latencies.at(-1) ?? Number.NaN,
      lastWriteMs: percentile(
        lastWrites.sort((a, b) => a - b),
        50,
      ),
      globalCpuUsPerZoneChange: measuredRounds === 0 ? Number.NaN : cpuUs / measuredRounds / zones,
      zonesCpuUsPerZoneChange:
        measuredRounds === 0 ? Number.NaN : zonesCpuUs / measuredRounds / zones,
      globalSettledCpuUsPerZoneChange:
        measuredRounds === 0 ? Number.NaN : settledCpuUs / measuredRounds / zones,
      floor: floorMode === "none" ? undefined : floor,
      path:
        instanceCount > 1 && origin === undefined
          ? globals.map((_, k) => {
              const own = (instanceLatencies[k] as number[]).sort((a, b) => a - b);
              return {
                instance: k,
                zones: Math.ceil((zones - k) / instanceCount),
                committedMs: spreadOf(committed).median,
                seenMs: spreadOf(
                  Array.from(
                    { length: measuredRounds },
                    (_, r) =>
                      (seenAt[k]?.get(warmup + r + 1) ?? Number.NaN) -
                      (sentAtOf.get(warmup + r + 1) ?? Number.NaN),
                  ),
                ).median,
                p50Ms: percentile(own, 50),
                p99Ms: percentile(own, 99),
              };
            })
          : undefined,
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
    for (const stream of floorStreams) stream.destroy();
    await new Promise<void>((r) => floorServer.close(() => r()));
    for (const g of globals) await (g.store as { close?: () => Promise<void> }).close?.();
    await database?.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The origin zone of a cross-zone run: registered, connected to `global` over
 * the in-memory transport, holding a ZoneIngress the global already has.
 */
async function originZone(
  global: GlobalControlPlane,
  signal: AbortSignal,
): Promise<ZoneControlPlane> {
  await global.registerZone("origin");
  const zone = new ZoneControlPlane({
    name: "origin",
    token: (await global.tokens.issueZoneToken("origin")).token,
    transport: memoryMuxTransport(global.server),
    types: createTypeRegistry(exampleTypes),
    logger: silentLogger,
  });
  void zone.run(signal);
  await zone.store.put({
    kind: "ZoneIngress",
    name: "ingress",
    spec: create(ZoneIngressSpecSchema, { address: "start", port: 10001 }),
  });
  const deadline = performance.now() + 60_000;
  while ((await global.store.get("ZoneIngress", "", "origin.ingress")) === undefined) {
    if (performance.now() > deadline)
      throw new Error("the origin zone's ZoneIngress did not reach the global within 60 s");
    await new Promise((r) => setTimeout(r, 50));
  }
  return zone;
}

if (isMain(import.meta.url)) {
  const result = await fanoutBench(JSON.parse(process.argv[2] as string) as FanoutOptions);
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(0);
}
