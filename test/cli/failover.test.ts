// Real processes on one PostgreSQL database: two global instances, a zone
// that knows both. SIGKILL the instance holding the zone: the zone fails over
// to the other, nothing is lost, and changes flow again both ways. Then a
// lone global is SIGKILLed and restarted on the same database: the zone
// resumes by versions and nothing is resent.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { freshDatabase, type TestDatabase } from "../support/postgres.ts";
import { KdsProcess, run, until } from "./process.ts";

const tmp = mkdtempSync(join(tmpdir(), "kds-failover-")); // a marker that the whole scenario ran
const processes: KdsProcess[] = [];
let db: TestDatabase | undefined;
afterAll(async () => {
  for (const p of processes) await p.stop();
  await db?.drop();
});

/** Starts a global instance on the shared database; returns its zone-facing and admin URLs. */
async function startGlobal(
  storeUrl: string,
  listen = "127.0.0.1:0",
): Promise<{ process: KdsProcess; mux: string; admin: string }> {
  const p = new KdsProcess([
    "global",
    "--listen",
    listen,
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
  const m = await p.waitFor(
    /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
    90_000,
  );
  return { process: p, mux: m[1] as string, admin: m[2] as string };
}

const json = async (args: string[]): Promise<unknown> => {
  const r = await run([...args, "-o", "json"]);
  if (r.code !== 0) return undefined;
  return JSON.parse(r.stdout) as unknown;
};

type Zone = {
  zone: string;
  online: boolean;
  instance: string | null;
  types: { kind: string; resourcesSent: number; resourcesReceived: number }[];
};

describe("several global instances as processes", { timeout: 300_000 }, () => {
  it("SIGKILL the instance holding a zone: it fails over, and nothing is lost; a restarted lone global resends nothing", async () => {
    db = await freshDatabase();
    const a = await startGlobal(db.url);
    const b = await startGlobal(db.url);
    const meshes = Array.from(
      { length: 20 },
      (_, i) => `type: Mesh\nname: m-${i}\nspec:\n  description: from a\n`,
    ).join("---\n");
    expect(
      (
        await run(
          ["apply", "-f", "-", "--server", a.admin],
          `type: Zone\nname: zone-1\nspec:\n  enabled: true\n---\n${meshes}`,
        )
      ).code,
    ).toBe(0);

    const zone = new KdsProcess([
      "zone",
      "--name",
      "zone-1",
      "--global",
      `${a.mux},${b.mux}`,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--log-level",
      "info",
    ]);
    processes.push(zone);
    const zoneAdmin = (
      await zone.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/, 90_000)
    )[1] as string;
    await zone.waitFor(/connected to global "global"/, 90_000);
    const dataplanes = Array.from(
      { length: 10 },
      (_, i) => `type: Dataplane\nmesh: default\nname: dp-${i}\nspec:\n  address: 10.0.0.${i}\n`,
    ).join("---\n");
    expect((await run(["apply", "-f", "-", "--server", zoneAdmin], dataplanes)).code).toBe(0);
    // Both instances see the zone's dataplanes (one database) and say which instance holds the zone.
    await until(
      () => json(["get", "Dataplane", "--mesh", "default", "--server", b.admin]),
      (v) => Array.isArray(v) && v.length === 10,
      "10 dataplanes visible on b",
    );
    await until(
      () => json(["get", "Mesh", "--server", zoneAdmin]),
      (v) => Array.isArray(v) && v.length === 20,
      "20 meshes in the zone",
    );
    const before = (await until(
      () => json(["inspect", "zones", "--server", b.admin]),
      (v) => (v as Zone[] | undefined)?.[0]?.online === true,
      "b shows zone-1 online",
    )) as Zone[];
    const holder = before[0]?.instance;
    expect(holder).toMatch(/^global-/);

    // Kill the instance that holds the zone (the zone dialed the first URL: a).
    a.process.child.kill("SIGKILL");
    await a.process.exited;
    await until(
      async () => zone.output.match(/connected to global "global"/g)?.length ?? 0,
      (n) => n >= 2,
      "the zone reconnected (to b)",
    );
    const after = (await until(
      () => json(["inspect", "zones", "--server", b.admin]),
      (v) =>
        (v as Zone[] | undefined)?.[0]?.online === true && (v as Zone[])[0]?.instance !== holder,
      "b holds zone-1",
    )) as Zone[];
    expect(after[0]?.instance).not.toBe(holder);
    // Nothing lost, and changes flow both ways through b.
    expect(
      (await json(["get", "Dataplane", "--mesh", "default", "--server", b.admin])) as unknown[],
    ).toHaveLength(10);
    expect(
      (
        await run(
          ["apply", "-f", "-", "--server", b.admin],
          "type: Mesh\nname: after-failover\nspec: {}\n",
        )
      ).code,
    ).toBe(0);
    expect(
      (
        await run(
          ["apply", "-f", "-", "--server", zoneAdmin],
          "type: Dataplane\nmesh: default\nname: dp-after\nspec:\n  address: 10.1.1.1\n",
        )
      ).code,
    ).toBe(0);
    await until(
      () => json(["get", "Mesh", "--server", zoneAdmin]),
      (v) => Array.isArray(v) && v.length === 21,
      "the new mesh reaches the zone",
    );
    await until(
      () => json(["get", "Dataplane", "--mesh", "default", "--server", b.admin]),
      (v) => Array.isArray(v) && v.length === 11,
      "the new dataplane reaches b",
    );

    // SIGKILL the lone global and start it again on its address and the same database: the zone
    // resumes by versions, so neither side resends anything.
    const zoneSentBefore =
      ((await json(["inspect", "zones", "--server", zoneAdmin])) as Zone[])[0]?.types.find(
        (t) => t.kind === "Dataplane",
      )?.resourcesSent ?? -1;
    expect(zoneSentBefore).toBeGreaterThanOrEqual(11);
    b.process.child.kill("SIGKILL");
    await b.process.exited;
    const c = await startGlobal(db.url, new URL(b.mux).host);
    await until(
      async () => zone.output.match(/connected to global "global"/g)?.length ?? 0,
      (n) => n >= 3,
      "the zone reconnected (to the restarted global)",
    );
    const resumed = (await until(
      () => json(["inspect", "zones", "--server", c.admin]),
      (v) => (v as Zone[] | undefined)?.[0]?.online === true,
      "the restarted global holds zone-1",
    )) as Zone[];
    expect((await json(["get", "Mesh", "--server", c.admin])) as unknown[]).toHaveLength(21);
    expect(
      (await json(["get", "Dataplane", "--mesh", "default", "--server", c.admin])) as unknown[],
    ).toHaveLength(11);
    // Give a resend time to show, then count: the global sent no Mesh, the zone no Dataplane.
    await new Promise((r) => setTimeout(r, 2_000));
    const global = ((await json(["inspect", "zones", "--server", c.admin])) as Zone[])[0];
    const own = ((await json(["inspect", "zones", "--server", zoneAdmin])) as Zone[])[0];
    console.log(
      `resume after restart: global resent ${global?.types.find((t) => t.kind === "Mesh")?.resourcesSent} Meshes, zone resent ${(own?.types.find((t) => t.kind === "Dataplane")?.resourcesSent ?? 0) - zoneSentBefore} Dataplanes`,
    );
    expect(resumed[0]?.online).toBe(true);
    expect(global?.types.find((t) => t.kind === "Mesh")?.resourcesSent).toBe(0);
    expect(own?.types.find((t) => t.kind === "Dataplane")?.resourcesSent).toBe(zoneSentBefore);
    writeFileSync(join(tmp, "done"), "ok");
  });
});
