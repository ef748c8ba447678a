// A zone needs no copy of the kinds: it learns them from the global at the
// start of every session; disagreeing kinds are refused; kinds the global
// adds arrive on the next session; fields the zone does not know survive.
import { create, fromBinary, fromJson, toBinary, type Message } from "@bufbuild/protobuf";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterEach, describe, expect, it } from "vitest";
import { serveGlobal } from "../../src/adapters/node/serve-global.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import type { Logger } from "../../src/log.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import type { ResourceTypeInit } from "../../src/kinds/resource-types.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { memoryMuxTransport } from "../../src/transport/memory.ts";
import type { MuxTransport } from "../../src/transport/transport.ts";
import type { RetryInfo } from "../../src/zone/zone-client.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { eventually } from "../contract/harness.ts";
import { acmeKinds, acmeRegistry } from "./acme.ts";

/** A logger that keeps every line. */
function recordingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const keep = (level: string) => (message: string) => void lines.push(`${level}: ${message}`);
  return {
    lines,
    debug: keep("debug"),
    info: keep("info"),
    warn: keep("warn"),
    error: keep("error"),
  };
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function startGlobal(
  kinds: ResourceTypeInit[],
  logger: Logger = recordingLogger(),
): Promise<GlobalControlPlane> {
  const stop = new AbortController();
  const global = new GlobalControlPlane({ types: createTypeRegistry(kinds), logger });
  global.start(stop.signal);
  await global.registerZone("zone-1");
  cleanups.push(async () => {
    stop.abort();
    await global.close();
  });
  return global;
}

/** A zone dialing `transport`, proving its name with tokens of `global()` (read at every dial). */
function startZone(
  global: () => GlobalControlPlane,
  transport: MuxTransport,
  kinds?: ResourceTypeInit[],
  extra: { logger?: Logger; onRetry?: (info: RetryInfo) => void } = {},
): ZoneControlPlane {
  const stop = new AbortController();
  const zone = new ZoneControlPlane({
    name: "zone-1",
    token: async () => (await global().tokens.issueZoneToken("zone-1")).token,
    transport,
    types: kinds === undefined ? undefined : createTypeRegistry(kinds),
    logger: extra.logger ?? recordingLogger(),
    onRetry: extra.onRetry,
    backoff: { baseMs: 10, capMs: 50 },
  });
  const done = zone.run(stop.signal);
  cleanups.push(async () => {
    stop.abort();
    await done;
  });
  return zone;
}

const gateway = (registry: ReturnType<typeof acmeRegistry>, json: object) =>
  fromJson(registry.getMessage("acme.v1.GatewaySpec")!, json as never);

