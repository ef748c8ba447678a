// Helpers for sync tests: a global and zones wired over a transport kind.
import { create } from "@bufbuild/protobuf";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { serveGlobal, type ServedGlobal } from "../../src/adapters/node/serve-global.ts";
import {
  DataplaneSpecSchema,
  MeshSpecSchema,
  TrafficPolicySpecSchema,
  exampleTypes,
} from "../../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import {
  GlobalControlPlane,
  type GlobalControlPlaneOptions,
} from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import type { ResourceStore } from "../../src/store/contract.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { memoryMuxTransport } from "../../src/transport/memory.ts";
import { halfDuplexMuxTransport } from "../../src/transport/half-duplex/client.ts";
import { createConnectTransport as createWebConnectTransport } from "@connectrpc/connect-web";
import type { MuxTransport } from "../../src/transport/transport.ts";
import {
  ZoneControlPlane,
  type ZoneControlPlaneOptions,
} from "../../src/zone/zone-control-plane.ts";

export const mesh = (name: string, description = "") => ({
  kind: "Mesh",
  name,
  spec: create(MeshSpecSchema, { description }),
});
export const policy = (m: string, name: string, timeoutMs = 1000) => ({
  kind: "TrafficPolicy",
  mesh: m,
  name,
  spec: create(TrafficPolicySpecSchema, { timeoutMs }),
});
export const dataplane = (
  m: string,
  name: string,
  address = "10.0.0.1",
  labels: Record<string, string> = {},
) => ({
  kind: "Dataplane",
  mesh: m,
  name,
  labels,
  spec: create(DataplaneSpecSchema, { address, service: "web", port: 8080 }),
});

/** A content fingerprint of a store: kind/mesh/name -> spec JSON + user labels. */
export async function contents(
  store: ResourceStore,
  kinds: string[],
  map: (name: string, labels: Readonly<Record<string, string>>) => string | undefined = (n) => n,
): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const { toJsonString } = await import("@bufbuild/protobuf");
  for (const kind of kinds) {
    for (const r of (await store.list(kind)).resources) {
      const name = map(r.meta.name, r.meta.labels);
      if (name === undefined) continue;
      const userLabels = Object.entries(r.meta.labels)
        .filter(([k]) => !k.startsWith("kds.io/"))
        .sort();
      const schema = createTypeRegistry(exampleTypes).get(kind).schema;
      out.set(
        `${kind}/${r.meta.mesh}/${name}`,
        `${toJsonString(schema, r.spec)} ${JSON.stringify(userLabels)}`,
      );
    }
  }
  return out;
}

export interface Cluster {
  readonly global: GlobalControlPlane;
  readonly zones: Map<string, ZoneControlPlane>;
  transport(): MuxTransport;
  startZone(name: string, options?: Partial<ZoneControlPlaneOptions>): ZoneControlPlane;
  stopZone(name: string): Promise<void>;
  close(): Promise<void>;
}

export async function startCluster(
  kind: "memory" | "grpc" | "half-duplex",
  options: GlobalControlPlaneOptions = {},
): Promise<Cluster> {
  const controller = new AbortController();
  const global = new GlobalControlPlane({
    types: createTypeRegistry(exampleTypes),
    logger: silentLogger,
    ...options,
  });
  global.start(controller.signal);
  let served: ServedGlobal | undefined;
  if (kind !== "memory")
    served = await serveGlobal(global.server, {
      httpVersion: kind === "half-duplex" ? "1.1" : "2",
    });
  const transport = (): MuxTransport =>
    served === undefined
      ? memoryMuxTransport(global.server)
      : kind === "half-duplex"
        ? halfDuplexMuxTransport(
            createWebConnectTransport({ baseUrl: served.url, useBinaryFormat: true }),
          )
        : connectMuxTransport(createGrpcTransport({ baseUrl: served.url }), { name: "grpc" });
  const zones = new Map<string, ZoneControlPlane>();
  const running = new Map<string, { controller: AbortController; done: Promise<void> }>();
  return {
    global,
    zones,
    transport,
    startZone(name, zoneOptions = {}) {
      const existing = zones.get(name);
      const token = async (): Promise<string> => (await global.tokens.issueZoneToken(name)).token;
      const zone =
        existing ??
        new ZoneControlPlane({
          name,
          transport: transport(),
          token,
          types: createTypeRegistry(exampleTypes),
          logger: silentLogger,
          backoff: { baseMs: 10, capMs: 50 },
          ...zoneOptions,
        });
      zones.set(name, zone);
      const c = new AbortController();
      running.set(name, { controller: c, done: zone.run(c.signal) });
      return zone;
    },
    async stopZone(name) {
      const r = running.get(name);
      running.delete(name);
      r?.controller.abort();
      await r?.done;
    },
    async close() {
      for (const name of [...running.keys()]) {
        const r = running.get(name);
        running.delete(name);
        r?.controller.abort();
        await r?.done;
      }
      controller.abort();
      if (served !== undefined) await served.close();
      else await global.close();
    },
  };
}
