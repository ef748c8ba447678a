/**
 * `kds-mux demo`: a global and two zones on loopback (gRPC over h2c), each
 * zone proving its name with a zone token, example resources applied on both
 * sides, and a live log of them flowing both ways, including each zone's
 * ZoneIngress reaching the other zone through the global (zone-to-zones).
 * The kinds are the example kinds, loaded from their kinds file like
 * `kds-mux global --kinds` loads any other.
 *
 * @module
 */
import { setMaxListeners } from "node:events";
import { fromJson, toJsonString, type JsonValue } from "@bufbuild/protobuf";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { adminListenerInterceptor, registerAdminRoutes } from "../admin/admin-routes.ts";
import { serveGlobal, serveRoutes } from "../adapters/node/serve-global.ts";
import { GlobalControlPlane } from "../global/global-control-plane.ts";
import type { Logger } from "../log.ts";
import { createTypeRegistry } from "../kinds/builtin-types.ts";
import { LABELS, resourceKey, type TypeRegistry } from "../kinds/resource-types.ts";
import type { ResourceStore } from "../store/contract.ts";
import { connectMuxTransport } from "../transport/connect.ts";
import { ZoneControlPlane } from "../zone/zone-control-plane.ts";
import { adminClient } from "./admin-client.ts";
import { formatZones } from "./format.ts";
import { EXAMPLE_KINDS_FILE, describeKinds, loadKindsFile } from "./kinds-file.ts";
import { aborted } from "./signals.ts";
import { globalAdminBackend } from "../admin/role-backends.ts";

/** Options of the demo. */
export interface DemoOptions {
  /** Stops the demo. */
  readonly signal: AbortSignal;
  /** Where the demo's own lines go. */
  readonly print: (line: string) => void;
  /** Where library logs go (warnings only, by default). */
  readonly logger: Logger;
}

const zoneNames = ["zone-east", "zone-west"] as const;

