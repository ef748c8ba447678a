// A global and a zone syncing your own kinds over loopback: a Gateway made
// on the global reaches the zone, a Workload made in the zone reaches the
// global. Exits 0 once both arrived, 1 if they did not within 30 s.
import { create, toJsonString } from "@bufbuild/protobuf";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  GlobalControlPlane,
  ZoneControlPlane,
  connectMuxTransport,
  consoleLogger,
  createTypeRegistry,
} from "kds-mux";
import { serveGlobal } from "kds-mux/node";
import {
  GatewaySpecSchema,
  WorkloadSpecSchema,
  type GatewaySpec,
  type WorkloadSpec,
} from "./gen/acme/v1/kinds_pb.js";
import { acmeKinds } from "./kinds.js";

const stop = new AbortController();
const deadline = setTimeout(() => {
  console.error("the kinds did not sync within 30 s");
  process.exit(1);
}, 30_000);

// The global: your kinds, an in-memory store, served over gRPC on loopback.
const global = new GlobalControlPlane({
  types: createTypeRegistry(acmeKinds),
  logger: consoleLogger("warn"),
});
global.start(stop.signal);
const served = await serveGlobal(global.server, { port: 0 });
await global.registerZone("zone-1");
await global.store.put({
  kind: "Gateway",
  name: "edge",
  spec: create(GatewaySpecSchema, { hosts: ["example.com"], port: 443 }),
});

// A zone with the same kinds. Given none, it would learn them from the global
// when it connects; with its own, the global's must agree.
const zone = new ZoneControlPlane({
  name: "zone-1",
  // The zone proves its name with a zone token (what `kds-mux generate zone-token` prints).
  token: async () => (await global.tokens.issueZoneToken("zone-1")).token,
  transport: connectMuxTransport(createGrpcTransport({ baseUrl: served.url })),
  types: createTypeRegistry(acmeKinds),
  logger: consoleLogger("warn"),
});
const running = zone.run(stop.signal);
await zone.store.put({
  kind: "Workload",
  mesh: "default",
  name: "web-1",
  spec: create(WorkloadSpecSchema, { address: "10.0.0.1", service: "web" }),
});

for (;;) {
  const gateway = await zone.store.get("Gateway", "", "edge");
  const workload = await global.store.get("Workload", "default", "zone-1.web-1");
  if (gateway !== undefined && workload !== undefined) {
    console.log(
      `Gateway "edge" reached zone-1: ${toJsonString(GatewaySpecSchema, gateway.spec as GatewaySpec)}`,
    );
    console.log(
      `Workload "web-1" reached the global as "${workload.meta.name}": ${toJsonString(WorkloadSpecSchema, workload.spec as WorkloadSpec)}`,
    );
    break;
  }
  await new Promise((r) => setTimeout(r, 50));
}
stop.abort();
await running;
await served.close();
clearTimeout(deadline);
console.log("both kinds synced");
