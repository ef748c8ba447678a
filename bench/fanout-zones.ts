// Child process of the fan-out benchmark (bench/fanout.ts): zones `from` to
// `from + count - 1`, zone i dialing urls[i mod urls.length], every
// `zonesPerConnection` zones of one url sharing one HTTP/2 connection (one
// Connect transport), at most `dialsInFlight` zones connecting at once.
// It acts on JSON lines on stdin:
//   {"floorOpen": url}  opens one plain node:http2 stream per zone to the
//                       floor server at url (connections shared as the
//                       zones' are), replies {"floorOpened", "heapBytes",
//                       "rssBytes"} (this process's growth, after GC)
//   {"startZones": 1}   starts the zones
//   {"stopZones": 1}    stops them, replies {"zonesStopped"}
//   {"counts": 1}       replies {"counts": {"received", "sent", "connects"}}:
//                       resources its zones received and sent, and sessions
//                       they opened, over all sessions so far
// With `failover` each zone dials every url through failoverMuxTransport,
// starting at urls[i mod urls.length], on a connection of its own (as the
// CLI's zone does with several --global URLs, and goes where rebalancing
// tells it); with `dataplanes` each zone holds that many Dataplanes of its
// own (zone-to-global) before it dials; with `churn` too, the zones report
// their Dataplanes' change-to-ACK lag and these commands serve the churn
// scenario (bench/churn.ts, bench/churn-zones.ts):
//   {"churn": {"rate", "seconds", "resources"}}  changes at that rate over
//                       this process's zones, lags recorded from then;
//                       replies {"churned": {"writes", "startedAt",
//                       "endedAt", "behindMaxMs"}}
//   {"acks": 1}         replies {"acks": {"sent", "unacked", "short"}}
//                       (bench/churn-zones.ts)
//   {"lags": 1}         stops recording, replies {"lags": [ms, ...],
//                       "heapBytes", "rssBytes"} (this process's, after GC)
//   {"dump": 1}         one {"zoneStore": name, "entries": [[name,
//                       address, version], ...]} per zone, then {"dumped"}
// `floorOpen` may name one url per
// global instance: the floor stream of zone i then goes to urls[i mod n].
// and prints JSON lines: {"progress", "at"} (zones synced so far) at most
// once a second while connecting, {"ready", "startedAt", "readyAt",
// "connections"} once every zone mirrors the Mesh, then {"seq", "arrivals",
// "instances", "cpuUs", "gc"} for each change the parent makes (instances[j]: the index in
// urls of the instance that zone of arrivals[j] dials; cpuUs: this process's CPU
// time from the change's first arrival here to its last; gc: under
// KDS_BENCH_TRACE, its collections over that time, bench/gc-since.ts) and {"floorSeq", "arrivals", "cpuUs"} for each
// write of `floorBytes` bytes to every floor stream (cpuUs as for a change; with
// `floorAckBytes`, each floor stream then writes that many bytes back; times as
// performance.timeOrigin + performance.now(), comparable across processes
// on one machine). End of stdin: stop and exit.
//
// KDS_BENCH_ZONE_CPU_PROFILE=<dir> (diagnostic): a V8 CPU profile of this
// process from the moment every zone mirrors the Mesh (the timed rounds, not
// the connecting) until stopZones or the end, into
// <dir>/zones-<from>.<pid>.cpuprofile (with KDS_BENCH_ZONE_CPU_PROFILE_PHASE=connect,
// from startZones until every zone mirrors the Mesh instead); KDS_BENCH_CPU_PROFILE_INTERVAL_US sets
// its sampling interval (V8's default 1,000 µs); with KDS_BENCH_HEAP_SAMPLING=1
// a sampling heap profile (allocations) instead, <dir>/zones-<from>.<pid>.heapprofile,
// and with KDS_BENCH_HEAP_SAMPLING=survivors one of only what no scavenge collected.
// KDS_BENCH_ZONE_HEAP_SNAPSHOT=<dir> (diagnostic): a heap snapshot 10 s after
// every zone mirrors the Mesh (see snapshotHeap).
import { createGrpcTransport } from "@connectrpc/connect-node";
import { windowedSessionManager } from "../src/adapters/node/http2-windows.ts";
import { setMaxListeners } from "node:events";
import { readFileSync } from "node:fs";
import { grpcMuxTransport } from "../src/adapters/node/grpc-mux-client.ts";
import { silentLogger } from "../src/log.ts";
import { connectMuxTransport } from "../src/transport/connect.ts";
import type { MuxTransport } from "../src/transport/transport.ts";
import type { ResourceStore, StoreChange } from "../src/store/contract.ts";
import { ZoneControlPlane } from "../src/zone/zone-control-plane.ts";
import { failoverMuxTransport } from "../src/transport/failover.ts";
import { createTypeRegistry } from "../src/kinds/builtin-types.ts";
import { create } from "@bufbuild/protobuf";
import { DataplaneSpecSchema, exampleTypes } from "../examples/example-kinds/index.ts";
import type { RetryInfo } from "../src/zone/zone-client.ts";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { heapSampling, profileOf } from "./profile.ts";
import { gcSince } from "./gc-since.ts";
import { join } from "node:path";
import { ackState, driveChanges, lagRecorder, zoneEntries } from "./churn-zones.ts";
import * as http2 from "node:http2";
import { createInterface } from "node:readline";
import { setFlagsFromString, writeHeapSnapshot } from "node:v8";
import { runInNewContext } from "node:vm";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

