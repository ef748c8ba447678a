// A child process holding many zones (test/cli/rolling-restart.test.ts): zone
// i dials the global instances `urls` through failoverMuxTransport, starting
// at urls[i mod n], keeps its state in memory, writes `dataplanes`
// Dataplanes, and, while churning, updates one zone's Dataplane every
// `churnMs`. It prints JSON lines: {"synced": n} once every zone holds at
// least `meshes` Meshes; on stdin "mark" it sets the failures so far apart
// (initialFailures), on "stop-churn" it stops changing, and on
// "report" it prints {"report": {...}} with every zone's connects, the ends
// it was asked to reconnect for, every other retry (a failure or refusal),
// its Dataplanes and its Meshes; "profile-start" starts a V8 CPU profile of
// this process and "profile-stop FILE" writes it to FILE (bench/restart-storm.ts,
// KDS_STORM_ZONE_PROFILE). stdin closing stops it.
import { create } from "@bufbuild/protobuf";
import { setMaxListeners } from "node:events";
import { writeFileSync } from "node:fs";
import { Session as InspectorSession } from "node:inspector/promises";
import { createInterface } from "node:readline";
import {
  DataplaneSpecSchema,
  exampleTypes,
  type DataplaneSpec,
  type MeshSpec,
} from "../../examples/example-kinds/index.ts";
import { grpcMuxTransport } from "../../src/adapters/node/grpc-mux-client.ts";
import { silentLogger } from "../../src/log.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { failoverMuxTransport } from "../../src/transport/failover.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";

/** What the parent passes as argv[2] (JSON). */
export interface FleetConfig {
  readonly urls: readonly string[];
  readonly zones: number;
  readonly meshes: number;
  readonly dataplanes: number;
  readonly churnMs: number;
  /** The zones' reconnect backoff; default: 200 ms to 2 s (ZoneControlPlane's own default when `"default"`). */
  readonly backoff?: { readonly baseMs: number; readonly capMs: number } | "default";
  /** The first zone's number (zone-<first>, ...); default 0. */
  readonly first?: number;
  /** Whether a zone follows a goaway's reconnect_to outside `urls` (failoverMuxTransport's `follow`); default true. */
  readonly follow?: boolean;
}

/** One zone in the report. */
export interface FleetZone {
  readonly connects: number;
  /** Sessions the global ended asking the zone to reconnect (goaway RECONNECT). */
  readonly asked: number;
  /** Of those, the ones a draining instance asked (the others: rebalancing). */
  readonly drainAsked: number;
  /** Every other retry: "<code> (<message>)" of the dial error, or "closed.<end code> (...)" of the session end. */
  readonly failures: readonly string[];
  /** The failures before the parent's "mark" (while the fleet first connected), kept apart. */
  readonly initialFailures: readonly string[];
  /** Dataplane name -> address, as the zone holds them. */
  readonly dataplanes: Readonly<Record<string, string>>;
  /** Mesh name -> description, as the zone holds them. */
  readonly meshes: Readonly<Record<string, string>>;
  /** Mesh resources received over all sessions. */
  readonly meshesReceived: number;
  /** A session is up now (false between a session's end and the next one's start). */
  readonly online: boolean;
}

const config = JSON.parse(process.argv[2] as string) as FleetConfig;
const stop = new AbortController();
setMaxListeners(0, stop.signal);

const dpSpec = (address: string): DataplaneSpec => create(DataplaneSpecSchema, { address });

const zones = Array.from({ length: config.zones }, (_, k) => {
  const i = (config.first ?? 0) + k;
  const name = `zone-${i}`;
  const urls = config.urls.map((_, k) => config.urls[(i + k) % config.urls.length] as string);
  const stats = {
    online: false,
    connects: 0,
    asked: 0,
    drainAsked: 0,
    failures: [] as string[],
    initialFailures: [] as string[],
    /** Connects at the last "mark". */
    markConnects: 0,
    /** Retries since the last "mark": every one, those the global said when to make, those refused as overloaded. */
    retries: 0,
    told: 0,
    overloaded: 0,
    /** The Mesh, description and connect count a progress check last found this zone holding. */
    resyncedAs: "",
  };
  const zone = new ZoneControlPlane({
    name,
    transport: failoverMuxTransport(
      urls.map((url) => grpcMuxTransport(url, { signal: stop.signal })),
      {
        targets: urls,
        // As the CLI zone does: a goaway naming an instance outside the list is followed once.
        follow:
          config.follow === false
            ? undefined
            : (url) => grpcMuxTransport(url, { signal: stop.signal }),
      },
    ),
    types: createTypeRegistry(exampleTypes),
    logger: silentLogger,
    backoff:
      config.backoff === "default" ? undefined : (config.backoff ?? { baseMs: 200, capMs: 2_000 }),
    reconnectJitterMs: 500,
    onSession: () => {
      stats.connects++;
      stats.online = true;
    },
    onRetry: (info) => {
      stats.online = false;
      stats.retries++;
      if (info.told) stats.told++;
      if (info.error.code === "overloaded") stats.overloaded++;
      if (info.asked) {
        stats.asked++;
        if (/draining/.test(info.error.message)) stats.drainAsked++;
      } else {
        const cause = info.error.cause as { code?: string } | undefined;
        const code =
          info.error.code === "session_closed" && typeof cause?.code === "string"
            ? `closed.${cause.code}`
            : info.error.code;
        stats.failures.push(`${code} (${info.error.message.split("\n")[0]?.slice(0, 160) ?? ""})`);
      }
    },
  });
  return { name, zone, stats };
});

