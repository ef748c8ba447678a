// Delivery to chosen zones, with real processes: one global and three zones
// labelled region=eu (zone-a, zone-b) and region=us (zone-c). A Mesh whose
// kds.io/zones label selects region=eu reaches only the eu zones; relabelling
// a zone makes it arrive or leave; a changed selector moves it; an invalid
// selector is refused at apply, naming the problem, and nothing is written.
import { afterAll, describe, expect, it } from "vitest";
import { KdsProcess, run, until, startDevGlobal } from "./process.ts";

const processes: KdsProcess[] = [];
afterAll(async () => {
  for (const p of processes) await p.stop();
});

const meshes = async (server: string): Promise<string[] | undefined> => {
  const r = await run(["get", "Mesh", "--server", server, "-o", "json"]);
  return r.code === 0
    ? (JSON.parse(r.stdout) as { name: string }[]).map((m) => m.name).sort()
    : undefined;
};

const zoneDoc = (name: string, region: string): string =>
  `type: Zone\nname: ${name}\nlabels:\n  region: ${region}\nspec:\n  enabled: true\n`;
const meshDoc = (name: string, selector?: string): string =>
  `type: Mesh\nname: ${name}\n${selector === undefined ? "" : `labels:\n  kds.io/zones: "${selector}"\n`}spec:\n  mtls: true\n`;

describe("zone selectors across one global and three zones", { timeout: 300_000 }, () => {
  it("send a resource only to the zones it selects, live as labels and selectors change", async () => {
    const t0 = Date.now();
    const phase = (what: string): void =>
      console.log(`zone-selectors: ${what} after ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const devGlobal = await startDevGlobal(processes);
    const [muxUrl, adminUrl] = [devGlobal.zonesUrl, devGlobal.adminUrl];
    const apply = (doc: string): Promise<{ code: number | null; stdout: string; stderr: string }> =>
      run(["apply", "-f", "-", "--server", adminUrl], doc);
    expect(
      (
        await apply(
          [zoneDoc("zone-a", "eu"), zoneDoc("zone-b", "eu"), zoneDoc("zone-c", "us")].join("---\n"),
        )
      ).code,
    ).toBe(0);
    const admin = new Map<string, string>();
    for (const zone of ["zone-a", "zone-b", "zone-c"]) {
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
    const holds = (want: Record<string, string[]>, what: string): Promise<unknown> =>
      Promise.all(
        Object.entries(want).map(([zone, names]) =>
          until(
            () => meshes(admin.get(zone) as string),
            (v) => v?.join() === names.join(),
            `${what}: ${zone} holds ${names.join(", ")}`,
            60_000,
          ),
        ),
      );

    // An invalid selector is refused at apply, with the reason; nothing of that apply is written.
    const refused = await apply(
      [meshDoc("fine"), meshDoc("broken", "region in (eu")].join("---\n"),
    );
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(
      /Mesh "broken": label kds\.io\/zones "region in \(eu": leaves a parenthesis open\. Write requirements separated by commas/,
    );
    expect(await meshes(adminUrl)).toEqual([]);

    expect(
      (await apply([meshDoc("everywhere"), meshDoc("eu-only", "region=eu")].join("---\n"))).code,
    ).toBe(0);
    await holds(
      {
        "zone-a": ["eu-only", "everywhere"],
        "zone-b": ["eu-only", "everywhere"],
        "zone-c": ["everywhere"],
      },
      "region=eu",
    );
    phase("eu-only reached the eu zones only");

    // Relabel: zone-c joins eu (it arrives there), zone-a leaves it (it leaves there).
    const relabelled = Date.now();
    expect(
      (await apply([zoneDoc("zone-c", "eu"), zoneDoc("zone-a", "us")].join("---\n"))).code,
    ).toBe(0);
    await holds(
      {
        "zone-a": ["everywhere"],
        "zone-b": ["eu-only", "everywhere"],
        "zone-c": ["eu-only", "everywhere"],
      },
      "after relabelling",
    );
    phase(
      `relabelled zones got or lost eu-only (${Date.now() - relabelled} ms from apply to seen, CLI polling included)`,
    );

    // A changed selector: by zone name.
    expect((await apply(meshDoc("eu-only", "kds.io/zone in (zone-a, zone-c)"))).code).toBe(0);
    await holds(
      {
        "zone-a": ["eu-only", "everywhere"],
        "zone-b": ["everywhere"],
        "zone-c": ["eu-only", "everywhere"],
      },
      "selector by zone names",
    );
    phase("a changed selector moved eu-only");
  });
});