const {
  urls,
  from,
  count,
  zonesPerConnection,
  tokensFile,
  dialsInFlight,
  floorBytes,
  floorAckBytes,
  failover,
  dataplanes,
  backoff,
  heartbeatMs,
  churn,
} = JSON.parse(process.argv[2] as string) as {
  urls: string[];
  dialsInFlight?: number;
  from: number;
  count: number;
  zonesPerConnection: number;
  tokensFile: string;
  /** Bytes the parent writes to every floor stream per floor round. */
  floorBytes: number;
  /** Bytes each floor stream writes back when it has read a round (0: nothing). */
  floorAckBytes: number;
  /** Each zone dials every url, failing over between them (see the top of this file). */
  failover?: boolean;
  /** Dataplanes each zone holds of its own. Default 0. */
  dataplanes?: number;
  /** "default": the zones' own reconnect backoff (as the CLI's zone); else 100 ms to 2 s. */
  backoff?: "default";
  /** The zones' heartbeat interval in ms (the timeout four of them), as `kds-mux zone --heartbeat-interval`; default the session's. */
  heartbeatMs?: number;
  /** Record the Dataplanes' change-to-ACK lag and take the churn commands (see the top of this file). */
  churn?: boolean;
};
/** What a floor stream writes back per round, as a zone ACKs a change. */
const floorAck = new Uint8Array(floorAckBytes);
const tokens = JSON.parse(readFileSync(tokensFile, "utf8")) as string[];
const stop = new AbortController();
setMaxListeners(0, stop.signal);
/** Stops the zones' sessions and connections (stopZones, or the end). */
const zonesStop = new AbortController();
setMaxListeners(0, zonesStop.signal);
stop.signal.addEventListener("abort", () => zonesStop.abort(), { once: true });
/**
 * Each zone's own stop, aborted with zonesStop by one listener. Node's
 * EventTarget walks every listener of a signal on each addEventListener, so
 * thousands of zones listening on zonesStop itself (their transports, runs
 * and watches, and again on each redial) cost time in the square of the zones
 * per process: a fifth of a zone process's CPU while 2,000 zones connected.
 * One process holds one zone in a deployment; this keeps the bench's zones
 * apart as theirs are.
 */
const zoneStops = new Set<AbortController>();
zonesStop.signal.addEventListener(
  "abort",
  () => {
    for (const c of zoneStops) c.abort(zonesStop.signal.reason);
  },
  { once: true },
);
/** A stop signal of one zone's own (see zoneStops). */
function zoneStop(): AbortSignal {
  const c = new AbortController();
  // One listener per instance URL's transport (failover dials every instance), the zone's run and its watch.
  setMaxListeners(urls.length + 8, c.signal);
  zoneStops.add(c);
  if (zonesStop.signal.aborted) c.abort(zonesStop.signal.reason);
  return c.signal;
}
/** The profile's directory (KDS_BENCH_ZONE_CPU_PROFILE), or none. */
const profileDir = process.env.KDS_BENCH_ZONE_CPU_PROFILE ?? "";
/** KDS_BENCH_ZONE_CPU_PROFILE_PHASE=connect: profile the connecting (startZones until ready) instead. */
const profilePhase =
  process.env.KDS_BENCH_ZONE_CPU_PROFILE_PHASE === "connect" ? "connect" : "rounds";
