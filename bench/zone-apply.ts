// The zone's side of one change to many zones, in one process and without the
// network: `zones` discovery clients, each with its store sink, in-memory store
// and a follower of its store (as bench/fanout-zones.ts has), are handed one
// delta response each per round through a stand-in client view, and ACK it.
// Prints the median over the rounds of the CPU per zone and change; with
// KDS_BENCH_HEAP_SAMPLING=1 and KDS_BENCH_CPU_PROFILE=<file>, a sampling heap
// profile of the rounds instead (bench/profile.ts).
//
//   node --import ./bench/loader/register.mjs bench/zone-apply.ts 2500 30
import { create } from "@bufbuild/protobuf";
import { setMaxListeners } from "node:events";
import { MeshSpecSchema, exampleTypes } from "../examples/example-kinds/index.ts";
import { DiscoveryClient } from "../src/discovery/client.ts";
import type { DeltaDiscoveryResponse } from "../src/gen/kds/v1/discovery_pb.ts";
import { createTypeRegistry } from "../src/kinds/builtin-types.ts";
import type { MuxRequest, MuxResponse } from "../src/mux/frames.ts";
import type { ClientStreamView } from "../src/mux/views.ts";
import { InMemoryStore } from "../src/store/memory.ts";
import { StoreSink, mirrorMapping } from "../src/sync/store-sink.ts";
import { toWire } from "../src/sync/wire.ts";
import { profileOf } from "./profile.ts";

const zones = Number(process.argv[2] ?? 2500);
const rounds = Number(process.argv[3] ?? 30);
const types = createTypeRegistry(exampleTypes);
const mesh = types.get("Mesh");
const stop = new AbortController();
setMaxListeners(0, stop.signal);

/** A client view fed by hand: `push` hands it the next response. */
class FedView implements ClientStreamView {
  #waiting: ((r: MuxResponse) => void) | undefined;
  acks = 0;
  send(_request: MuxRequest): Promise<void> {
    this.acks++;
    return Promise.resolve();
  }
  recv(): Promise<MuxResponse> {
    return new Promise((resolve) => {
      this.#waiting = resolve;
    });
  }
  push(response: MuxResponse): void {
    const w = this.#waiting;
    this.#waiting = undefined;
    w?.(response);
  }
}

function response(seq: number, nonce: string): DeltaDiscoveryResponse {
  const wire = toWire(mesh, {
    kind: "Mesh",
    meta: {
      name: "default",
      mesh: "",
      labels: {},
      version: String(seq + 1),
      creationTime: new Date(0),
      modificationTime: new Date(),
    },
    spec: create(MeshSpecSchema, { description: `seq-${seq}` }),
  });
  return {
    $typeName: "kds.v1.DeltaDiscoveryResponse",
    systemVersionInfo: `v${seq}`,
    resources: [wire.resource],
    typeUrl: mesh.typeUrl,
    nonce,
    removedResources: [],
  };
}

let seen = 0;
let wake: (() => void) | undefined;
const views: FedView[] = [];
for (let i = 0; i < zones; i++) {
  const store = new InMemoryStore(types);
  const view = new FedView();
  views.push(view);
  const client = new DiscoveryClient({
    view,
    typeUrls: [mesh.typeUrl],
    sink: new StoreSink(store, types, mirrorMapping()),
  });
  void client.run(stop.signal);
  void (async () => {
    for await (const change of store.watch(0, {
      signal: stop.signal,
      kinds: ["Mesh", "ZoneIngress"],
    })) {
      if (change.op !== "put") continue;
      const spec = change.resource.spec as { description?: string };
      if (/^seq-(\d+)$/.exec(spec.description ?? "") !== null && ++seen === zones) wake?.();
    }
  })();
}
await new Promise((r) => setTimeout(r, 100));
const perRound: number[] = [];
const warmup = 3;
let profile: Awaited<ReturnType<typeof profileOf>>;
for (let seq = 1; seq <= warmup + rounds; seq++) {
  if (seq === warmup + 1) profile = await profileOf(process.env.KDS_BENCH_CPU_PROFILE);
  seen = 0;
  const done = new Promise<void>((r) => {
    wake = r;
  });
  const cpu = process.cpuUsage();
  // One response object for all (each zone's sink still decodes its resource's bytes itself).
  const sent = response(seq, String(seq));
  for (let i = 0; i < zones; i++) views[i]?.push(sent);
  await done;
  const used = process.cpuUsage(cpu);
  if (seq > warmup) perRound.push((used.user + used.system) / zones);
  await new Promise((r) => setTimeout(r, 20));
}
await profile?.();
const sorted = [...perRound].sort((a, b) => a - b);
process.stdout.write(
  `${JSON.stringify({ zones, rounds, medianUsPerZoneChange: Number(sorted[Math.floor(sorted.length / 2)]?.toFixed(2)), acks: views.reduce((n, v) => n + v.acks, 0) })}\n`,
);
stop.abort();
process.exit(0);