/** Progress since the last "mark", without the per-zone detail of "report". */
async function progress(mesh: string, description: string): Promise<Record<string, number>> {
  let reconnected = 0;
  let resynced = 0;
  let retries = 0;
  let told = 0;
  let overloaded = 0;
  let maxRetries = 0;
  for (const { zone, stats } of zones) {
    retries += stats.retries;
    told += stats.told;
    overloaded += stats.overloaded;
    maxRetries = Math.max(maxRetries, stats.retries);
    if (stats.connects <= stats.markConnects || !stats.online) continue;
    reconnected++;
    // A zone found holding the change on this session is not read again (this runs every 250 ms over thousands of zones).
    const key = `${mesh}\0${description}\0${stats.connects}`;
    if (stats.resyncedAs === key) {
      resynced++;
      continue;
    }
    const held = await zone.store.get("Mesh", "", mesh);
    if (held !== undefined && (held.spec as MeshSpec).description === description) {
      stats.resyncedAs = key;
      resynced++;
    }
  }
  return { zones: zones.length, reconnected, resynced, retries, maxRetries, told, overloaded };
}

for (const { zone } of zones) {
  for (let d = 0; d < config.dataplanes; d++)
    await zone.store.put({
      kind: "Dataplane",
      mesh: "default",
      name: `dp-${d}`,
      spec: dpSpec(`10.0.${d}.1`),
    });
  void zone.run(stop.signal);
}

// Churn: one zone's Dataplane changes every churnMs.
let churn = 0;
const churnTimer = setInterval(() => {
  const { zone } = zones[churn % zones.length] as (typeof zones)[number];
  const d = churn % config.dataplanes;
  churn++;
  void zone.store.put({
    kind: "Dataplane",
    mesh: "default",
    name: `dp-${d}`,
    spec: dpSpec(`10.1.${d}.${churn % 250}`),
  });
}, config.churnMs);

async function synced(): Promise<number> {
  let n = 0;
  for (const { zone } of zones)
    if ((await zone.store.list("Mesh")).resources.length >= config.meshes) n++;
  return n;
}

const syncedTimer = setInterval(() => {
  void synced().then((n) => {
    if (n === zones.length) {
      clearInterval(syncedTimer);
      process.stdout.write(`${JSON.stringify({ synced: n })}\n`);
    }
  });
}, 200);

async function report(): Promise<Record<string, FleetZone>> {
  const out: Record<string, FleetZone> = {};
  for (const { name, zone, stats } of zones) {
    const dataplanes: Record<string, string> = {};
    for (const r of (await zone.store.list("Dataplane")).resources)
      dataplanes[r.meta.name] = (r.spec as DataplaneSpec).address;
    const meshes: Record<string, string> = {};
    for (const r of (await zone.store.list("Mesh")).resources)
      meshes[r.meta.name] = (r.spec as MeshSpec).description;
    const meshesReceived =
      zone.status().types.find((t) => t.kind === "Mesh")?.resourcesReceived ?? 0;
    out[name] = { ...stats, dataplanes, meshes, meshesReceived };
  }
  return out;
}

let profiler: InspectorSession | undefined;
for await (const line of createInterface({ input: process.stdin })) {
  if (line === "mark") {
    for (const { stats } of zones) {
      stats.initialFailures.push(...stats.failures.splice(0));
      stats.markConnects = stats.connects;
      stats.retries = stats.told = stats.overloaded = 0;
    }
    process.stdout.write(`${JSON.stringify({ marked: true })}\n`);
  } else if (line.startsWith("progress ")) {
    const [, mesh = "", description = ""] = line.split(" ");
    process.stdout.write(`${JSON.stringify({ progress: await progress(mesh, description) })}\n`);
  } else if (line === "stop-churn") {
    clearInterval(churnTimer);
    process.stdout.write(`${JSON.stringify({ churnStopped: churn })}\n`);
  } else if (line === "report")
    process.stdout.write(`${JSON.stringify({ report: await report() })}\n`);
  else if (line === "profile-start") {
    profiler ??= new InspectorSession();
    profiler.connect();
    await profiler.post("Profiler.enable");
    await profiler.post("Profiler.start");
    process.stdout.write(`${JSON.stringify({ profiling: true })}\n`);
  } else if (line.startsWith("profile-stop ") && profiler !== undefined) {
    const { profile } = await profiler.post("Profiler.stop");
    writeFileSync(line.slice("profile-stop ".length), JSON.stringify(profile));
    profiler.disconnect();
    process.stdout.write(`${JSON.stringify({ profiled: true })}\n`);
  }
}
stop.abort();
clearInterval(churnTimer);
clearInterval(syncedTimer);
setTimeout(() => process.exit(0), 500).unref();