/** The profile being taken (from the moment every zone holds the Mesh), if one is asked for. */
let profiling: Promise<(() => Promise<void>) | undefined> | undefined;
/** Starts the profile when one is asked for (bench/profile.ts says which). */
function startProfile(): void {
  if (profileDir === "") return;
  const kind = heapSampling() ? "heapprofile" : "cpuprofile";
  profiling = profileOf(join(profileDir, `zones-${from}.${process.pid}.${kind}`));
}
/**
 * KDS_BENCH_ZONE_HEAP_SNAPSHOT=<dir> (diagnostic): a heap snapshot of this
 * process 10 s after every zone mirrors the Mesh, after GC, into
 * <dir>/zones-<from>.<pid>.heapsnapshot (it stalls the process while written).
 */
function snapshotHeap(): void {
  const dir = process.env.KDS_BENCH_ZONE_HEAP_SNAPSHOT ?? "";
  if (dir === "") return;
  setTimeout(() => {
    gc();
    const file = writeHeapSnapshot(join(dir, `zones-${from}.${process.pid}.heapsnapshot`));
    process.stderr.write(`fan-out: heap snapshot ${file}\n`);
  }, 10_000).unref();
}
/** Stops the profile, if one was started, and writes it. */
async function stopProfile(): Promise<void> {
  const started = profiling;
  profiling = undefined;
  const stopProfiling = await started;
  await stopProfiling?.();
}
/** Calls `onChange` for every Mesh change of `store` until `signal` (the zone's stop) aborts. */
async function follow(
  store: ResourceStore,
  signal: AbortSignal,
  onChange: (change: StoreChange) => void,
): Promise<void> {
  // ZoneIngress too: a cross-zone run changes another zone's ZoneIngress instead of the Mesh.
  for await (const change of store.watch(0, {
    signal,
    kinds: ["Mesh", "ZoneIngress"],
  }))
    onChange(change);
}

const now = (): number => performance.timeOrigin + performance.now();
const arrivals = new Map<number, number[]>();
/** For each change, the url index (global instance) of each arrival's zone, in arrival order. */
const arrivalInstances = new Map<number, number[]>();
/** For each change, this process's CPU time when its first arrival came. */
const firstArrivalCpu = new Map<number, NodeJS.CpuUsage>();
const transports = new Map<string, MuxTransport>();
/** Every zone started so far (for "counts"). */
const allZones: ZoneControlPlane[] = [];
/** Zones dialing with `failover` (a connection each at a time). */
let failoverZones = 0;
/** Sessions the zones opened. */
let connects = 0;
/** The example kinds, for zones that hold Dataplanes before they learn the global's types. */
const types = (dataplanes ?? 0) > 0 ? createTypeRegistry(exampleTypes) : undefined;
let ready = 0;
/** With `churn`: the zones' Dataplane lags (bench/churn-zones.ts). */
const lags = churn === true ? lagRecorder() : undefined;
/** When this process started dialing its zones (startZones). */
let startedAt = now();
const trace = process.env.KDS_BENCH_TRACE === "1";
/** Under KDS_BENCH_TRACE, this process's collections from a change's first arrival here to its last. */
const changeGc = trace ? gcSince() : undefined;
/** Retries by the code that ended the dial or session (session_closed: the end's own code). */
const retries = new Map<string, number>();
const onRetry = (info: RetryInfo): void => {
  const cause = info.error.cause;
  const key =
    info.error.code === "session_closed" &&
    cause !== null &&
    typeof cause === "object" &&
    "code" in cause
      ? `closed.${String(cause.code)}`
      : info.error.code;
  retries.set(key, (retries.get(key) ?? 0) + 1);
};
// Only under KDS_BENCH_TRACE, which prints it: its 20 ms timer wakes an idle process 50 times a second.
const loop = monitorEventLoopDelay({ resolution: 20 });
if (trace) loop.enable();

