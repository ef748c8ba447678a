// The README's library quick start, as it runs: a global and a zone in one
// process over the in-memory transport, syncing a kind each way. The README
// quotes this file between the region markers, with "kds-mux" for ../../src
// (test/docs/snippets.test.ts checks that it does, and runs it).
// Run: npx tsx examples/readme/sync.ts
// #region readme
import { create } from "@bufbuild/protobuf";
import {
  GlobalControlPlane,
  ZoneControlPlane,
  createTypeRegistry,
  memoryMuxTransport,
  type ResourceTypeInit,
} from "../../src/index.ts";
import { GatewaySpecSchema, WorkloadSpecSchema } from "../own-kinds/src/gen/acme/v1/kinds_pb.ts"; // from buf generate

const kinds: ResourceTypeInit[] = [
  { kind: "Gateway", schema: GatewaySpecSchema, direction: "global-to-zone", scope: "cluster" },
  { kind: "Workload", schema: WorkloadSpecSchema, direction: "zone-to-global", scope: "mesh" },
];
const stop = new AbortController();
const signal = stop.signal;

// The global: an in-memory store; zones prove their name with a token it signs.
const global = new GlobalControlPlane({ types: createTypeRegistry(kinds) });
global.start(signal);
await global.registerZone("zone-east");
await global.store.put({
  kind: "Gateway",
  name: "edge",
  spec: create(GatewaySpecSchema, { hosts: ["example.com"] }),
});

// The zone: dials the global (here in process), syncs, reconnects with backoff.
const token = (await global.tokens.issueZoneToken("zone-east")).token;
const zone = new ZoneControlPlane({
  name: "zone-east",
  token,
  transport: memoryMuxTransport(global.server),
  types: createTypeRegistry(kinds),
});
void zone.run(signal);
await zone.store.put({
  kind: "Workload",
  mesh: "default",
  name: "web-1",
  spec: create(WorkloadSpecSchema, { address: "10.0.0.1" }),
});
// #endregion readme

// Wait (at most 10 s) until both resources crossed, then stop.
for (let i = 0; i < 100; i++) {
  const gateway = await zone.store.get("Gateway", "", "edge");
  const workload = await global.store.get("Workload", "default", "zone-east.web-1");
  if (gateway !== undefined && workload !== undefined) {
    console.log('Gateway "edge" reached the zone; Workload "zone-east.web-1" reached the global');
    console.log(`zone-east online: ${(await global.zoneStatus("zone-east"))?.online}`);
    break;
  }
  await new Promise((resolve) => setTimeout(resolve, 100));
}
stop.abort();
