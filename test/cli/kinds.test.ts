// Your own kinds in the CLI, no code: a kinds file over a descriptor set built
// by `buf build`, served by a real global; a zone with no --kinds learns them
// and syncs both ways; a zone whose kinds disagree is refused; bad kinds
// files stop the process before anything starts.
import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KdsProcess, run, until } from "./process.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "kds-mux-kinds-"));
const file = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

/** A kinds file listing `kinds` (YAML entries) over `descriptorSet`. */
const kindsFile = (name: string, kinds: string, descriptorSet = "kinds.binpb"): string =>
  file(name, `descriptorSet: ${descriptorSet}\nkinds:\n${kinds}`);
const gateway = (
  direction = "global-to-zone",
  scope = "cluster",
  message = "acme.v1.GatewaySpec",
) =>
  `  - kind: Gateway\n    message: ${message}\n    direction: ${direction}\n    scope: ${scope}\n`;
const workload =
  "  - kind: Workload\n    message: acme.v1.WorkloadSpec\n    direction: zone-to-global\n    scope: mesh\n";

beforeAll(() => {
  // The user's buf workspace: the own-kinds example's protos, built the way docs/cli.md says.
  cpSync(join(root, "examples/own-kinds/buf.yaml"), join(dir, "buf.yaml"));
  cpSync(join(root, "examples/own-kinds/proto"), join(dir, "proto"), { recursive: true });
  execFileSync(join(root, "node_modules/.bin/buf"), ["build", "-o", "kinds.binpb"], {
    cwd: dir,
    stdio: "pipe",
  });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("kds-mux global and zone with --kinds", () => {
  let global: KdsProcess;
  let zone: KdsProcess;
  /** The global's admin API. */
  let globalUrl: string;
  /** Where zones dial the global. */
  let muxUrl: string;
  let zoneUrl: string;

  /** Creates a zone token for `name` through the global's admin API; returns the token file. */
  async function zoneToken(name: string): Promise<string> {
    const r = await run(["generate", "zone-token", "--zone", name, "--server", globalUrl]);
    expect(r.code, r.stderr).toBe(0);
    return file(`${name}.token`, r.stdout);
  }

  beforeAll(async () => {
    const kinds = kindsFile("kinds.yaml", gateway() + workload);
    global = new KdsProcess([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--kinds",
      kinds,
    ]);
    const listening = await global.waitFor(
      /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
    );
    muxUrl = listening[1] as string;
    globalUrl = listening[2] as string;
    for (const name of ["zone-1", "zone-2"]) {
      expect(
        (
          await run(
            ["apply", "-f", "-", "--server", globalUrl],
            (
              await run(["generate", "zone", "--name", name])
            ).stdout,
          )
        ).code,
      ).toBe(0);
    }
    zone = new KdsProcess([
      "zone",
      "--name",
      "zone-1",
      "--global",
      muxUrl,
      "--token-file",
      await zoneToken("zone-1"),
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
    ]);
    zoneUrl = (
      await zone.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/)
    )[1] as string;
    await zone.waitFor(/learned 2 kinds from global "global"/);
  }, 180_000);

  afterAll(async () => {
    await zone?.stop();
    await global?.stop();
  });

  it("says at start which kinds each side uses", () => {
    expect(global.output).toContain(
      `kinds from ${join(dir, "kinds.yaml")}: Gateway (acme.v1.GatewaySpec, global-to-zone, cluster-scoped), Workload (acme.v1.WorkloadSpec, zone-to-global, mesh-scoped)`,
    );
    expect(zone.output).toContain(
      'no --kinds given: zone "zone-1" learns its kinds from the global',
    );
    expect(zone.output).toContain(
      'zone "zone-1" learned 2 kinds from global "global": Gateway (acme.v1.GatewaySpec, global-to-zone, cluster-scoped), Workload (acme.v1.WorkloadSpec, zone-to-global, mesh-scoped)',
    );
  });

  it("syncs both kinds both ways; apply, get, delete and types work on both sides", async () => {
    const gw = file(
      "gateway.yaml",
      "type: Gateway\nname: edge\nspec:\n  hosts: [a.example, b.example]\n  port: 443\n",
    );
    const applied = await run(["apply", "-f", gw, "--server", globalUrl]);
    expect(applied.stderr).toBe("");
    expect(applied.stdout).toContain("Gateway edge applied");
    const onZone = await until(
      () => run(["get", "Gateway", "edge", "--server", zoneUrl, "-o", "json"]),
      (r) => r.code === 0,
      "the Gateway on the zone",
    );
    expect(JSON.parse(onZone.stdout)).toMatchObject([
      { type: "Gateway", name: "edge", spec: { hosts: ["a.example", "b.example"], port: 443 } },
    ]);

    const wl = file(
      "workload.json",
      JSON.stringify({
        type: "Workload",
        mesh: "default",
        name: "web-1",
        spec: { address: "10.0.0.1", service: "web" },
      }),
    );
    expect((await run(["apply", "-f", wl, "--server", zoneUrl])).code).toBe(0);
    const onGlobal = await until(
      () => run(["get", "Workload", "--mesh", "default", "--server", globalUrl, "-o", "yaml"]),
      (r) => r.stdout.includes("zone-1.web-1"),
      "the Workload on the global",
    );
    expect(onGlobal.stdout).toMatch(/address: 10\.0\.0\.1/);

    for (const server of [globalUrl, zoneUrl]) {
      const types = JSON.parse((await run(["types", "--server", server, "-o", "json"])).stdout) as {
        kind: string;
        typeUrl: string;
        direction: string;
        scope: string;
      }[];
      expect(types).toContainEqual({
        kind: "Gateway",
        typeUrl: "type.googleapis.com/acme.v1.GatewaySpec",
        direction: "global-to-zone",
        scope: "cluster",
      });
      expect(types).toContainEqual({
        kind: "Workload",
        typeUrl: "type.googleapis.com/acme.v1.WorkloadSpec",
        direction: "zone-to-global",
        scope: "mesh",
      });
    }

    expect((await run(["delete", "Gateway", "edge", "--server", globalUrl])).stdout).toContain(
      "Gateway edge deleted",
    );
    await until(
      () => run(["get", "Gateway", "--server", zoneUrl, "-o", "json"]),
      (r) => r.code === 0 && (JSON.parse(r.stdout) as unknown[]).length === 0,
      "the Gateway gone from the zone",
    );
  }, 120_000); // about a dozen CLI runs, each a fresh process

  it("refuses a resource with a field its message does not have, naming the file and the field", async () => {
    const bad = file(
      "bad-gateway.yaml",
      "type: Gateway\nname: edge\nspec:\n  hosts: [a.example]\n  replicas: 3\n",
    );
    const r = await run(["apply", "-f", bad, "--server", globalUrl]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      `${bad}: Gateway "edge": the spec is not a valid acme.v1.GatewaySpec`,
    );
    expect(r.stderr).toContain('key "replicas" is unknown');
    expect((await run(["get", "Gateway", "edge", "--server", globalUrl])).code).toBe(1); // nothing was written
  });

  it("refuses a zone whose kinds disagree, naming the kind and both definitions; both sides keep the reason as the last error", async () => {
    const mismatch = kindsFile("mismatch.yaml", gateway("zone-to-global") + workload);
    const other = new KdsProcess([
      "zone",
      "--name",
      "zone-2",
      "--global",
      muxUrl,
      "--token-file",
      await zoneToken("zone-2"),
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--kinds",
      mismatch,
    ]);
    const definitions =
      'kind "Gateway": global "global" defines acme.v1.GatewaySpec, global-to-zone, cluster-scoped; zone "zone-2" defines acme.v1.GatewaySpec, zone-to-global, cluster-scoped';
    type Insight = {
      zone: string;
      online: boolean;
      lastEnd: { code: string; message: string } | null;
      lastError: { code: string; message: string; at: string } | null;
    };
    const inspect = async (server: string): Promise<Insight[]> =>
      JSON.parse(
        (await run(["inspect", "zones", "--server", server, "-o", "json"])).stdout,
      ) as Insight[];
    const zone2 = (zones: Insight[]): Insight | undefined => zones.find((z) => z.zone === "zone-2");
    const refused = (z: Insight | undefined): boolean =>
      z?.lastError?.code === "kinds_refused" && z.lastError.message.includes(definitions);
    let refusedAt: string | undefined;
    try {
      const otherUrl = (
        await other.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/)
      )[1] as string;
      await other.waitFor(
        new RegExp(
          `refuses the kinds of global "global": ${definitions.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}[\\s\\S]*retries in`,
        ),
      );
      await global.waitFor(/zone "zone-2" refused the kinds of this global/);
      expect(global.output).toContain(definitions);
      // Both sides name the refusal as the zone's last error, whatever its sessions do meanwhile.
      refusedAt = zone2(
        await until(
          () => inspect(globalUrl),
          (zones) => refused(zone2(zones)),
          "the global's last error of zone-2",
        ),
      )?.lastError?.at;
      await until(
        () => inspect(otherUrl),
        (zones) => refused(zone2(zones)),
        "zone-2's own last error",
      );
    } finally {
      expect(await other.stop()).toBe(0);
    }
    // The zone has stopped, perhaps mid-session (the end is then "the connection was lost"): that end shows in
    // lastEnd, and the refusal stays the last error. Waiting for zone-2 to be offline waits for the last session's end.
    const after = zone2(
      await until(
        () => inspect(globalUrl),
        (zones) => zone2(zones)?.online === false && zone2(zones)?.lastEnd !== null,
        "zone-2 offline on the global",
      ),
    );
    expect(refused(after)).toBe(true);
    expect(Date.parse(after?.lastError?.at ?? "")).toBeGreaterThanOrEqual(
      Date.parse(refusedAt ?? ""),
    ); // the same refusal or a later one
    const table = (await run(["inspect", "zones", "--server", globalUrl])).stdout;
    expect(table).toContain(`zone-2: last error (kinds_refused, `);
    expect(table).toContain(definitions);
  }, 60_000);
});