/**
 * Zones dialing (started, not yet holding the Mesh) at once in this process:
 * a zone starts when a place is free and frees it once synced, as a fleet
 * that starts zone by zone would. Unbounded by default (every zone at once).
 */
const window = dialsInFlight ?? count;
let started = 0;
const startNext = (): void => {
  while (started < count && started - ready < window) startZone(from + started++);
};

function startZone(i: number): void {
  const u = i % urls.length;
  const key = `${u}:${Math.floor(i / (urls.length * zonesPerConnection))}`;
  const signal = zoneStop();
  let transport = failover === true ? failoverTransport(i, signal) : transports.get(key);
  if (transport === undefined) {
    // KDS_BENCH_ZONE_CLIENT=connect: connect-node's gRPC client, for A/B runs against grpcMuxTransport.
    transport =
      process.env.KDS_BENCH_ZONE_CLIENT === "connect"
        ? // HTTP/2 windows as the CLI's zone has them (src/adapters/node/http2-windows.ts).
          connectMuxTransport(
            createGrpcTransport({
              baseUrl: urls[u] as string,
              acceptCompression: [],
              sessionManager: windowedSessionManager(urls[u] as string),
            }),
          )
        : grpcMuxTransport(urls[u] as string, { signal: zonesStop.signal });
    transports.set(key, transport);
  }
  const zone = new ZoneControlPlane({
    ...(heartbeatMs === undefined
      ? {}
      : { session: { heartbeatIntervalMs: heartbeatMs, heartbeatTimeoutMs: 4 * heartbeatMs } }),
    name: `zone-${i}`,
    token: tokens[i],
    transport,
    logger: silentLogger,
    backoff: backoff === "default" ? undefined : { baseMs: 100, capMs: 2_000 },
    onRetry,
    types,
    onSession: () => void connects++,
    ...(lags === undefined ? {} : { metrics: lags.metrics }),
  });
  allZones.push(zone);
  let seen = false;
  void follow(zone.store, signal, (change) => {
    if (change.op !== "put") return;
    // The round's sequence number: in the Mesh's description, or a cross-zone run's ZoneIngress address.
    const spec = change.resource.spec as { description?: string; address?: string } | undefined;
    const description =
      change.resource.kind === "Mesh" ? (spec?.description ?? "") : (spec?.address ?? "");
    if (change.resource.kind === "Mesh" && !seen) {
      seen = true;
      if (++ready === count) {
        process.stdout.write(
          `${JSON.stringify({ ready, startedAt, readyAt: now(), connections: transports.size + failoverZones })}\n`,
        );
        if (profilePhase === "connect") void stopProfile();
        else startProfile();
        snapshotHeap();
      } else startNext();
    }
    const m = /^seq-(\d+)$/.exec(description);
    if (m === null) return;
    const seq = Number(m[1]);
    const list = arrivals.get(seq) ?? [];
    const instances = arrivalInstances.get(seq) ?? [];
    if (list.length === 0) {
      firstArrivalCpu.set(seq, process.cpuUsage());
      changeGc?.();
    }
    list.push(now());
    instances.push(u);
    arrivals.set(seq, list);
    arrivalInstances.set(seq, instances);
    if (list.length === count) {
      const cpu = process.cpuUsage(firstArrivalCpu.get(seq));
      firstArrivalCpu.delete(seq);
      process.stdout.write(
        `${JSON.stringify({ seq, arrivals: list, instances, cpuUs: cpu.user + cpu.system, gc: changeGc?.() })}\n`,
      );
    }
  });
  void own(zone).then(() => zone.run(signal));
}

/** Zone i's transport with `failover`: every url, urls[i mod n] first, a connection of its own, until `signal`. */
function failoverTransport(i: number, signal: AbortSignal): MuxTransport {
  const targets = urls.map((_, k) => urls[(i + k) % urls.length] as string);
  failoverZones++;
  return failoverMuxTransport(
    targets.map((url) => lazyTransport(url, signal)),
    { targets },
  );
}

