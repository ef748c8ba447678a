// Child process of the sync benchmark: the zone, in its own process (as in a
// real deployment), so the global and the zone do not share an event loop.
// Protocol on stdin/stdout, one JSON line each:
//   start -> {"done": ms, "cpuMs": c, "bytes": b, "resources": r, "phase", "startupCpuMs"}
//            once `expect` holds (cpuMs: this process's CPU time meanwhile, user +
//            system, every thread; phase: that and its GC time, bench/cpu-phase.ts;
//            startupCpuMs: CPU time from the process's start to this command)
//   stop  -> {"stopped": true}
import { createGrpcTransport } from "@connectrpc/connect-node";
import { toBinary } from "@bufbuild/protobuf";
import { createInterface } from "node:readline";
import { FrameSchema } from "../src/gen/kds/mux/v1/mux_pb.ts";
import {
  DEFAULT_HTTP2_WINDOW_BYTES,
  windowedSessionManager,
} from "../src/adapters/node/http2-windows.ts";
import { KdsError } from "../src/errors.ts";
import { grpcMuxTransport } from "../src/adapters/node/grpc-mux-client.ts";
import { silentLogger } from "../src/log.ts";
import { resourcesIn } from "../src/mux/frames.ts";
import { KIND_CATALOG_TYPE_URL } from "../src/sync/kind-catalog.ts";
import { connectMuxTransport } from "../src/transport/connect.ts";
import type { MuxTransport } from "../src/transport/transport.ts";
import { ZoneControlPlane } from "../src/zone/zone-control-plane.ts";
import { cpuSinceStartMs, phase, settle } from "./cpu-phase.ts";

const [url, mode, maxText, countText, token, maxResourcesText] = process.argv.slice(2) as [
  string,
  "sotw" | "delta",
  string,
  string,
  string,
  string | undefined,
];
/** The most resources a response may hold ("": the default), as the global's. */
const maxResponseResources =
  maxResourcesText === undefined || maxResourcesText === "" ? undefined : Number(maxResourcesText);
/** How long one sync may take before this process gives up and says so (a hung sync must not hang the bench). */
const SYNC_DEADLINE_MS = 300_000;
const maxMessageBytes = Number(maxText);
const count = countText === "count";
const tally = { bytes: 0, resources: 0 };
// HTTP/2 windows as large as the mux's response byte window (at least maxMessageBytes), as the CLI's zone has.
const windowBytes = Math.max(DEFAULT_HTTP2_WINDOW_BYTES, maxMessageBytes);
// KDS_BENCH_ZONE_CLIENT=connect: connect-node's gRPC client, for A/B runs against grpcMuxTransport.
const base =
  process.env.KDS_BENCH_ZONE_CLIENT === "connect"
    ? connectMuxTransport(
        createGrpcTransport({
          baseUrl: url,
          readMaxBytes: maxMessageBytes,
          acceptCompression: [],
          sessionManager: windowedSessionManager(url, {}, windowBytes),
        }),
        { name: "grpc" },
      )
    : grpcMuxTransport(url, { maxMessageBytes, initialWindowSize: windowBytes });
const transport: MuxTransport = !count
  ? base
  : {
      name: base.name,
      async open(request) {
        const inbound = await base.open(request);
        return (async function* () {
          for await (const frame of inbound) {
            tally.bytes += toBinary(FrameSchema, frame).byteLength;
            tally.resources += resourcesIn(frame, KIND_CATALOG_TYPE_URL);
            yield frame;
          }
        })();
      },
    };