/** Runs the demo until `signal` aborts. */
export async function runDemo(options: DemoOptions): Promise<void> {
  const { print, signal } = options;
  const started = performance.now();
  const stamp = (): string => `[${((performance.now() - started) / 1000).toFixed(2).padStart(6)}s]`;
  const counts = { down: 0, up: 0 };

  const kinds = loadKindsFile(EXAMPLE_KINDS_FILE);
  const global = new GlobalControlPlane({
    id: "global",
    types: createTypeRegistry(kinds.types),
    logger: options.logger,
  });
  const spec = (kind: string, json: JsonValue) => fromJson(global.types.get(kind).schema, json);
  const stop = new AbortController();
  setMaxListeners(0, stop.signal); // one global and two zones tie themselves to it
  global.start(stop.signal);
  const served = await serveGlobal(global.server, { port: 0 });
  const adminApi = await serveRoutes(
    (router) => registerAdminRoutes(router, globalAdminBackend(global)),
    {
      port: 0,
      interceptors: [adminListenerInterceptor(globalAdminBackend(global), "127.0.0.1")],
    },
  );
  print(
    `kds-mux demo: one global and two zones on loopback, synced over gRPC (h2c) at ${served.url}, each zone with its zone token; admin API at ${adminApi.url}`,
  );
  print(`  kinds from ${EXAMPLE_KINDS_FILE}: ${describeKinds(kinds.types)}`);
  print(
    `  global -> zones: Mesh, TrafficPolicy      zones -> global: Dataplane      zone -> global -> other zones: ZoneIngress      Ctrl-C to stop\n`,
  );

  // The global hears about zone resources arriving.
  const watchFailed = (error: unknown): void =>
    options.logger.error("demo: following a store failed", { error });
  watch(global.store, global.types, stop.signal, (kind, key, op, spec, labels) => {
    if (kind !== "Dataplane" && kind !== "ZoneIngress") return;
    counts.up++;
    const from = labels?.[LABELS.zone] ?? key.split("/").at(-1)?.split(".")[0] ?? "?";
    print(
      `${stamp()} global    <- ${op === "put" ? "got" : "lost"} ${kind} ${key} from ${from}${spec === undefined ? "" : ` ${spec}`}`,
    );
  }).catch(watchFailed);
  for (const name of zoneNames) await global.registerZone(name);
  await global.store.put({
    kind: "Mesh",
    name: "default",
    spec: spec("Mesh", { mtls: true, description: "the demo mesh" }),
  });
  await global.store.put({
    kind: "TrafficPolicy",
    mesh: "default",
    name: "timeouts",
    spec: spec("TrafficPolicy", { services: ["web"], timeoutMs: 1000, retries: 2 }),
  });

  const zones = zoneNames.map((name) => {
    const zone = new ZoneControlPlane({
      name,
      // What `kds-mux generate zone-token --zone NAME` prints, issued in process here.
      token: async () =>
        (await global.tokens.issueZoneToken(name, { validForMs: 3_600_000 })).token,
      transport: connectMuxTransport(createGrpcTransport({ baseUrl: served.url }), {
        name: "grpc",
        target: served.url,
      }),
      types: createTypeRegistry(kinds.types), // the zones write Dataplanes before they first connect
      logger: options.logger,
      backoff: { baseMs: 200, capMs: 2_000 },
    });
    watch(zone.store, zone.types, stop.signal, (kind, key, op, spec, labels) => {
      // The zone's own writes are not news; copies (of the global's and of the other zone's resources) are. A delete carries no labels: a dot marks a copy of another zone's ZoneIngress.
      if (
        kind === "Dataplane" ||
        (kind === "ZoneIngress" &&
          (op === "put" ? labels?.[LABELS.origin] !== "global" : !key.includes(".")))
      )
        return;
      counts.down++;
      const from =
        kind === "ZoneIngress"
          ? ` (from ${labels?.[LABELS.zone] ?? key.split(".")[0]}, through the global)`
          : "";
      print(
        `${stamp()} ${name.padEnd(9)} <- ${op === "put" ? "got" : "lost"} ${kind} ${key}${from}${spec === undefined ? "" : ` ${spec}`}`,
      );
    }).catch(watchFailed);
    return { name, zone, done: zone.run(stop.signal) };
  });
  const dataplane = (name: string, address: string, service: string) => ({
    kind: "Dataplane",
    mesh: "default",
    name,
    labels: { app: service },
    spec: spec("Dataplane", { address, service, port: 8080 }),
  });
  await zones[0]?.zone.store.put(dataplane("web-1", "10.0.1.1", "web"));
  await zones[1]?.zone.store.put(dataplane("api-1", "10.0.2.1", "api"));
  // Each zone's ingress: the other zone gets it through the global, this zone never gets its own back.
  const ingress = (address: string, services: string[]) => ({
    kind: "ZoneIngress",
    name: "ingress",
    spec: spec("ZoneIngress", { address, port: 10001, services }),
  });
  await zones[0]?.zone.store.put(ingress("192.0.2.10", ["web"]));
  await zones[1]?.zone.store.put(ingress("198.51.100.20", ["api"]));

  // A few changes on both sides while it runs.
  const steps: ((i: number) => Promise<unknown>)[] = [
    (i) =>
      global.store.put({
        kind: "TrafficPolicy",
        mesh: "default",
        name: "timeouts",
        spec: spec("TrafficPolicy", { services: ["web"], timeoutMs: 1000 + 500 * i, retries: 2 }),
      }),
    (i) =>
      zones[0]?.zone.store.put(dataplane(`web-${i + 1}`, `10.0.1.${i + 1}`, "web")) ??
      Promise.resolve(),
    (i) =>
      global.store.put({
        kind: "TrafficPolicy",
        mesh: "default",
        name: `retries-${i}`,
        spec: spec("TrafficPolicy", { services: ["api"], retries: i }),
      }),
    (i) =>
      zones[1]?.zone.store.put(dataplane("api-1", `10.0.2.${i + 10}`, "api")) ?? Promise.resolve(),
    (i) => global.store.delete("TrafficPolicy", "default", `retries-${i - 2}`),
    (i) =>
      zones[i % 2]?.zone.store.put(
        ingress(
          i % 2 === 0 ? `192.0.2.${10 + i}` : `198.51.100.${20 + i}`,
          i % 2 === 0 ? ["web"] : ["api"],
        ),
      ) ?? Promise.resolve(),
  ];
  let step = 0;
  const ticker = setInterval(() => {
    const index = step % steps.length;
    const run = steps[index];
    const round = Math.floor(step / steps.length) + 1;
    step++;
    run?.(round).catch((error: unknown) => {
      // A change still running when the demo stops may fail with its stores: nothing is lost then.
      if (!stop.signal.aborted)
        options.logger.warn(
          `demo: change ${index + 1} of round ${round} failed; the next one runs as planned`,
          {
            error,
          },
        );
    });
  }, 2_000);
  const admin = adminClient(adminApi.url);
  const showStatus = async (): Promise<void> => {
    const { zones: insights } = await admin.inspectZones({});
    print(
      `\n${stamp()} zone status (kds-mux inspect zones --server ${adminApi.url}):\n${formatZones(insights, "table")}\n`,
    );
  };
  const statusFailed = (error: unknown): void =>
    options.logger.warn("demo: showing the zone status failed", { error });
  const statusTimer = setInterval(() => {
    showStatus().catch(statusFailed);
  }, 10_000);

  await aborted(signal);
  clearInterval(ticker);
  clearInterval(statusTimer);
  await showStatus().catch(statusFailed);
  stop.abort();
  await Promise.all(zones.map((z) => z.done));
  await Promise.all([served.close(), adminApi.close()]);
  print(
    `demo finished: ${counts.down} changes reached the zones from the global, ${counts.up} reached the global from the zones`,
  );
}

/** Calls `onChange` for every change of `store` (the demo's stores start empty), with the spec as compact JSON. */
async function watch(
  store: ResourceStore,
  types: TypeRegistry,
  signal: AbortSignal,
  onChange: (
    kind: string,
    key: string,
    op: "put" | "delete",
    spec: string | undefined,
    labels: Readonly<Record<string, string>> | undefined,
  ) => void,
): Promise<void> {
  for await (const change of store.watch(0, { signal })) {
    if (change.op === "delete")
      onChange(
        change.ref.kind,
        resourceKey(change.ref.mesh, change.ref.name),
        "delete",
        undefined,
        undefined,
      );
    else {
      const r = change.resource;
      onChange(
        r.kind,
        resourceKey(r.meta.mesh, r.meta.name),
        "put",
        toJsonString(types.get(r.kind).schema, r.spec),
        r.meta.labels,
      );
    }
  }
}