/**
 * A gRPC transport to `url` made on its first dial: a failover zone knows
 * every instance but dials one, and an idle transport still holds a URL,
 * its closures and an abort listener on the zone's signal.
 */
function lazyTransport(url: string, signal: AbortSignal): MuxTransport {
  let made: ReturnType<typeof grpcMuxTransport> | undefined;
  const transport = (): ReturnType<typeof grpcMuxTransport> => {
    made ??= grpcMuxTransport(url, { signal });
    return made;
  };
  return {
    name: "grpc",
    open: (request) => transport().open(request),
    newConnection: () => made?.newConnection?.(),
  };
}

/** Puts `zone`'s own Dataplanes (`dataplanes` of them) into its store. */
async function own(zone: ZoneControlPlane): Promise<void> {
  for (let d = 0; d < (dataplanes ?? 0); d++)
    await zone.store.put({
      kind: "Dataplane",
      mesh: "default",
      name: `dp-${d}`,
      spec: create(DataplaneSpecSchema, { address: `10.0.${d}.1` }),
    });
}

/** Resources the zones received and sent, and the sessions they opened, so far. */
function counts(): { received: number; sent: number; connects: number } {
  let received = 0;
  let sent = 0;
  for (const zone of allZones)
    for (const t of zone.status().types) {
      received += t.resourcesReceived;
      sent += t.resourcesSent;
    }
  return { received, sent, connects };
}
// How many zones are synced, once a second while it changes, so the parent can report a run that does not finish.
let reported = 0;
const progressLines = setInterval(() => {
  if (ready === reported) return;
  reported = ready;
  if (ready < count) process.stdout.write(`${JSON.stringify({ progress: ready, at: now() })}\n`);
  else clearInterval(progressLines);
}, 1_000);
// Progress while connecting (10,000 zones take a while on a loaded machine).
const progress = setInterval(
  () => {
    if (ready === count) clearInterval(progress);
    else {
      // Why zones dialed again, always: a tail that does not connect says so without a rerun.
      const detail = `${trace ? ` loop p99 ${Math.round(loop.percentile(99) / 1e6)} ms max ${Math.round(loop.max / 1e6)} ms` : ""}${retries.size > 0 ? ` retries ${JSON.stringify(Object.fromEntries(retries))}` : ""}`;
      process.stderr.write(
        `fan-out: zones ${from}-${from + count - 1}: ${ready} of ${count} connected after ${Math.round((now() - startedAt) / 1000)} s${detail}\n`,
      );
      loop.reset();
    }
  },
  trace ? 5_000 : 30_000,
);
// A change that has reached some of these zones but not all after 30 s: how many hold it, and why
// zones dialed again so far (a failover whose tail does not come back says so without a rerun).
// Only the newest change: an older one a newer replaced before every zone had it never completes.
const changeProgress = setInterval(() => {
  const t = now();
  const seq = Math.max(...arrivals.keys());
  const list = arrivals.get(seq);
  if (list === undefined || list.length >= count || t - (list[0] as number) < 30_000) return;
  process.stderr.write(
    `fan-out: zones ${from}-${from + count - 1}: change ${seq} reached ${list.length} of ${count} after ${Math.round((t - (list[0] as number)) / 1000)} s${retries.size > 0 ? ` retries ${JSON.stringify(Object.fromEntries(retries))}` : ""}\n`,
  );
}, 30_000);
changeProgress.unref();
/** Heap and RSS after GC. */
function memory(): { heap: number; rss: number } {
  for (let i = 0; i < 3; i++) gc();
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss };
}

