// Rebalancing with real processes: two global instances on one PostgreSQL
// database hold every zone (the zones, in one child process, each know all
// three addresses); a third instance joins on the address the zones already
// know. Within 60 s each instance holds its share (within 10%), every move
// was asked (goaway RECONNECT, no failure or refusal), and no zone was sent a
// Mesh again: the zones resume by versions.
// Small in `npm test` (30 zones); KDS_FLEET_FULL=1 runs the size
// (300 zones).
import { createServer } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import { freshDatabase, type TestDatabase } from "../support/postgres.ts";
import { fleetDocuments, startFleet } from "../support/fleet.ts";
import type { FleetConfig } from "../support/zone-fleet.ts";
import { KdsProcess, run, until } from "./process.ts";

const FULL = process.env.KDS_FLEET_FULL === "1";
const ZONES = FULL ? 300 : 30;
const MESHES = 5;
/** How far from its share an instance may be at the end: 10%, as the issue asks of 300 zones (100 ± 10). */
const SLACK = Math.ceil(ZONES / 3 / 10);

const processes: KdsProcess[] = [];
let db: TestDatabase | undefined;
let fleetEnd: (() => void) | undefined;
afterAll(async () => {
  fleetEnd?.();
  for (const p of processes) await p.stop();
  await db?.drop();
});

async function startGlobal(
  storeUrl: string,
  listen: string,
): Promise<{ mux: string; admin: string }> {
  const p = new KdsProcess([
    "global",
    ...["--listen", listen, "--admin-listen", "127.0.0.1:0", "--store", storeUrl],
    ...["--insecure-no-zone-auth", "--rebalance-interval", "2s", "--log-level", "info"],
  ]);
  processes.push(p);
  const m = await p.waitFor(
    /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
    90_000,
  );
  return { mux: m[1] as string, admin: m[2] as string };
}

/**
 * A loopback port held by a listener that refuses every connection, until
 * `release` (the third instance listens on it then; the zones know its
 * address from the start, and nothing else can take the port meanwhile).
 */
async function heldPort(): Promise<{ port: number; release: () => Promise<void> }> {
  const server = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return { port, release: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

/** The online zones each instance holds, from `kds-mux inspect zones`. */
async function perInstance(admin: string): Promise<number[]> {
  const r = await run(["inspect", "zones", "--server", admin]);
  const line = /Online zones per global instance: (.*)/.exec(r.stdout)?.[1] ?? "";
  return [...line.matchAll(/ (\d+)(?:,|$)/g)].map((m) => Number(m[1]));
}

describe("rebalancing when an instance joins", { timeout: FULL ? 600_000 : 300_000 }, () => {
  it(`${ZONES} zones on 2 instances, a third joins: each holds its share within 60 s, every move asked, no Mesh resent`, async () => {
    db = await freshDatabase();
    const first = await startGlobal(db.url, "127.0.0.1:0");
    const second = await startGlobal(db.url, "127.0.0.1:0");
    const third = await heldPort();
    const urls = [first.mux, second.mux, `http://127.0.0.1:${third.port}`];
    expect(
      (await run(["apply", "-f", "-", "--server", first.admin], fleetDocuments(ZONES, MESHES)))
        .code,
    ).toBe(0);

    const config: FleetConfig = {
      urls,
      zones: ZONES,
      meshes: MESHES,
      dataplanes: 2,
      churnMs: 3_600_000,
    };
    const fleet = startFleet(config);
    fleetEnd = () => fleet.end();
    const next = fleet.next;
    await next("synced");
    // The zones whose first address is the third instance failed over while it was down: not part of the move.
    fleet.send("mark");
    await next("marked");
    const report = fleet.report;
    await until(
      () => perInstance(first.admin),
      (c) => c.length === 2 && c[0]! + c[1]! === ZONES,
      "every zone on the first two",
      60_000,
    );
    const before = await report();

    await third.release();
    await startGlobal(db.url, `127.0.0.1:${third.port}`);
    const joined = performance.now();
    const share = ZONES / 3;
    const counts = await until(
      () => perInstance(first.admin),
      (c) =>
        c.length === 3 &&
        c.every((k) => Math.abs(k - share) <= SLACK) &&
        c.reduce((a, b) => a + b, 0) === ZONES,
      `each instance within ${SLACK} of ${share} zones`,
      60_000,
    );
    const evenMs = Math.round(performance.now() - joined);
    const after = await until(
      report,
      (r) => Object.values(r).every((z) => z.online),
      "every zone online",
      30_000,
    );
    const zones = Object.values(after);
    const moved = zones.reduce((n, z) => n + z.asked, 0);
    console.log(
      `rebalance (processes): ${ZONES} zones on 2 instances, a third joined; ${counts.join("/")} after ${evenMs} ms, ${moved} zones moved`,
    );
    expect(zones.flatMap((z) => z.failures)).toEqual([]);
    expect(moved).toBeGreaterThanOrEqual(share - SLACK);
    for (const [name, z] of Object.entries(after)) {
      expect(z.connects, name).toBe(1 + z.asked);
      // Resumed by versions: the Meshes it held were not sent again.
      expect(z.meshesReceived, name).toBe(before[name]?.meshesReceived);
    }
  });
});