const zone = new ZoneControlPlane({
  name: "zone-1",
  token,
  transport,
  logger: silentLogger,
  mode,
  session: { maxMessageBytes },
  discovery: { maxMessageBytes: maxMessageBytes - 16 * 1024, maxResponseResources },
  backoff: { baseMs: 1, capMs: 5 },
});
// Arrivals from the change feed, by the policy's number (the global writes policy-0 .. policy-<n-1>): whether it
// arrived, and its timeoutMs. Typed arrays, not a map of 100,000 names: the map's inserts and growth were about a
// tenth of this process's samples during a sync, the measurement's own cost rather than the zone's.
let arrived = new Uint8Array(0);
let timeouts = new Int32Array(0);
let distinct = 0;
const POLICY_PREFIX = "policy-";
/** The number of the policy `name` (policy-<number>); throws for a name the bench did not write. */
function policyIndex(name: string): number {
  const i = Number(name.slice(POLICY_PREFIX.length));
  if (!name.startsWith(POLICY_PREFIX) || !Number.isInteger(i) || i < 0 || i >= arrived.length)
    throw new Error(`sync-zone: a policy the bench did not write: ${name}`);
  return i;
}
/** Records one policy's arrival. */
function record(name: string, timeoutMs: number): void {
  const i = policyIndex(name);
  if (arrived[i] === 0) {
    arrived[i] = 1;
    distinct++;
  }
  timeouts[i] = timeoutMs;
}
const stopAll = new AbortController();
/** Follows the zone's store from the start (set by the first start command, which sizes the arrays). */
async function followStore(): Promise<void> {
  // Follows the zone's store; when this reader falls behind the store's kept history (store_compacted), it lists
  // and follows on from that list's revision, as the sync engine does.
  let from = 0;
  for (let relists = 0; relists < 1_000 && !stopAll.signal.aborted; relists++) {
    try {
      for await (const c of zone.store.watch(from, {
        signal: stopAll.signal,
        kinds: ["TrafficPolicy"],
      })) {
        if (c.op === "put")
          record(c.resource.meta.name, (c.resource.spec as { timeoutMs?: number }).timeoutMs ?? 0);
      }
      return;
    } catch (error) {
      if (!KdsError.is(error, "store_compacted")) throw error;
      const listed = await zone.store.list("TrafficPolicy");
      for (const r of listed.resources)
        record(r.meta.name, (r.spec as { timeoutMs?: number }).timeoutMs ?? 0);
      from = listed.revision;
    }
  }
}
let following: Promise<void> | undefined;

let run: AbortController | undefined;
let running: Promise<void> | undefined;
for await (const line of createInterface({ input: process.stdin })) {
  const command = JSON.parse(line) as {
    start?: { total: number; changedName?: string; changedValue?: number };
    stop?: true;
    exit?: true;
  };
  if (command.start !== undefined) {
    const { total, changedName, changedValue } = command.start;
    if (following === undefined) {
      arrived = new Uint8Array(total);
      timeouts = new Int32Array(total);
      following = followStore();
      // A follower that fails (a policy the bench did not write) ends the process with its error.
      following.catch((error: unknown) => {
        process.stderr.write(`sync-zone: following the store failed: ${String(error)}\n`);
        process.exit(1);
      });
    }
    tally.bytes = 0;
    tally.resources = 0;
    const startupCpuMs = cpuSinceStartMs();
    settle(); // untimed, as the global did before this command
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    const cost = phase(changedName === undefined ? "zone-initial" : "zone-resume");
    run = new AbortController();
    running = zone.run(run.signal);
    const changed = changedName === undefined ? undefined : policyIndex(changedName);
    const done = (): boolean =>
      changed === undefined ? distinct >= total : timeouts[changed] === changedValue;
    while (!done()) {
      if (performance.now() - t0 > SYNC_DEADLINE_MS) {
        process.stderr.write(
          `sync-zone: the zone holds ${distinct} of ${total} resources after ${SYNC_DEADLINE_MS / 1000} s; giving up\n`,
        );
        process.exit(1);
      }
      await new Promise((r) => setTimeout(r, 2));
    }
    const cpu = process.cpuUsage(cpu0);
    const doneMs = performance.now() - t0;
    console.log(
      JSON.stringify({
        done: doneMs,
        cpuMs: (cpu.user + cpu.system) / 1000,
        bytes: tally.bytes,
        resources: tally.resources,
        phase: await cost(),
        startupCpuMs,
      }),
    );
  } else if (command.stop !== undefined) {
    run?.abort();
    await running;
    console.log(JSON.stringify({ stopped: true }));
  } else {
    stopAll.abort();
    process.exit(0);
  }
}
