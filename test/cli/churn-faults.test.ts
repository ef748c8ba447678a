// Real processes under continuous churn: resources are written on both sides
// without pause while (1) the global instance holding the zone is SIGKILLed,
// then the zone itself is SIGKILLed and restarted on its embedded store, and
// (2) every database connection of a global is cut, three times. Whatever
// either side acknowledged must end up on both sides, whatever was deleted
// must be gone from both, and nothing seen on the other side may vanish on
// the way unless its origin deleted it.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { adminClient } from "../../src/cli/admin-client.ts";
import { freshDatabase, type TestDatabase } from "../support/postgres.ts";
import { KdsProcess, until } from "./process.ts";

const processes: KdsProcess[] = [];
const databases: TestDatabase[] = [];
const dirs: string[] = [];
afterAll(async () => {
  for (const p of processes) await p.stop();
  for (const d of databases) await d.drop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const GLOBAL_READY =
  /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/;
const ZONE_ADMIN = /admin API listening on (http:\/\/127\.0\.0\.1:\d+)/;

async function startGlobal(
  storeUrl: string,
): Promise<{ process: KdsProcess; mux: string; admin: string }> {
  const p = new KdsProcess([
    "global",
    "--listen",
    "127.0.0.1:0",
    "--admin-listen",
    "127.0.0.1:0",
    "--store",
    storeUrl,
    "--insecure-no-zone-auth",
    "--name",
    "global",
    "--log-level",
    "info",
  ]);
  processes.push(p);
  const m = await p.waitFor(GLOBAL_READY, 90_000);
  return { process: p, mux: m[1] as string, admin: m[2] as string };
}

async function startZone(
  globals: string,
  store: string[],
): Promise<{ process: KdsProcess; admin: string }> {
  const p = new KdsProcess([
    "zone",
    "--name",
    "zone-1",
    "--global",
    globals,
    "--admin-listen",
    "127.0.0.1:0",
    ...store,
    "--log-level",
    "info",
  ]);
  processes.push(p);
  const admin = (await p.waitFor(ZONE_ADMIN, 90_000))[1] as string;
  return { process: p, admin };
}

/**
 * One admin client per admin URL for the whole file: each client holds its
 * own HTTP/2 connection open while idle, so a client per call piled up
 * connections until the admin listener's cap (128) refused the samples.
 */
const clients = new Map<string, ReturnType<typeof adminClient>>();
function admin(url: string): ReturnType<typeof adminClient> {
  let client = clients.get(url);
  if (client === undefined) {
    client = adminClient(url);
    clients.set(url, client);
  }
  return client;
}

/** Names of the resources of `kind` on an admin API (the global's copies of a zone's resources lose their "zone-1." prefix), or undefined while it does not answer. */
async function names(url: string, kind: string): Promise<Set<string> | undefined> {
  try {
    const r = await admin(url).get(
      { type: kind, mesh: kind === "Dataplane" ? "default" : "" },
      { timeoutMs: 10_000 },
    );
    return new Set(r.resources.map((x) => x.name.replace(/^zone-1\./, "")));
  } catch {
    return undefined; // the process is down or restarting: the caller samples again
  }
}

/**
 * Writes resources of one kind without pause: puts of new names, and now and
 * then a delete of an earlier one. Records what the writer's side
 * acknowledged; a write that failed may or may not have landed.
 */
class Churn {
  readonly acked = new Set<string>();
  readonly deleted = new Set<string>();
  /** Names whose fate is unknown (the call failed): they may exist or not. */
  readonly unknown = new Set<string>();
  /** Puts acknowledged so far (deletes take names out of `acked`, not out of this count). */
  puts = 0;
  #stop = false;
  #i = 0;
  readonly done: Promise<void>;

  constructor(
    readonly kind: "Mesh" | "Dataplane",
    readonly admin: () => string,
  ) {
    this.done = this.#run();
  }

  stop(): Promise<void> {
    this.#stop = true;
    return this.done;
  }

  async #run(): Promise<void> {
    for (let n = 0; !this.#stop && n < 100_000; n++) {
      const i = this.#i++;
      const client = admin(this.admin());
      if (i % 5 === 4 && this.acked.size > 0) {
        const victim = [...this.acked][Math.floor(i / 5) % this.acked.size] as string;
        this.acked.delete(victim);
        this.deleted.add(victim); // from now on nobody may expect it
        try {
          await client.delete(
            { type: this.kind, name: victim, mesh: this.kind === "Dataplane" ? "default" : "" },
            { timeoutMs: 10_000 },
          );
        } catch {
          this.unknown.add(victim); // deleted or not: the end state is checked from both sides' agreement
        }
        continue;
      }
      const name = `${this.kind === "Mesh" ? "m" : "dp"}-${i}`;
      const resource =
        this.kind === "Mesh"
          ? { type: "Mesh", name, specJson: `{"description":"churn ${i}"}` }
          : {
              type: "Dataplane",
              mesh: "default",
              name,
              specJson: `{"address":"10.0.${Math.floor(i / 250)}.${i % 250}"}`,
            };
      try {
        await client.apply({ resources: [resource] }, { timeoutMs: 10_000 });
        this.acked.add(name);
        this.puts++;
      } catch {
        this.unknown.add(name); // the process was killed under it: it may or may not have landed
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }
}

/**
 * Samples `kind` on the side that mirrors it: once a name was seen there, it
 * must stay unless its origin deleted it.
 */
class Watcher {
  readonly seen = new Set<string>();
  readonly vanished: string[] = [];
  samples = 0;
  #stop = false;
  readonly done: Promise<void>;

  constructor(
    readonly churn: Churn,
    readonly mirror: () => string,
  ) {
    this.done = this.#run();
  }

  stop(): Promise<void> {
    this.#stop = true;
    return this.done;
  }

  async #run(): Promise<void> {
    for (let n = 0; !this.#stop && n < 10_000; n++) {
      const now = await names(this.mirror(), this.churn.kind);
      if (now !== undefined) {
        this.samples++;
        for (const name of this.seen) {
          if (!now.has(name) && !this.churn.deleted.has(name)) this.vanished.push(name);
        }
        for (const name of now) this.seen.add(name);
        for (const name of this.seen) if (!now.has(name)) this.seen.delete(name);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

/** Waits until both sides hold the same names of `churn`'s kind, every acknowledged put and no acknowledged delete; returns that set. */
async function converged(churn: Churn, origin: string, mirror: string): Promise<Set<string>> {
  const both = await until(
    async () => [await names(origin, churn.kind), await names(mirror, churn.kind)] as const,
    ([a, b]) =>
      a !== undefined && b !== undefined && a.size === b.size && [...a].every((x) => b.has(x)),
    `${churn.kind} to agree on both sides`,
    120_000,
  );
  const held = both[0] as Set<string>;
  const missing = [...churn.acked].filter((x) => !held.has(x));
  const resurrected = [...churn.deleted].filter((x) => held.has(x) && !churn.unknown.has(x));
  expect(missing, `acknowledged ${churn.kind} puts missing`).toEqual([]);
  expect(resurrected, `acknowledged ${churn.kind} deletes undone`).toEqual([]);
  return held;
}

/** Waits until every churn had at least 8 more puts acknowledged. */
async function progress(what: string, ...churns: Churn[]): Promise<void> {
  const start = churns.map((c) => c.puts);
  await until(
    async () => churns.map((c, i) => c.puts - (start[i] as number)),
    (grown) => grown.every((n) => n >= 8),
    what,
    120_000,
  );
}

/** Runs `work`; when it fails, the error carries the last lines of each process's output. */
async function explained<T>(processes: KdsProcess[], work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    const tails = processes.map((p) => p.output.split("\n").slice(-40).join("\n")).join("\n----\n");
    throw new Error(`${String(error)}\nprocess output (last lines):\n${tails}`, { cause: error });
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe("continuous churn through process and database faults", { timeout: 600_000 }, () => {
  it("SIGKILL the global holding the zone, then the zone, while both sides write: nothing acknowledged is lost and nothing mirrored vanishes", async () => {
    const db = await freshDatabase();
    databases.push(db);
    const a = await startGlobal(db.url);
    const b = await startGlobal(db.url);
    await admin(a.admin).apply({
      resources: [{ type: "Zone", name: "zone-1", specJson: '{"enabled":true}' }],
    });
    const dataDir = mkdtempSync(join(tmpdir(), "kds-churn-zone-"));
    dirs.push(dataDir);
    let zone = await startZone(`${a.mux},${b.mux}`, ["--data-dir", dataDir]);
    await zone.process.waitFor(/connected to global "global"/, 90_000);

    let globalAdmin = a.admin;
    const meshes = new Churn("Mesh", () => globalAdmin);
    const dataplanes = new Churn("Dataplane", () => zone.admin);
    const onZone = new Watcher(meshes, () => zone.admin);
    const onGlobal = new Watcher(dataplanes, () => globalAdmin);
    await progress("churn under way", meshes, dataplanes);

    // The zone dialed a first: kill it mid-churn; writes go on through b.
    a.process.child.kill("SIGKILL");
    await a.process.exited;
    globalAdmin = b.admin;
    await until(
      async () => zone.process.output.match(/connected to global "global"/g)?.length ?? 0,
      (n) => n >= 2,
      "the zone reconnected to b",
      120_000,
    );
    await progress("churn goes on after the failover", meshes, dataplanes);

    // Now kill the zone mid-churn and restart it on its embedded store.
    zone.process.child.kill("SIGKILL");
    await zone.process.exited;
    await sleep(500);
    zone = await startZone(`${a.mux},${b.mux}`, ["--data-dir", dataDir]);
    await zone.process.waitFor(/connected to global "global"/, 120_000);
    await progress("churn goes on after the zone restart", meshes, dataplanes);

    await meshes.stop();
    await dataplanes.stop();
    const [meshSet, dpSet] = await explained(
      [b.process, zone.process],
      async () =>
        [
          await converged(meshes, b.admin, zone.admin),
          await converged(dataplanes, zone.admin, b.admin),
        ] as const,
    );
    await onZone.stop();
    await onGlobal.stop();
    console.log(
      `churn through SIGKILLs: ${meshes.puts} Mesh and ${dataplanes.puts} Dataplane puts acknowledged, ${meshes.deleted.size} + ${dataplanes.deleted.size} deletes (${meshes.unknown.size} + ${dataplanes.unknown.size} writes failed while their process was down); ` +
        `both sides agree on ${meshSet.size} Meshes and ${dpSet.size} Dataplanes; ${onZone.samples} + ${onGlobal.samples} mirror samples, ${onZone.vanished.length + onGlobal.vanished.length} vanished`,
    );
    expect(onZone.samples).toBeGreaterThan(5);
    expect(onGlobal.samples).toBeGreaterThan(5);
    expect(onZone.vanished, "Meshes that vanished from the zone without a delete").toEqual([]);
    expect(onGlobal.vanished, "Dataplanes that vanished from the global without a delete").toEqual(
      [],
    );
    expect(b.process.child.exitCode).toBeNull();
  });

  it("cut every database connection of a global three times while both sides write: nothing acknowledged is lost, and sync goes on", async () => {
    const db = await freshDatabase();
    databases.push(db);
    const g = await startGlobal(db.url);
    await admin(g.admin).apply({
      resources: [{ type: "Zone", name: "zone-1", specJson: '{"enabled":true}' }],
    });
    const zone = await startZone(g.mux, ["--store", "memory"]);
    await zone.process.waitFor(/connected to global "global"/, 90_000);

    const meshes = new Churn("Mesh", () => g.admin);
    const dataplanes = new Churn("Dataplane", () => zone.admin);
    const onZone = new Watcher(meshes, () => zone.admin);
    const onGlobal = new Watcher(dataplanes, () => g.admin);
    const sql = postgres(db.url, { max: 1, onnotice: () => undefined, connect_timeout: 10 });
    let cut = 0;
    await explained([g.process, zone.process], async () => {
      try {
        for (let round = 0; round < 3; round++) {
          await progress(`churn under way (round ${round + 1})`, meshes, dataplanes);
          const killed = await sql<{ pid: number }[]>`
          SELECT pg_terminate_backend(pid) AS pid FROM pg_stat_activity
          WHERE datname = ${db.name} AND pid <> pg_backend_pid()`;
          cut += killed.length;
        }
        await progress("churn goes on after the last cut", meshes, dataplanes);
      } finally {
        await sql.end({ timeout: 5 });
      }
    });
    await meshes.stop();
    await dataplanes.stop();
    const [meshSet, dpSet] = await explained(
      [g.process, zone.process],
      async () =>
        [
          await converged(meshes, g.admin, zone.admin),
          await converged(dataplanes, zone.admin, g.admin),
        ] as const,
    );
    await onZone.stop();
    await onGlobal.stop();
    console.log(
      `churn through ${cut} cut database connections: ${meshes.puts} Mesh and ${dataplanes.puts} Dataplane puts acknowledged, ${meshes.deleted.size} + ${dataplanes.deleted.size} deletes (${meshes.unknown.size} + ${dataplanes.unknown.size} writes failed); both sides agree on ${meshSet.size} Meshes and ${dpSet.size} Dataplanes`,
    );
    expect(cut).toBeGreaterThanOrEqual(3);
    expect(onZone.vanished).toEqual([]);
    expect(onGlobal.vanished).toEqual([]);
    expect(g.process.child.exitCode).toBeNull();
  });
});
