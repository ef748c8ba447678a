// A rolling restart with real processes: global instances on one PostgreSQL
// database, zones in one child process (each knows every instance, starting
// at a different one), churn on both sides. Each instance in turn gets
// SIGTERM: its /readyz turns 503, it asks its zones to reconnect elsewhere
// (goaway RECONNECT) over --drain-timeout and exits 0; it is started again on
// its address, and the next one goes once it is ready. Then: no resource is
// lost (the sets are equal on both sides), no zone saw a failure or a
// refusal, each zone reconnected at most once per drained instance (and
// otherwise only when rebalancing moved it), and rebalancing evened out the
// zones across the instances again.
// Small in `npm test` (3 instances, 20 zones); KDS_FLEET_FULL=1 runs the
// issue's size (3 instances, 300 zones).
import { afterAll, describe, expect, it } from "vitest";
import {
  exampleTypes,
  type DataplaneSpec,
  type MeshSpec,
} from "../../examples/example-kinds/index.ts";
import { silentLogger } from "../../src/log.ts";
import { PostgresStore } from "../../src/store/postgres.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { freshDatabase, type TestDatabase } from "../support/postgres.ts";
import { fleetDocuments, startFleet } from "../support/fleet.ts";
import type { FleetConfig, FleetZone } from "../support/zone-fleet.ts";
import { KdsProcess, run, until } from "./process.ts";

const FULL = process.env.KDS_FLEET_FULL === "1";
const INSTANCES = 3;
const ZONES = FULL ? 300 : 20;
const MESHES = 5;
const DATAPLANES = FULL ? 3 : 5;
// The full size drains over the default 30 s, so the other instances take 10 zones a second.
const DRAIN = FULL ? "30s" : "3s";
const REBALANCE = FULL ? "3s" : "1s";

const processes: KdsProcess[] = [];
let db: TestDatabase | undefined;
let fleetEnd: (() => void) | undefined;
afterAll(async () => {
  fleetEnd?.();
  for (const p of processes) await p.stop();
  await db?.drop();
});

interface Instance {
  process: KdsProcess;
  mux: string;
  admin: string;
}

async function startGlobal(storeUrl: string, listen = "127.0.0.1:0"): Promise<Instance> {
  const p = new KdsProcess([
    "global",
    "--listen",
    listen,
    "--admin-listen",
    "127.0.0.1:0",
    "--store",
    storeUrl,
    "--insecure-no-zone-auth",
    "--drain-timeout",
    DRAIN,
    "--rebalance-interval",
    REBALANCE,
    "--log-level",
    "info",
  ]);
  processes.push(p);
  const m = await p.waitFor(
    /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
    90_000,
  );
  return { process: p, mux: m[1] as string, admin: m[2] as string };
}

async function readyz(admin: string): Promise<{ status: number; body: string }> {
  try {
    const r = await fetch(`${admin}/readyz`, { signal: AbortSignal.timeout(5_000) });
    return { status: r.status, body: await r.text() };
  } catch (error) {
    return { status: 0, body: String(error) };
  }
}