describe("bad kinds files", () => {
  const cases: [string, () => string, string][] = [
    [
      "a kinds file that does not exist",
      () => join(dir, "nope.yaml"),
      "cannot read the kinds file (ENOENT)",
    ],
    [
      "a missing descriptor set",
      () => kindsFile("no-set.yaml", gateway(), "missing.binpb"),
      `cannot read the descriptor set missing.binpb (${join(dir, "missing.binpb")}: ENOENT); build it with \`buf build -o missing.binpb\``,
    ],
    [
      "a descriptor set that is not one",
      () => kindsFile("not-a-set.yaml", gateway(), "not-a-set.yaml"),
      "descriptor set not-a-set.yaml: not a FileDescriptorSet",
    ],
    [
      "an unknown message",
      () => kindsFile("unknown.yaml", gateway("global-to-zone", "cluster", "acme.v1.GateSpec")),
      "kinds[0] (Gateway): message acme.v1.GateSpec is not in kinds.binpb, which defines acme.v1.GatewaySpec, acme.v1.WorkloadSpec",
    ],
    [
      "a duplicate kind",
      () => kindsFile("duplicate.yaml", gateway() + workload + gateway()),
      'kind "Gateway" is listed twice (kinds[0] and kinds[2])',
    ],
    [
      "a bad direction",
      () => kindsFile("direction.yaml", gateway("both-ways")),
      'kinds[0] (Gateway): direction "both-ways" must be one of global-to-zone, zone-to-global, zone-to-zones, local',
    ],
    [
      "a bad scope",
      () => kindsFile("scope.yaml", gateway("global-to-zone", "namespace")),
      'kinds[0] (Gateway): scope "namespace" must be one of cluster, mesh',
    ],
    [
      "one message for two kinds",
      () => kindsFile("same-message.yaml", gateway() + gateway().replace("Gateway", "Edge")),
      'message acme.v1.GatewaySpec is already the spec of kind "Gateway"',
    ],
  ];

  it.each(cases)(
    "refuses %s, naming the file and the problem, and starts nothing",
    async (_what, make, problem) => {
      const kinds = make();
      const r = await run([
        "global",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--kinds",
        kinds,
      ]); // default store: nothing may start it
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`error: ${kinds}: ${problem}`);
      expect(r.stdout + r.stderr).not.toContain("listening");
    },
  );

  it("refuses a bad kinds file in a zone too, before it dials", async () => {
    const kinds = kindsFile("zone-direction.yaml", gateway("sideways"));
    const r = await run([
      "zone",
      "--name",
      "zone-1",
      "--global",
      "http://127.0.0.1:1",
      "--admin-listen",
      "127.0.0.1:0",
      "--kinds",
      kinds,
    ]); // default store: nothing may start it
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(
      `error: ${kinds}: kinds[0] (Gateway): direction "sideways" must be one of global-to-zone, zone-to-global, zone-to-zones, local`,
    );
    expect(r.stdout + r.stderr).not.toContain("listening");
  });
});
