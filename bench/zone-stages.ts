// The zone's side of a 100k delta sync in one process, without the network:
// the frames the global would send (bench/floor-wire.ts), each as its own
// Buffer, go through what the zone runs on them: the gRPC reader's scan and
// decode, the session's weighing, the discovery client and its store sink
// into an in-memory store. Prints CPU and GC time per round (and the wall
// time of each stage: reading frames, weighing them, the client's apply).
// Not the network, the gRPC reader's chunk joining, nor a watcher of the
// store: a quicker, steadier A/B of the zone's per-resource work than
// bench/sync.ts (to compare with an older checkout, copy this file there).
//
//   node --import ./bench/loader/register.mjs bench/zone-stages.ts 100000 5
import { exampleTypes } from "../examples/example-kinds/index.ts";
import type { Frame } from "../src/gen/kds/mux/v1/mux_pb.ts";
import type { DeltaDiscoveryResponse } from "../src/gen/kds/v1/discovery_pb.ts";
import { DiscoveryClient } from "../src/discovery/client.ts";
import { createTypeRegistry } from "../src/kinds/builtin-types.ts";
import { readFrame } from "../src/mux/frame-decode.ts";
import { weighFrame } from "../src/mux/frame-size.ts";
import type { ClientStreamView } from "../src/mux/views.ts";
import { InMemoryStore } from "../src/store/memory.ts";
import { StoreSink, mirrorMapping } from "../src/sync/store-sink.ts";
import { encodeFrames, policyFrames } from "./floor-wire.ts";
import { phase, settle } from "./cpu-phase.ts";

const n = Number(process.argv[2] ?? 100_000);
const rounds = Number(process.argv[3] ?? 5);
const types = createTypeRegistry(exampleTypes);
const bodies = (count: number): Buffer[] =>
  encodeFrames(policyFrames(count)).map((f) => Buffer.from(f.subarray(5)));

/** What the node adapter's gRPC reader does with each frame's bytes (src/adapters/node/grpc-frames.ts). */
const decode = (body: Buffer): Frame => readFrame(body, (reason) => new Error(reason));

async function round(frames: Buffer[], total: number): Promise<Record<string, number>> {
  const store = new InMemoryStore(types, { historyLimit: 2 * total });
  const sink = new StoreSink(store, types, mirrorMapping());
  const times = { read: 0, weigh: 0, apply: 0 };
  let next = 0;
  const stop = new AbortController();
  let t = performance.now();
  const view: ClientStreamView = {
    send: () => Promise.resolve(),
    recv: () => {
      times.apply += performance.now() - t;
      if (next === frames.length) {
        stop.abort();
        return Promise.reject(new Error("done"));
      }
      t = performance.now();
      const frame = decode(frames[next++] as Buffer);
      const t1 = performance.now();
      times.read += t1 - t;
      weighFrame(frame);
      t = performance.now();
      times.weigh += t - t1;
      return Promise.resolve(frame.value.value as DeltaDiscoveryResponse);
    },
  };
  const client = new DiscoveryClient({
    view,
    typeUrls: [types.get("TrafficPolicy").typeUrl],
    sink,
  });
  settle();
  const end = phase();
  // run() ends by rejecting once `stop` aborts after the last frame; a real failure shows in the count checked below.
  await client.run(stop.signal).catch(() => undefined);
  const cost = await end();
  const held = (await store.list("TrafficPolicy")).resources.length;
  if (held !== total) throw new Error(`the store holds ${held} of ${total}`);
  return {
    cpuMs: Math.round(cost.cpuMs),
    gcMs: Math.round(cost.gcMs),
    gcs: cost.gcs,
    readMs: Math.round(times.read),
    weighMs: Math.round(times.weigh),
    applyMs: Math.round(times.apply),
  };
}

await round(bodies(10_000), 10_000); // warm-up
const frames = bodies(n);
for (let r = 0; r < rounds; r++) console.log(JSON.stringify(await round(frames, n)));