describe("kinds learned from the global", () => {
  it("a zone given no kinds learns them over gRPC and stores, serves and lists them", async () => {
    const global = await startGlobal(acmeKinds(1));
    const served = await serveGlobal(global.server, { port: 0 });
    cleanups.push(() => served.close());
    await global.store.put({
      kind: "Gateway",
      name: "edge",
      spec: gateway(acmeRegistry(1), { hosts: ["a.example"], port: 443 }),
    });
    const logger = recordingLogger();
    const zone = startZone(
      () => global,
      connectMuxTransport(createGrpcTransport({ baseUrl: served.url }), { name: "grpc" }),
      undefined,
      { logger },
    );
    expect(zone.types.visible().map((t) => t.kind)).toEqual(["Zone"]);

    await eventually(
      async () => (await zone.store.get("Gateway", "", "edge")) !== undefined,
      "the Gateway in the learning zone",
    );
    expect(
      zone.types.visible().map((t) => `${t.kind} ${t.schema.typeName} ${t.direction} ${t.scope}`),
    ).toEqual([
      "Zone kds.v1.ZoneSpec local cluster",
      "Gateway acme.v1.GatewaySpec global-to-zone cluster",
      "Workload acme.v1.WorkloadSpec zone-to-global mesh",
    ]);
    expect(logger.lines.join("\n")).toContain(
      'zone "zone-1" learned 2 kinds from global "global": Gateway (acme.v1.GatewaySpec, global-to-zone, cluster-scoped), Workload (acme.v1.WorkloadSpec, zone-to-global, mesh-scoped)',
    );
    const stored = await zone.store.get("Gateway", "", "edge");
    expect((stored?.spec as { hosts?: string[] } | undefined)?.hosts).toEqual(["a.example"]);

    // It serves the learned zone-to-global kind to the global.
    const workload = create(zone.types.get("Workload").schema, {
      address: "10.0.0.1",
      service: "web",
    } as never) as Message;
    await zone.store.put({ kind: "Workload", mesh: "default", name: "web-1", spec: workload });
    await eventually(
      async () => (await global.store.get("Workload", "default", "zone-1.web-1")) !== undefined,
      "the Workload on the global",
    );
    expect(zone.status().types.map((t) => t.kind)).toEqual(["Gateway", "Workload"]);
  });

  it("refuses a zone whose kinds disagree, naming the kind and both definitions, and syncs nothing", async () => {
    const globalLog = recordingLogger();
    const global = await startGlobal(acmeKinds(1), globalLog);
    await global.store.put({
      kind: "Gateway",
      name: "edge",
      spec: gateway(acmeRegistry(1), { port: 80 }),
    });
    const retries: RetryInfo[] = [];
    const zone = startZone(
      () => global,
      memoryMuxTransport(global.server),
      acmeKinds(1, { Gateway: { direction: "zone-to-global" } }),
      { onRetry: (info) => retries.push(info) },
    );
    await eventually(() => retries.length >= 2, "the zone retries after being refused");
    const expected =
      'kind "Gateway": global "global" defines acme.v1.GatewaySpec, global-to-zone, cluster-scoped; zone "zone-1" defines acme.v1.GatewaySpec, zone-to-global, cluster-scoped';
    expect(retries[0]?.error.message).toContain(expected);
    expect(globalLog.lines.join("\n")).toContain(
      `error: zone "zone-1" refused the kinds of this global; ending its session: zone "zone-1" refuses the kinds of global "global": ${expected}`,
    );
    const status = await global.zoneStatus("zone-1");
    expect(status?.lastEnd?.message).toContain(expected);
    // Both sides keep the refusal as the zone's last error.
    expect(status?.lastError).toMatchObject({
      code: "kinds_refused",
      message: expect.stringContaining(expected),
    });
    expect(zone.status().lastError).toMatchObject({
      code: "kinds_refused",
      message: expect.stringContaining(expected),
    });
    expect((await zone.store.list("Gateway")).resources).toEqual([]);
  });

  it("picks up a kind the global adds, on the next session, without a restart", async () => {
    let current = await startGlobal(acmeKinds(1).slice(0, 1)); // Gateway only
    const transport: MuxTransport = {
      name: "switchable",
      open: (request) => memoryMuxTransport(current.server).open(request),
    };
    const zone = startZone(() => current, transport);
    await eventually(() => zone.types.find("Gateway") !== undefined, "Gateway learned");
    expect(zone.types.find("Workload")).toBeUndefined();

    const previous = current;
    current = await startGlobal(acmeKinds(1)); // the global comes back with Workload added
    await previous.close();
    await eventually(
      () => zone.types.find("Workload") !== undefined,
      "Workload learned on the next session",
    );
    const workload = create(zone.types.get("Workload").schema, {
      address: "10.0.0.2",
    } as never) as Message;
    await zone.store.put({ kind: "Workload", mesh: "default", name: "web-2", spec: workload });
    await eventually(
      async () => (await current.store.get("Workload", "default", "zone-1.web-2")) !== undefined,
      "the new kind syncs",
    );
  });

  it("keeps a field added on the global that an older zone does not know, and does not strip it", async () => {
    // The global runs v2 of GatewaySpec (with replicas); the zone still has v1.
    const global = await startGlobal(acmeKinds(2));
    const served = await serveGlobal(global.server, { port: 0 });
    cleanups.push(() => served.close());
    await global.store.put({
      kind: "Gateway",
      name: "edge",
      spec: gateway(acmeRegistry(2), { hosts: ["a.example"], port: 443, replicas: 3 }),
    });
    const zone = startZone(
      () => global,
      connectMuxTransport(createGrpcTransport({ baseUrl: served.url }), { name: "grpc" }),
      acmeKinds(1),
    );
    await eventually(
      async () => (await zone.store.get("Gateway", "", "edge")) !== undefined,
      "the Gateway in the older zone",
    );

    const held = (await zone.store.get("Gateway", "", "edge"))!;
    const v1 = zone.types.get("Gateway").schema;
    expect(v1.fields.map((f) => f.name)).toEqual(["hosts", "port"]);
    // What the zone holds, encoded with the only message it knows, still carries replicas.
    const asV2 = fromBinary(
      acmeRegistry(2).getMessage("acme.v1.GatewaySpec")!,
      toBinary(v1, held.spec),
    ) as unknown as { hosts: string[]; port: number; replicas: number };
    expect(asV2).toMatchObject({ hosts: ["a.example"], port: 443, replicas: 3 });

    // A global change to a known field arrives; the unknown field keeps its latest value.
    await global.store.put({
      kind: "Gateway",
      name: "edge",
      spec: gateway(acmeRegistry(2), { hosts: ["a.example"], port: 8443, replicas: 5 }),
    });
    await eventually(
      async () =>
        ((await zone.store.get("Gateway", "", "edge"))?.spec as { port?: number } | undefined)
          ?.port === 8443,
      "the change in the older zone",
    );
    const again = fromBinary(
      acmeRegistry(2).getMessage("acme.v1.GatewaySpec")!,
      toBinary(v1, (await zone.store.get("Gateway", "", "edge"))!.spec),
    ) as unknown as { replicas: number };
    expect(again.replicas).toBe(5);
  });
});