describe("a rolling restart of global instances with drain", {
  timeout: FULL ? 900_000 : 300_000,
}, () => {
  it(`${INSTANCES} instances, ${ZONES} zones, churn: nothing lost, no failure or refusal, at most one reconnect per drained instance, /readyz 503 while draining`, async () => {
    db = await freshDatabase();
    const instances: Instance[] = [];
    for (let i = 0; i < INSTANCES; i++) instances.push(await startGlobal(db.url));
    for (const g of instances)
      await until(
        () => readyz(g.admin),
        (r) => r.status === 200,
        `${g.admin} ready`,
        60_000,
      );
    expect(
      (
        await run(
          ["apply", "-f", "-", "--server", (instances[0] as Instance).admin],
          fleetDocuments(ZONES, MESHES),
        )
      ).code,
    ).toBe(0);

    // The zones, in one child process.
    const config: FleetConfig = {
      urls: instances.map((g) => g.mux),
      zones: ZONES,
      meshes: MESHES,
      dataplanes: DATAPLANES,
      churnMs: FULL ? 50 : 200,
    };
    const fleet = startFleet(config);
    fleetEnd = () => fleet.end();
    const next = fleet.next;
    const syncStarted = performance.now();
    await next("synced");
    // What failed while the fleet first connected is not part of the roll: set it apart (it is logged below).
    fleet.send("mark");
    await next("marked");
    console.log(
      `rolling restart: ${ZONES} zones synced in ${Math.round(performance.now() - syncStarted)} ms`,
    );

    // Churn on the global side too: a Mesh description changes every few hundred ms through whichever instance is up.
    let meshVersion = 0;
    let churning = true;
    const globalChurn = (async () => {
      while (churning) {
        meshVersion++;
        const target = instances[meshVersion % INSTANCES] as Instance;
        const r = await run(
          ["apply", "-f", "-", "--server", target.admin],
          `type: Mesh\nname: m-${meshVersion % MESHES}\nspec:\n  description: v${meshVersion}\n`,
        );
        if (r.code !== 0) meshVersion--; // that instance is draining or restarting: the change was not made, try the next
        await new Promise((resolve) => setTimeout(resolve, 300));
      }
    })();

    // Roll: SIGTERM each instance, watch its /readyz during the drain, restart it on its address, wait until it is ready.
    const figures: string[] = [];
    for (let i = 0; i < INSTANCES; i++) {
      const old = instances[i] as Instance;
      const started = performance.now();
      old.process.child.kill("SIGTERM");
      const seen: number[] = [];
      const bodies: string[] = [];
      const exit = old.process.exited.then((code) => code);
      let exited = false;
      void exit.then(() => (exited = true));
      while (!exited) {
        const r = await readyz(old.admin);
        if (r.status !== 0) seen.push(r.status);
        if (r.status === 503) bodies.push(r.body);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(await exit).toBe(0);
      const drainedMs = Math.round(performance.now() - started);
      expect(seen).toContain(503);
      // From the first answer that says it drains, every 503 says so (one the instance answered before it saw the signal may name another reason).
      const drainingFrom = bodies.findIndex((b) => /^not ready: draining: /.test(b));
      expect(drainingFrom).toBeGreaterThanOrEqual(0);
      for (const body of bodies.slice(drainingFrom)) expect(body).toMatch(/^not ready: draining: /);
      expect(old.process.output).toMatch(/drain: \d+ zones asked to reconnect/);
      const asked = Number(/drain: (\d+) zones asked to reconnect/.exec(old.process.output)?.[1]);
      const fresh = await startGlobal(db.url, new URL(old.mux).host);
      await until(
        () => readyz(fresh.admin),
        (r) => r.status === 200,
        `restarted instance ${i} ready`,
        60_000,
      );
      instances[i] = fresh;
      figures.push(
        `instance ${i}: drained ${asked} zones in ${drainedMs} ms (readyz ${seen.filter((s) => s === 503).length}x 503), back and ready after ${Math.round(performance.now() - started)} ms`,
      );
    }
    churning = false;
    await globalChurn;
    fleet.send("stop-churn");
    await next("churnStopped");

    // Converged: every zone holds the store's Meshes, and the store holds every zone's Dataplanes, as they are.
    const store = await PostgresStore.open(createTypeRegistry(exampleTypes), {
      url: db.url,
      logger: silentLogger,
    });
    try {
      const storeMeshes = async (): Promise<Record<string, string>> =>
        Object.fromEntries(
          (await store.list("Mesh")).resources.map((r) => [
            r.meta.name,
            (r.spec as MeshSpec).description,
          ]),
        );
      const storeDataplanes = async (): Promise<Record<string, string>> =>
        Object.fromEntries(
          (await store.list("Dataplane")).resources.map((r) => [
            r.meta.name,
            (r.spec as DataplaneSpec).address,
          ]),
        );
      let report: Record<string, FleetZone> = {};
      await until(
        async () => {
          report = await fleet.report();
          const meshes = await storeMeshes();
          const dataplanes = await storeDataplanes();
          const zoneDataplanes = Object.fromEntries(
            Object.entries(report).flatMap(([zone, z]) =>
              Object.entries(z.dataplanes).map(([n, a]) => [`${zone}.${n}`, a]),
            ),
          );
          return {
            // Rebalancing may move a zone at any time, even after the roll: wait until none is between sessions.
            allOnline: Object.values(report).every((z) => z.online),
            meshesEqual: Object.values(report).every(
              (z) => JSON.stringify(z.meshes) === JSON.stringify(meshes),
            ),
            dataplanesEqual:
              JSON.stringify(sorted(zoneDataplanes)) === JSON.stringify(sorted(dataplanes)),
          };
        },
        (v) => v.allOnline && v.meshesEqual && v.dataplanesEqual,
        "every zone online, and zones and store agree",
        60_000,
      );
      const zones = Object.entries(report);
      expect(zones).toHaveLength(ZONES);
      expect(Object.keys(await storeDataplanes())).toHaveLength(ZONES * DATAPLANES);
      const failures = zones.flatMap(([zone, z]) => z.failures.map((f) => `${zone}: ${f}`));
      const initial = zones.flatMap(([zone, z]) => z.initialFailures.map((f) => `${zone}: ${f}`));
      if (initial.length > 0)
        console.log(
          `rolling restart: ${initial.length} dials failed while the fleet first connected (not part of the roll), e.g. ${initial[0]}`,
        );
      const asked = zones.reduce((n, [, z]) => n + z.asked, 0);
      const maxAsked = Math.max(...zones.map(([, z]) => z.drainAsked));
      const rebalanced = zones.reduce((n, [, z]) => n + z.asked - z.drainAsked, 0);
      const maxConnects = Math.max(...zones.map(([, z]) => z.connects));
      console.log(
        `rolling restart (${INSTANCES} instances, ${ZONES} zones, drain ${DRAIN}):\n  ${figures.join("\n  ")}\n  zones asked to reconnect ${asked} times in all (by a drain at most ${maxAsked} per zone; ${rebalanced} by rebalancing), at most ${maxConnects} sessions per zone, ${failures.length} failures or refusals; global Mesh changes ${meshVersion}; Mesh resources received per zone at most ${Math.max(...zones.map(([, z]) => z.meshesReceived))}`,
      );
      if (failures.length > 0) {
        // What the instances said about those zones, to tell why.
        const named = new Set(failures.map((f) => f.split(":")[0] as string));
        const said = processes.flatMap((p, i) =>
          p.output
            .split("\n")
            .filter((l) => [...named].some((z) => l.includes(`"${z}"`)))
            .map((l) => `process ${i}: ${l}`),
        );
        console.log(
          `what the instances logged about ${[...named].join(", ")}:\n${said.join("\n")}`,
        );
      }
      expect(failures).toEqual([]);
      expect(maxAsked).toBeLessThanOrEqual(INSTANCES);
      for (const [, z] of zones) expect(z.connects).toBe(1 + z.asked);
      // Rebalanced after the roll: each instance holds its share (ZONES / INSTANCES, rounded up).
      const share = Math.ceil(ZONES / INSTANCES);
      const held = await until(
        async () => {
          const r = await run([
            "inspect",
            "zones",
            "--server",
            (instances[0] as Instance).admin,
            "-o",
            "json",
          ]);
          const list =
            r.code === 0
              ? (JSON.parse(r.stdout) as { online: boolean; instance: string | null }[])
              : [];
          const byInstance = new Map<string, number>();
          for (const z of list)
            if (z.online && z.instance !== null)
              byInstance.set(z.instance, (byInstance.get(z.instance) ?? 0) + 1);
          return [...byInstance.values()];
        },
        (counts) =>
          counts.length === INSTANCES &&
          counts.every((n) => n <= share) &&
          counts.reduce((a, b) => a + b, 0) === ZONES,
        `each instance holds at most ${share} zones`,
        60_000,
      );
      console.log(`rolling restart: zones per instance at the end ${held.join("/")}`);
      // Resumed by versions: a zone received each Mesh once and each change once, never a resend after a reconnect.
      for (const [, z] of zones) expect(z.meshesReceived).toBeLessThanOrEqual(MESHES + meshVersion);
    } finally {
      await store.close();
    }
  });
});

function sorted(record: Record<string, string>): [string, string][] {
  return Object.entries(record).sort(([a], [b]) => a.localeCompare(b));
}
