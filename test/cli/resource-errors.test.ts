// Per-resource errors with real processes: a zone sends 100 Dataplanes, one
// of which the global cannot store (its name on the global, zone-1.<name>,
// is longer than 253 characters). The global stores the 99 and ACKs with the
// one it rejected; the zone's inspect zones names it and why (the zone reads
// degraded), and its log says so; once the zone deletes it, the error clears
// (healthy again).
import { afterAll, describe, expect, it } from "vitest";
import { KdsProcess, run, until, startDevGlobal } from "./process.ts";

const processes: KdsProcess[] = [];
afterAll(async () => {
  for (const p of processes) await p.stop();
});

interface TypeDoc {
  readonly kind: string;
  readonly rejectedResources: { key: string; reason: string }[];
}

describe("per-resource errors", { timeout: 300_000 }, () => {
  it("store the good resources, name the bad one to the sender, and clear once it is fixed", async () => {
    const devGlobal = await startDevGlobal(processes);
    const [muxUrl, adminUrl] = [devGlobal.zonesUrl, devGlobal.adminUrl];
    expect(
      (
        await run(
          ["apply", "-f", "-", "--server", adminUrl],
          "type: Zone\nname: zone-1\nspec:\n  enabled: true\n",
        )
      ).code,
    ).toBe(0);
    const zone = new KdsProcess([
      "zone",
      "--name",
      "zone-1",
      "--global",
      muxUrl,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
    ]);
    processes.push(zone);
    const zoneAdmin = (
      await zone.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/, 90_000)
    )[1] as string;

    const long = `dp-${"x".repeat(247)}`; // 250 characters: fine in the zone, 257 as zone-1.<name> on the global
    const docs = Array.from(
      { length: 99 },
      (_, i) =>
        `type: Dataplane\nmesh: default\nname: dp-${i}\nspec:\n  address: 10.0.${Math.floor(i / 250)}.${i % 250}\n`,
    );
    docs.splice(
      42,
      0,
      `type: Dataplane\nmesh: default\nname: ${long}\nspec:\n  address: 10.9.9.9\n`,
    );
    const applied = await run(["apply", "-f", "-", "--server", zoneAdmin], docs.join("---\n"));
    expect(applied.code, applied.stderr).toBe(0);

    const count = async (): Promise<number | undefined> => {
      const r = await run([
        "get",
        "Dataplane",
        "--mesh",
        "default",
        "--server",
        adminUrl,
        "-o",
        "json",
      ]);
      return r.code === 0 ? (JSON.parse(r.stdout) as unknown[]).length : undefined;
    };
    await until(count, (n) => n === 99, "99 Dataplanes on the global", 60_000);
    const dataplaneOnZone = async (): Promise<TypeDoc | undefined> => {
      const r = await run(["inspect", "zones", "--server", zoneAdmin, "-o", "json"]);
      if (r.code !== 0) return undefined;
      return (JSON.parse(r.stdout) as { types: TypeDoc[] }[])[0]?.types.find(
        (t) => t.kind === "Dataplane",
      );
    };
    // The sender (the zone) names the rejected one and why.
    const rejected = await until(
      dataplaneOnZone,
      (t) => (t?.rejectedResources.length ?? 0) > 0,
      "the zone to see the rejected Dataplane",
      60_000,
    );
    expect(rejected?.rejectedResources).toEqual([
      {
        key: `default/${long}`,
        reason: expect.stringMatching(
          /^rejected by the peer: cannot be stored on this side: .*253/,
        ) as unknown as string,
      },
    ]);
    await zone.waitFor(
      new RegExp(`the global rejected Dataplane "default/${long}" and applied the rest`),
      30_000,
    );
    const table = await run(["inspect", "zones", "--server", zoneAdmin]);
    expect(table.stdout).toContain(`left out default/${long}: rejected by the peer`);
    // The zone's verdict: degraded, naming the rejected resource.
    expect(table.stdout).toMatch(/^zone-1 +online +degraded /m);
    expect(table.stdout).toContain(`zone-1: DEGRADED for `);
    expect(table.stdout).toContain(`Dataplane: the peer rejects 1 resource (default/${long}: `);
    expect(await count()).toBe(99);

    // Fixing it (here: deleting it in the zone) clears the error on the sender.
    expect(
      (await run(["delete", "Dataplane", long, "--mesh", "default", "--server", zoneAdmin])).code,
    ).toBe(0);
    await until(
      dataplaneOnZone,
      (t) => t !== undefined && t.rejectedResources.length === 0,
      "the error to clear",
      60_000,
    );
    await zone.waitFor(
      new RegExp(`the global no longer rejects Dataplane "default/${long}"`),
      30_000,
    );
    const healthy = await run(["inspect", "zones", "--state", "healthy", "--server", zoneAdmin]);
    expect(healthy.stdout).toMatch(/^zone-1 +online +healthy /m);
  });
});
