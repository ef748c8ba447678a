// Initial sync of N resources global -> zone (SotW vs delta) over gRPC on
// loopback: time until the zone holds all of them, and bytes on the wire;
// then resume after a reconnect with 0.1% changed.
import { resourcesIn } from "../src/mux/frames.ts";
import { create, toBinary } from "@bufbuild/protobuf";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { serveGlobal } from "../src/adapters/node/serve-global.ts";
import { MessageSchema } from "../src/gen/kds/mux/v1/mux_pb.ts";
import { TrafficPolicySpecSchema } from "../src/gen/kds/example/v1/example_pb.ts";
import { GlobalControlPlane } from "../src/global/global-control-plane.ts";
import { silentLogger } from "../src/log.ts";
import { connectMuxTransport } from "../src/transport/connect.ts";
import type { MuxTransport } from "../src/transport/transport.ts";
import { ZoneControlPlane } from "../src/zone/zone-control-plane.ts";

export interface SyncResult {
  readonly resources: number;
  readonly mode: "sotw" | "delta";
  readonly initialMs: number;
  readonly initialBytes: number;
  readonly resumeChanged: number;
  readonly resumeMs: number;
  readonly resumeBytes: number;
  readonly resumeResources: number;
}


/** Counts bytes and resources of frames towards the zone. */
function counting(inner: MuxTransport, tally: { bytes: number; resources: number }): MuxTransport {
  return {
    name: inner.name,
    async open(request) {
      const inbound = await inner.open(request);
      return (async function* () {
        for await (const frame of inbound) {
          tally.bytes += toBinary(MessageSchema, frame).byteLength;
          tally.resources += resourcesIn(frame);
          yield frame;
        }
      })();
    },
  };
}

async function until(condition: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await condition())) {
    if (performance.now() > deadline) throw new Error("sync did not complete in time");
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** Runs one initial sync + resume of `n` resources in `mode`; `count` adds a wire tally (and its encoding cost). */
export async function syncBench(n: number, mode: "sotw" | "delta", count: boolean): Promise<SyncResult> {
  // SotW cannot split a set: give it room for the whole set in one message.
  const maxMessageBytes = mode === "sotw" ? 256 * 1024 * 1024 : 4 * 1024 * 1024;
  const session = { maxMessageBytes };
  const discovery = { maxMessageBytes: maxMessageBytes - 16 * 1024 };
  const stop = new AbortController();
  const global = new GlobalControlPlane({ logger: silentLogger, session, discovery });
  global.start(stop.signal);
  const served = await serveGlobal(global.server);
  try {
    await global.registerZone("zone-1");
    for (let i = 0; i < n; i++) {
      await global.store.put({ kind: "TrafficPolicy", mesh: "default", name: `policy-${i}`, spec: create(TrafficPolicySpecSchema, { services: [`svc-${i % 100}`], timeoutMs: 1000, retries: 2 }) });
    }
    const tally = { bytes: 0, resources: 0 };
    const base = connectMuxTransport(createGrpcTransport({ baseUrl: served.url, readMaxBytes: maxMessageBytes, acceptCompression: [] }), { name: "grpc" });
    const zone = new ZoneControlPlane({ name: "zone-1", transport: count ? counting(base, tally) : base, logger: silentLogger, mode, session, discovery, backoff: { baseMs: 1, capMs: 5 } });
    // Count arrivals from the change feed (listing 100k resources to poll would skew the timing).
    const arrived = new Set<string>();
    zone.store.watch((c) => {
      if (c.kind === "TrafficPolicy" && c.op === "put") arrived.add(c.name);
    }, stop.signal);
    let run = new AbortController();
    const t0 = performance.now();
    let done = zone.run(run.signal);
    await until(() => Promise.resolve(arrived.size === n), 600_000);
    const initialMs = performance.now() - t0;
    const initialBytes = tally.bytes;
    run.abort();
    await done;

    const changed = Math.max(1, Math.round(n / 1000));
    for (let i = 0; i < changed; i++) {
      await global.store.put({ kind: "TrafficPolicy", mesh: "default", name: `policy-${i}`, spec: create(TrafficPolicySpecSchema, { services: ["changed"], timeoutMs: 2000 }) });
    }
    tally.bytes = 0;
    tally.resources = 0;
    run = new AbortController();
    const t1 = performance.now();
    done = zone.run(run.signal);
    const last = `policy-${changed - 1}`;
    await until(async () => ((await zone.store.get("TrafficPolicy", "default", last))?.spec as { timeoutMs?: number } | undefined)?.timeoutMs === 2000, 600_000);
    const resumeMs = performance.now() - t1;
    const r: SyncResult = { resources: n, mode, initialMs, initialBytes, resumeChanged: changed, resumeMs, resumeBytes: tally.bytes, resumeResources: tally.resources };
    run.abort();
    await done;
    return r;
  } finally {
    stop.abort();
    await served.close();
  }
}
