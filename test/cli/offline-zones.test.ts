// Offline zones and the reset guard with real processes: one global
// (--zone-stale-after 2s) and three zones. Zone A publishes 12 resources of
// a zone-to-zones kind served while stale (TrafficPolicy here) and 3 of one
// withheld while stale (ZoneIngress, whenStale: withhold).
// - SIGKILL A: after the stale time its resources show stale on the global
//   (inspect zones, get, the status page, metrics) and in B and C, which
//   lose the withheld kind and keep the other.
// - Restart A with its data dir intact: nothing is held, and A sends the
//   global nothing (no resource in the session's counters); stale clears.
// - SIGKILL A, restart it on an empty store: the global holds the 12
//   deletions (the 3 below the guard's minimum flow), reports the hold, and
//   B and C keep the copies; `kds-mux zone accept-reset` applies them.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { KdsProcess, run, until } from "./process.ts";

const dir = mkdtempSync(join(tmpdir(), "kds-offline-zones-"));
chmodSync(dir, 0o755); // as root, the embedded server's own user must pass through
const processes: KdsProcess[] = [];
afterAll(async () => {
  for (const p of processes) await p.stop();
  rmSync(dir, { recursive: true, force: true });
});

const descriptorSet = fileURLToPath(
  new URL("../../examples/example-kinds/kinds.binpb", import.meta.url),
);
const kindsFile = join(dir, "kinds.yaml");
writeFileSync(
  kindsFile,
  `descriptorSet: ${descriptorSet}
kinds:
  - kind: Mesh
    message: kds.example.v1.MeshSpec
    direction: global-to-zone
    scope: cluster
  - kind: TrafficPolicy
    message: kds.example.v1.TrafficPolicySpec
    direction: zone-to-zones
    scope: cluster
  - kind: ZoneIngress
    message: kds.example.v1.ZoneIngressSpec
    direction: zone-to-zones
    scope: cluster
    whenStale: withhold
`,
);

interface Doc {
  readonly name: string;
  readonly labels?: Record<string, string>;
}
interface Insight {
  readonly zone: string;
  readonly online: boolean;
  readonly stale: { lastOnline: string; resources: number } | null;
  readonly heldReset: { kinds: { kind: string; held: number; of: number }[] } | null;
  readonly types: {
    kind: string;
    session: { resourcesReceived: number };
  }[];
}

const get = async (kind: string, server: string): Promise<Doc[] | undefined> => {
  const r = await run(["get", kind, "--server", server, "-o", "json"]);
  return r.code === 0 ? (JSON.parse(r.stdout) as Doc[]) : undefined;
};
const fromA = (docs: Doc[] | undefined): Doc[] =>
  (docs ?? []).filter((d) => d.labels?.["kds.io/zone"] === "zone-a");
const stale = (d: Doc): boolean => d.labels?.["kds.io/origin-last-online"] !== undefined;
const insight = async (server: string): Promise<Insight | undefined> => {
  const r = await run(["inspect", "zones", "--server", server, "-o", "json"]);
  return r.code === 0
    ? (JSON.parse(r.stdout) as Insight[]).find((z) => z.zone === "zone-a")
    : undefined;
};

