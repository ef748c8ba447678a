// Matrix cell, zone side: registers itself and gets a zone token through the
// global's admin API (its own listener), syncs both ways over one transport (half-duplex: connect-web on the
// runtime's fetch over HTTP/1.1), survives a forced disconnect with
// changes made on both sides meanwhile, and checks convergence. Prints one
// JSON line {"ok": true, "ms": N} or {"ok": false, "error": "..."}.
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import { AdminService } from "../../src/gen/kds/admin/v1/admin_pb.ts";
import { TokenService } from "../../src/gen/kds/admin/v1/tokens_pb.ts";
import { DataplaneSpecSchema, exampleTypes } from "../../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { silentLogger } from "../../src/log.ts";
import { grpcMuxTransport } from "../../src/adapters/node/grpc-mux-client.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { halfDuplexMuxTransport } from "../../src/transport/half-duplex/client.ts";
import { createConnectTransport as createWebConnectTransport } from "@connectrpc/connect-web";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";

const [url, kind, name, http1Url, adminUrl] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  string,
];
const started = performance.now();
const adminTransport = createConnectTransport({ baseUrl: adminUrl, httpVersion: "2" });
const admin = createClient(AdminService, adminTransport);
const tokens = createClient(TokenService, adminTransport);
const transport = () => {
  switch (kind) {
    case "grpc":
      return createGrpcTransport({ baseUrl: url });
    case "grpc-web":
      return createGrpcWebTransport({ baseUrl: url, httpVersion: "2" });
    default:
      return createConnectTransport({ baseUrl: url, httpVersion: "2" });
  }
};

async function until(what: string, condition: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const meshJson = (description: string) => JSON.stringify({ description });
const globalHas = async (dataplane: string, address: string) =>
  (await admin.get({ type: "Dataplane", mesh: "default" })).resources.some(
    (r) => r.name === `${name}.${dataplane}` && JSON.parse(r.specJson).address === address,
  );

try {
  await admin.apply({
    resources: [
      { type: "Zone", name, specJson: JSON.stringify({ enabled: true }) },
      { type: "Mesh", name: `mesh-${name}`, specJson: meshJson("v1") },
    ],
  });
  const mux =
    kind === "half-duplex"
      ? halfDuplexMuxTransport(
          createWebConnectTransport({ baseUrl: http1Url, useBinaryFormat: true }),
        )
      : kind === "grpc-plain"
        ? grpcMuxTransport(url)
        : connectMuxTransport(transport(), { name: kind });
  const { token } = await tokens.generateZoneToken({ zone: name, validForSeconds: 3600n });
  const zone = new ZoneControlPlane({
    name,
    transport: mux,
    token,
    types: createTypeRegistry(exampleTypes),
    logger: silentLogger,
    backoff: { baseMs: 50, capMs: 200 },
  });
  let run = new AbortController();
  let running = zone.run(run.signal);
  await zone.store.put({
    kind: "Dataplane",
    mesh: "default",
    name: "web-1",
    spec: create(DataplaneSpecSchema, { address: "10.0.0.1" }),
  });
  const meshIs = async (description: string) =>
    (
      (await zone.store.get("Mesh", "", `mesh-${name}`))?.spec as
        | { description?: string }
        | undefined
    )?.description === description;
  await until("the global's mesh reaches the zone", () => meshIs("v1"));
  await until("the zone's dataplane reaches the global", () => globalHas("web-1", "10.0.0.1"));

  // Forced disconnect: cut the session, change both sides while it is down.
  run.abort();
  await running;
  await admin.apply({
    resources: [{ type: "Mesh", name: `mesh-${name}`, specJson: meshJson("v2") }],
  });
  await zone.store.put({
    kind: "Dataplane",
    mesh: "default",
    name: "web-1",
    spec: create(DataplaneSpecSchema, { address: "10.0.0.2" }),
  });
  run = new AbortController();
  running = zone.run(run.signal);
  await until("convergence after the reconnect (global -> zone)", () => meshIs("v2"));
  await until("convergence after the reconnect (zone -> global)", () =>
    globalHas("web-1", "10.0.0.2"),
  );
  run.abort();
  await running;
  console.log(JSON.stringify({ ok: true, ms: Math.round(performance.now() - started) }));
} catch (error) {
  console.log(
    JSON.stringify({ ok: false, error: error instanceof Error ? error.message : String(error) }),
  );
}
const g = globalThis as { Deno?: { exit(code: number): never } };
if (g.Deno !== undefined) g.Deno.exit(0);
else process.exit(0);
