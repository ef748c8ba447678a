// Zone-to-zones kinds with real processes: one global and three zones, each
// zone publishing two ZoneIngress resources (examples/example-kinds). Each
// zone ends up with the four of the other zones, attributed to their origin,
// and none of its own echoed back; a copy cannot be changed where it was
// copied to; a deletion in a zone leaves the global and the other zones; a
// disabled zone's resources leave the others and come back when it is enabled.
import { afterAll, describe, expect, it } from "vitest";
import { KdsProcess, run, until, startDevGlobal } from "./process.ts";

const processes: KdsProcess[] = [];
afterAll(async () => {
  for (const p of processes) await p.stop();
});

interface Doc {
  readonly name: string;
  readonly labels?: Record<string, string>;
}

const get = async (server: string): Promise<Doc[] | undefined> => {
  const r = await run(["get", "ZoneIngress", "--server", server, "-o", "json"]);
  return r.code === 0 ? (JSON.parse(r.stdout) as Doc[]) : undefined;
};

const names = (docs: Doc[] | undefined): string[] => (docs ?? []).map((d) => d.name).sort();

const ZONES = ["zone-a", "zone-b", "zone-c"] as const;

/** What zone `zone` should hold: its own two, and the two of each other zone (minus `gone`). */
function expected(zone: string, others: readonly string[], gone: readonly string[] = []): string[] {
  const own = [`${zone.slice(5)}-ingress-1`, `${zone.slice(5)}-ingress-2`];
  const copies = others
    .filter((z) => z !== zone)
    .flatMap((z) => [`${z}.${z.slice(5)}-ingress-1`, `${z}.${z.slice(5)}-ingress-2`]);
  return [...own, ...copies].filter((n) => !gone.includes(n)).sort();
}

describe("zone-to-zones kinds across one global and three zones", { timeout: 300_000 }, () => {
  it("reach every other zone, never their origin, not while the origin is disabled", async () => {
    const t0 = Date.now();
    const phase = (what: string): void =>
      console.log(`cross-zone: ${what} after ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const devGlobal = await startDevGlobal(processes);
    const [muxUrl, adminUrl] = [devGlobal.zonesUrl, devGlobal.adminUrl];
    const zoneDoc = (name: string, enabled: boolean): string =>
      `type: Zone\nname: ${name}\nspec:\n  enabled: ${enabled}\n`;
    expect(
      (
        await run(
          ["apply", "-f", "-", "--server", adminUrl],
          ZONES.map((z) => zoneDoc(z, true)).join("---\n"),
        )
      ).code,
    ).toBe(0);

    const admin = new Map<string, string>();
    for (const zone of ZONES) {
      const p = new KdsProcess([
        "zone",
        "--name",
        zone,
        "--global",
        muxUrl,
        "--admin-listen",
        "127.0.0.1:0",
        "--store",
        "memory",
      ]);
      processes.push(p);
      admin.set(
        zone,
        (
          await p.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/, 90_000)
        )[1] as string,
      );
    }
    const server = (zone: string): string => admin.get(zone) as string;
    for (const zone of ZONES) {
      const short = zone.slice(5);
      const docs = [1, 2].map(
        (i) =>
          `type: ZoneIngress\nname: ${short}-ingress-${i}\nspec:\n  address: 10.${i}.0.1\n  port: 10001\n  services: [web-${short}]\n`,
      );
      const applied = await run(["apply", "-f", "-", "--server", server(zone)], docs.join("---\n"));
      expect(applied.code, applied.stderr).toBe(0);
    }

    phase("zones published");
    // The global holds all six, each attributed to its origin zone.
    const onGlobal = await until(
      () => get(adminUrl),
      (v) => v?.length === 6,
      "six ZoneIngress on the global",
      60_000,
    );
    for (const d of onGlobal ?? [])
      expect(d.name.startsWith(`${d.labels?.["kds.io/zone"]}.`)).toBe(true);
    // Each zone: its own two, the four of the others, none of its own back; copies attributed to their origin.
    const held = await Promise.all(
      ZONES.map((zone) =>
        until(
          () => get(server(zone)),
          (v) => names(v).join() === expected(zone, ZONES).join(),
          `${zone}'s own and the others' ZoneIngress`,
          60_000,
        ),
      ),
    );
    for (const [i, zone] of ZONES.entries()) {
      for (const d of held[i] ?? []) {
        const copy = d.name.includes(".");
        expect(d.labels?.["kds.io/origin"]).toBe(copy ? "global" : undefined);
        if (copy) expect(d.name.startsWith(`${d.labels?.["kds.io/zone"]}.`)).toBe(true);
        if (copy) expect(d.labels?.["kds.io/zone"]).not.toBe(zone);
      }
    }

    phase("every zone holds the others' resources");
    // A copy is read-only where it was copied to.
    const refused = await run([
      "delete",
      "ZoneIngress",
      "zone-a.a-ingress-1",
      "--server",
      server("zone-b"),
    ]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/read-only copy of a resource of zone "zone-a"/);
    const overwrite = await run(
      ["apply", "-f", "-", "--server", server("zone-b")],
      "type: ZoneIngress\nname: zone-a.a-ingress-1\nspec:\n  address: 1.1.1.1\n",
    );
    expect(overwrite.code).not.toBe(0);
    expect(overwrite.stderr).toMatch(/read-only copy/);

    // Delete one in zone-a: it leaves the global, zone-b and zone-c.
    expect(
      (await run(["delete", "ZoneIngress", "a-ingress-2", "--server", server("zone-a")])).code,
    ).toBe(0);
    await until(
      () => get(adminUrl),
      (v) => v?.length === 5 && !names(v).includes("zone-a.a-ingress-2"),
      "zone-a.a-ingress-2 gone from the global",
      120_000,
    );
    await Promise.all(
      ["zone-b", "zone-c"].map((zone) =>
        until(
          () => get(server(zone)),
          (v) => names(v).join() === expected(zone, ZONES, ["zone-a.a-ingress-2"]).join(),
          `zone-a.a-ingress-2 gone from ${zone}`,
          60_000,
        ),
      ),
    );
    phase("the deletion left the global and the other zones");
    // Disable zone-a: its resources leave zone-b and zone-c (the global keeps them); enable it: they return.
    expect(
      (await run(["apply", "-f", "-", "--server", adminUrl], zoneDoc("zone-a", false))).code,
    ).toBe(0);
    await Promise.all(
      ["zone-b", "zone-c"].map((zone) =>
        until(
          () => get(server(zone)),
          (v) =>
            names(v).join() === expected(zone, ["zone-b", "zone-c"], ["zone-a.a-ingress-2"]).join(),
          `zone-a's ZoneIngress gone from ${zone}`,
          60_000,
        ),
      ),
    );
    phase("zone-a withheld");
    expect(await get(adminUrl)).toHaveLength(5);
    expect(
      (await run(["apply", "-f", "-", "--server", adminUrl], zoneDoc("zone-a", true))).code,
    ).toBe(0);
    await Promise.all(
      ["zone-b", "zone-c"].map((zone) =>
        until(
          () => get(server(zone)),
          (v) => names(v).join() === expected(zone, ZONES, ["zone-a.a-ingress-2"]).join(),
          `zone-a's ZoneIngress back in ${zone}`,
          60_000,
        ),
      ),
    );

    phase("zone-a's resources came back");
    expect(names(await get(server("zone-a")))).toEqual(expected("zone-a", ZONES, ["a-ingress-2"]));
  });
});