const floorSessions: http2.ClientHttp2Session[] = [];
const floorArrivals = new Map<number, number[]>();
/** This process's CPU usage at each floor round's first arrival here. */
const floorFirstArrivalCpu = new Map<number, NodeJS.CpuUsage>();
/** Opens one held stream per zone to the floor server; records when each has read each round's bytes. */
async function openFloor(url: string | readonly string[]): Promise<void> {
  const before = memory();
  let session: http2.ClientHttp2Session | undefined;
  const open = async (j: number): Promise<void> => {
    // One url per instance: zone from + j's stream goes to its instance, on a connection of its own.
    if (typeof url !== "string" || j % zonesPerConnection === 0 || session === undefined) {
      session = http2.connect(
        typeof url === "string" ? url : (url[(from + j) % url.length] as string),
      );
      session.on("error", () => undefined); // a stream's error below says what failed
      floorSessions.push(session);
    }
    const stream = session.request({ ":method": "POST", ":path": "/floor" });
    await new Promise<void>((resolve, reject) => {
      stream.once("response", () => resolve());
      stream.once("error", reject);
    });
    let received = 0;
    let round = 1;
    stream.on("data", (chunk: Buffer) => {
      received += chunk.byteLength;
      for (; received >= round * floorBytes; round++) {
        const list = floorArrivals.get(round) ?? [];
        if (list.length === 0) floorFirstArrivalCpu.set(round, process.cpuUsage());
        list.push(now());
        floorArrivals.set(round, list);
        if (list.length === count) {
          const cpu = process.cpuUsage(floorFirstArrivalCpu.get(round));
          floorFirstArrivalCpu.delete(round);
          process.stdout.write(
            `${JSON.stringify({ floorSeq: round, arrivals: list, cpuUs: cpu.user + cpu.system })}\n`,
          );
        }
        if (floorAckBytes > 0) stream.write(floorAck);
      }
    });
  };
  // 200 at a time: a burst of thousands of dials overflows the listener's accept queue.
  for (let j = 0; j < count; j += 200) {
    const batch: Promise<void>[] = [];
    for (let k = j; k < Math.min(count, j + 200); k++) batch.push(open(k));
    await Promise.all(batch);
  }
  const after = memory();
  process.stdout.write(
    `${JSON.stringify({ floorOpened: count, heapBytes: after.heap - before.heap, rssBytes: after.rss - before.rss })}\n`,
  );
}

void (async () => {
  for await (const line of createInterface({ input: process.stdin })) {
    const command = JSON.parse(line) as {
      floorOpen?: string | string[];
      startZones?: 1;
      stopZones?: 1;
      counts?: 1;
      churn?: { rate: number; seconds: number; resources: number };
      acks?: 1;
      lags?: 1;
      dump?: 1;
    };
    if (command.floorOpen !== undefined) await openFloor(command.floorOpen);
    else if (command.churn !== undefined) {
      if (lags !== undefined) lags.recording = true;
      // Not awaited: the acks polls go on while the changes are made.
      const share = command.churn;
      void driveChanges(allZones, share, stop.signal).then(
        (churned) => process.stdout.write(`${JSON.stringify({ churned })}\n`),
        (error: unknown) => {
          process.stderr.write(`fan-out: the changes failed: ${String(error)}\n`);
          process.exit(1);
        },
      );
    } else if (command.acks !== undefined)
      process.stdout.write(`${JSON.stringify({ acks: ackState(allZones, dataplanes ?? 0) })}\n`);
    else if (command.lags !== undefined) {
      if (lags !== undefined) lags.recording = false;
      const taken = (lags?.take() ?? []).map((ms) => Math.round(ms * 100) / 100);
      process.stdout.write(
        `${JSON.stringify({ lags: taken, ...((m) => ({ heapBytes: m.heap, rssBytes: m.rss }))(memory()) })}\n`,
      );
    } else if (command.dump !== undefined) {
      for (const zone of allZones)
        process.stdout.write(
          `${JSON.stringify({ zoneStore: zone.name, entries: await zoneEntries(zone) })}\n`,
        );
      process.stdout.write(`${JSON.stringify({ dumped: allZones.length })}\n`);
    } else if (command.counts !== undefined)
      process.stdout.write(`${JSON.stringify({ counts: counts() })}\n`);
    else if (command.startZones !== undefined) {
      startedAt = now();
      if (profilePhase === "connect") startProfile();
      startNext();
    } else if (command.stopZones !== undefined) {
      await stopProfile();
      zonesStop.abort();
      await new Promise((r) => setTimeout(r, 500));
      process.stdout.write(`${JSON.stringify({ zonesStopped: true })}\n`);
    }
  }
  await stopProfile();
  stop.abort();
  clearInterval(progress);
  clearInterval(progressLines);
  clearInterval(changeProgress);
  for (const s of floorSessions) s.destroy();
  setTimeout(() => process.exit(0), 500);
})();