describe("offline zones and the reset guard across one global and three zones", {
  timeout: 420_000,
}, () => {
  it("marks a killed zone stale everywhere, resumes it without resending, and holds its reset", async () => {
    const t0 = Date.now();
    const phase = (what: string): void =>
      console.log(`offline-zones: ${what} after ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const global = new KdsProcess([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--insecure-no-zone-auth",
      "--kinds",
      kindsFile,
      "--zone-stale-after",
      "2s",
      "--log-level",
      "info",
    ]);
    processes.push(global);
    const m = await global.waitFor(
      /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
      90_000,
    );
    const [muxUrl, adminUrl] = [m[1] as string, m[2] as string];
    const zones = ["zone-a", "zone-b", "zone-c"];
    expect(
      (
        await run(
          ["apply", "-f", "-", "--server", adminUrl],
          zones.map((z) => `type: Zone\nname: ${z}\nspec:\n  enabled: true\n`).join("---\n"),
        )
      ).code,
    ).toBe(0);
    const startZone = (name: string, store: string[]): KdsProcess => {
      const p = new KdsProcess([
        "zone",
        "--name",
        name,
        "--global",
        muxUrl,
        "--admin-listen",
        "127.0.0.1:0",
        ...store,
        "--log-level",
        "info",
      ]);
      processes.push(p);
      return p;
    };
    const adminOf = async (p: KdsProcess): Promise<string> =>
      (await p.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/, 120_000))[1] as string;
    const dataDir = ["--data-dir", join(dir, "zone-a")];
    let a = startZone("zone-a", dataDir);
    const b = startZone("zone-b", ["--store", "memory"]);
    const c = startZone("zone-c", ["--store", "memory"]);
    let aAdmin = await adminOf(a);
    const others = [await adminOf(b), await adminOf(c)];
    const docs = [
      ...Array.from(
        { length: 12 },
        (_, i) => `type: TrafficPolicy\nname: tp-${i}\nspec:\n  timeoutMs: ${1000 + i}\n`,
      ),
      ...Array.from(
        { length: 3 },
        (_, i) => `type: ZoneIngress\nname: in-${i}\nspec:\n  address: 10.0.0.${i}\n`,
      ),
    ];
    const applied = await run(["apply", "-f", "-", "--server", aAdmin], docs.join("---\n"));
    expect(applied.code, applied.stderr).toBe(0);
    const inOthers = (tp: number, zi: number, ok: (d: Doc) => boolean = () => true) =>
      Promise.all(
        others.map(async (server) => {
          await until(
            async () => [
              fromA(await get("TrafficPolicy", server)),
              fromA(await get("ZoneIngress", server)),
            ],
            ([t, z]) => t?.length === tp && t.every(ok) && z?.length === zi && z.every(ok),
            `${tp} TrafficPolicy and ${zi} ZoneIngress of zone-a at ${server}`,
            90_000,
          );
        }),
      );
    await inOthers(12, 3, (d) => !stale(d));
    phase("zone-a's resources reached zone-b and zone-c");

    // SIGKILL zone-a: stale after 2 s, on the global and in the others; ZoneIngress withheld from them.
    a.child.kill("SIGKILL");
    await a.exited;
    const staleA = await until(
      () => insight(adminUrl),
      (z) => z?.online === false && z.stale !== null,
      "zone-a stale in inspect zones",
      60_000,
    );
    expect(staleA?.stale?.resources).toBe(15);
    const onGlobal = [
      ...fromA(await get("TrafficPolicy", adminUrl)),
      ...fromA(await get("ZoneIngress", adminUrl)),
    ];
    expect(onGlobal).toHaveLength(15);
    expect(onGlobal.every(stale)).toBe(true);
    await inOthers(12, 0, stale);
    const status = (await (await fetch(`${adminUrl}/status.json`)).json()) as {
      zones: { zone: string; stale: { resources: number } | null }[];
    };
    expect(status.zones.find((z) => z.zone === "zone-a")?.stale?.resources).toBe(15);
    const metrics = await (await fetch(`${adminUrl}/metrics`)).text();
    expect(metrics).toMatch(/kds_stale_resources\{[^}]*kind="TrafficPolicy"[^}]*\} 12/);
    expect(metrics).toMatch(/kds_stale_resources\{[^}]*kind="ZoneIngress"[^}]*\} 3/);
    phase("zone-a stale on the global and in zone-b and zone-c");

    // Restart zone-a on its data dir: nothing held, nothing sent up again; stale clears everywhere.
    a = startZone("zone-a", dataDir);
    aAdmin = await adminOf(a);
    const back = await until(
      () => insight(adminUrl),
      (z) => z?.online === true && z.stale === null,
      "zone-a online and no longer stale",
      90_000,
    );
    await inOthers(12, 3, (d) => !stale(d));
    const resumed = await insight(adminUrl);
    expect(resumed?.heldReset).toBeNull();
    for (const kind of ["TrafficPolicy", "ZoneIngress"])
      expect(
        resumed?.types.find((t) => t.kind === kind)?.session.resourcesReceived,
        `${kind} resources zone-a sent after its restart`,
      ).toBe(0);
    expect(back?.online).toBe(true);
    phase("zone-a resumed from its data dir without resending");

    // SIGKILL it again and restart it on an empty store: the 12 deletions are held, the 3 below the minimum flow.
    a.child.kill("SIGKILL");
    await a.exited;
    a = startZone("zone-a", ["--store", "memory"]);
    const held = await until(
      () => insight(adminUrl),
      (z) => z?.online === true && z.heldReset !== null,
      "zone-a's reset held",
      90_000,
    );
    expect(held?.heldReset?.kinds).toEqual([{ kind: "TrafficPolicy", held: 12, of: 12 }]);
    await global.waitFor(/RESET HELD: zone "zone-a"/, 10_000);
    await inOthers(12, 0);
    expect(fromA(await get("TrafficPolicy", adminUrl))).toHaveLength(12);
    const table = await run(["inspect", "zones", "--server", adminUrl]);
    expect(table.stdout).toMatch(/zone-a: RESET HELD/);
    expect(await (await fetch(`${adminUrl}/metrics`)).text()).toMatch(
      /kds_held_deletions\{[^}]*kind="TrafficPolicy"[^}]*\} 12/,
    );
    phase("zone-a's reset held; zone-b and zone-c keep the copies");

    const accepted = await run(["zone", "accept-reset", "zone-a", "--server", adminUrl]);
    expect(accepted.code, accepted.stderr).toBe(0);
    expect(accepted.stdout).toMatch(/12 held deletions applied/);
    await inOthers(0, 0);
    expect(fromA(await get("TrafficPolicy", adminUrl))).toHaveLength(0);
    expect((await insight(adminUrl))?.heldReset).toBeNull();
    phase("accept-reset applied the deletions everywhere");
  });
});
