// The kds-mux executable, as operators use it: real processes on loopback.
import * as grpc from "@grpc/grpc-js";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseMetrics } from "../observe/scrape.ts";
import { KdsProcess, run, until } from "./process.ts";

const dir = mkdtempSync(join(tmpdir(), "kds-mux-cli-"));
const file = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

/** Creates a zone token for `zone` on the global whose admin API is `server`; returns the token file. */
async function zoneToken(server: string, zone: string): Promise<string> {
  const r = await run(["generate", "zone-token", "--zone", zone, "--server", server]);
  expect(r.code, r.stderr).toBe(0);
  expect(r.stdout, "redirected, the token is printed with no whitespace around it").toMatch(
    /^[\w-]+\.[\w-]+\.[\w-]+$/,
  );
  return file(`${zone}.token`, r.stdout);
}

// Each test spawns several processes; on a loaded 2-core machine one spawn can take seconds.
describe("kds-mux CLI", { timeout: 120_000 }, () => {
  let global: KdsProcess;
  let zone: KdsProcess;
  /** The global's admin API. */
  let globalUrl: string;
  /** Where zones dial the global. */
  let muxUrl: string;
  let zoneUrl: string;

  beforeAll(async () => {
    global = new KdsProcess([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
    ]);
    const listening = await global.waitFor(
      /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
    );
    muxUrl = listening[1] as string;
    globalUrl = listening[2] as string;
    const registered = await run(
      ["apply", "-f", "-", "--server", globalUrl],
      (await run(["generate", "zone", "--name", "zone-1"])).stdout,
    );
    expect(registered.code).toBe(0);
    zone = new KdsProcess([
      "zone",
      "--name",
      "zone-1",
      "--global",
      muxUrl,
      "--token-file",
      await zoneToken(globalUrl, "zone-1"),
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
    ]);
    zoneUrl = (
      await zone.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/)
    )[1] as string;
    await zone.waitFor(/connected to global "global"/);
  }, 180_000);

  afterAll(async () => {
    await zone?.stop();
    await global?.stop();
  });

  it("tells a zone that dials the admin port which port to dial instead, with a kds-error-code", async () => {
    for (const path of [
      "/kds.mux.v1.MultiplexService/StreamMessage",
      "/kds.mux.v1.HalfDuplexService/Pull",
    ]) {
      const r = await fetch(`${globalUrl}${path}`, {
        method: "POST",
        headers: { "content-type": "application/grpc", "client-id": "zone-1" },
        body: new Uint8Array(0),
      });
      expect(r.headers.get("kds-error-code"), path).toBe("invalid_argument");
      expect(r.headers.get("grpc-status"), path).toBe("3");
      const message = decodeURIComponent(r.headers.get("grpc-message") ?? "");
      expect(message, path).toContain(
        "this address is the global's admin API (kds-mux global --admin-listen, default port 5681)",
      );
      expect(message, path).toContain("kds-mux global --listen (default port 5685)");
    }
  });

  it("answers a grpc-js zone stream on the admin port with InvalidArgument and the message, not INTERNAL (Trailers-Only)", async () => {
    const client = new grpc.Client(
      globalUrl.replace(/^http:\/\//, ""),
      grpc.credentials.createInsecure(),
    );
    try {
      const status = await new Promise<grpc.StatusObject>((resolve, reject) => {
        const metadata = new grpc.Metadata();
        metadata.set("client-id", "zone-1");
        const call = client.makeBidiStreamRequest(
          "/kds.mux.v1.MultiplexService/StreamMessage",
          (b: Buffer) => b,
          (b: Buffer) => b,
          metadata,
        );
        const timer = setTimeout(() => reject(new Error("no status within 20 s")), 20_000);
        call.on("status", (s: grpc.StatusObject) => {
          clearTimeout(timer);
          resolve(s);
        });
        call.on("error", () => undefined); // the status event carries the same outcome
        call.on("data", () => undefined);
      });
      expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(status.details).toContain("this address is the global's admin API");
      expect(status.metadata.get("kds-error-code")).toEqual(["invalid_argument"]);
    } finally {
      client.close();
    }
  });

  it("syncs a resource applied on the global to the zone", async () => {
    const mesh = file(
      "mesh.yaml",
      "type: Mesh\nname: default\nspec:\n  mtls: true\n---\ntype: TrafficPolicy\nmesh: default\nname: timeouts\nspec:\n  timeoutMs: 1500\n",
    );
    const applied = await run(["apply", "-f", mesh, "--server", globalUrl]);
    expect(applied.stderr).toBe("");
    expect(applied.stdout).toContain("Mesh default applied");
    const got = await until(
      () => run(["get", "TrafficPolicy", "--server", zoneUrl, "-o", "json"]),
      (r) => r.code === 0 && (JSON.parse(r.stdout) as unknown[]).length === 1,
      "the policy on the zone",
    );
    const [policy] = JSON.parse(got.stdout) as {
      type: string;
      name: string;
      mesh: string;
      labels: Record<string, string>;
      spec: { timeoutMs: number };
    }[];
    expect(policy).toMatchObject({
      type: "TrafficPolicy",
      name: "timeouts",
      mesh: "default",
      spec: { timeoutMs: 1500 },
    });
    expect(policy?.labels["kds.io/origin"]).toBe("global");
  });

  it("syncs a resource applied on the zone to the global, attributed to the zone", async () => {
    const dp = file(
      "dp.json",
      JSON.stringify({
        type: "Dataplane",
        mesh: "default",
        name: "web-1",
        labels: { app: "web" },
        spec: { address: "10.0.0.1", service: "web", port: 8080 },
      }),
    );
    expect((await run(["apply", "-f", dp, "--server", zoneUrl])).code).toBe(0);
    const got = await until(
      () => run(["get", "Dataplane", "--server", globalUrl, "-o", "json"]),
      (r) => r.code === 0 && (JSON.parse(r.stdout) as unknown[]).length === 1,
      "the dataplane on the global",
    );
    const [resource] = JSON.parse(got.stdout) as { name: string; labels: Record<string, string> }[];
    expect(resource?.name).toBe("zone-1.web-1");
    expect(resource?.labels).toMatchObject({
      "kds.io/zone": "zone-1",
      "kds.io/display-name": "web-1",
      app: "web",
    });
    const table = await run(["get", "Dataplane", "--server", globalUrl]);
    expect(table.stdout).toMatch(/MESH\s+NAME\s+LABELS/);
    expect(table.stdout).toContain("zone-1.web-1");
  });

  it("round-trips get -o yaml and get -o json through apply", async () => {
    const yaml = await run(["get", "Mesh", "default", "--server", globalUrl, "-o", "yaml"]);
    const json = await run(["get", "Mesh", "--server", globalUrl, "-o", "json"]);
    const viaYaml = await run(["apply", "-f", "-", "--server", globalUrl], yaml.stdout);
    expect(viaYaml.stderr).toBe("");
    const viaJson = await run(["apply", "-f", "-", "--server", globalUrl], json.stdout);
    expect(viaJson.stderr).toBe("");
    expect(viaJson.stdout).toContain("Mesh default applied");
  });

  it("lists types and zone status as JSON", async () => {
    expect(global.output).toMatch(
      /no --kinds given: syncing the example kinds Mesh \(kds\.example\.v1\.MeshSpec, global-to-zone, cluster-scoped\), TrafficPolicy .*, Dataplane .* from \S+examples\/example-kinds\/kinds\.yaml/,
    );
    await zone.waitFor(/zone "zone-1" learned 4 kinds from global "global": Mesh/);
    const types = JSON.parse(
      (await run(["types", "--server", globalUrl, "-o", "json"])).stdout,
    ) as { kind: string; typeUrl: string; direction: string }[];
    expect(types).toContainEqual(
      expect.objectContaining({
        kind: "Dataplane",
        direction: "zone-to-global",
        typeUrl: "type.googleapis.com/kds.example.v1.DataplaneSpec",
      }),
    );
    expect(types).toContainEqual(expect.objectContaining({ kind: "Zone", direction: "local" }));
    const zones = JSON.parse(
      (await run(["inspect", "zones", "--server", globalUrl, "-o", "json"])).stdout,
    ) as {
      zone: string;
      online: boolean;
      heartbeatRttMs: number | null;
      types: { kind: string; acked: number }[];
    }[];
    expect(zones[0]).toMatchObject({ zone: "zone-1", online: true });
    expect(zones[0]?.heartbeatRttMs).toBeGreaterThanOrEqual(0);
  });

  it("serves /metrics and the status page beside the admin API, over HTTP/1.1", async () => {
    const globalMetrics = await parseMetrics(await (await fetch(`${globalUrl}/metrics`)).text());
    expect(globalMetrics.value("kds_sessions_open", { role: "global" })).toBe(1);
    expect(
      globalMetrics.value("kds_admissions_total", { result: "admitted" }),
    ).toBeGreaterThanOrEqual(1);
    const zoneMetrics = await parseMetrics(await (await fetch(`${zoneUrl}/metrics`)).text());
    expect(zoneMetrics.value("kds_sessions_open", { role: "zone", zone: "zone-1" })).toBe(1);
    for (const url of [globalUrl, zoneUrl]) {
      const page = await fetch(`${url}/`);
      expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
      expect(await page.text()).toContain('id="zones"');
    }
    const status = (await (await fetch(`${zoneUrl}/status.json`)).json()) as {
      role: string;
      zones: { zone: string; online: boolean }[];
    };
    expect(status).toMatchObject({ role: "zone", zones: [{ zone: "zone-1", online: true }] });
  });

  it("asks the zone itself through the global: get --zone and inspect zone", async () => {
    await run([
      "apply",
      "-f",
      file(
        "dp-zone.yaml",
        "type: Dataplane\nmesh: default\nname: dp-asked\nspec:\n  address: 10.0.0.9\n",
      ),
      "--server",
      zoneUrl,
    ]);
    const got = await until(
      () =>
        run([
          "get",
          "Dataplane",
          "dp-asked",
          "--mesh",
          "default",
          "--zone",
          "zone-1",
          "--server",
          globalUrl,
          "-o",
          "json",
        ]),
      (r) => r.code === 0,
      "the zone's own dataplane through the global",
    );
    expect((JSON.parse(got.stdout) as { name: string }[]).map((d) => d.name)).toEqual(["dp-asked"]); // the zone's name for it, not zone-1.dp-asked
    const view = JSON.parse(
      (await run(["inspect", "zone", "zone-1", "--server", globalUrl, "-o", "json"])).stdout,
    ) as { zone: string; online: boolean }[];
    expect(view).toEqual([expect.objectContaining({ zone: "zone-1", online: true })]);
    const offline = await run(["get", "Dataplane", "--zone", "zone-9", "--server", globalUrl]);
    expect(offline.code).toBe(1);
    expect(offline.stderr).toContain('zone "zone-9" is offline');
  }, 120_000); // four CLI processes: each takes seconds to start on a loaded machine

  it("inspect zones names each kind's counters by this side's part, this session beside all sessions", async () => {
    type Counters = {
      sent: number;
      acked: number;
      nacked: number;
      received: number;
      accepted: number;
      rejected: number;
    };
    type Type = Counters & { kind: string; direction: string; side: string; session: Counters };
    const inspect = async (server: string): Promise<Map<string, Type>> => {
      const zones = JSON.parse(
        (await run(["inspect", "zones", "--server", server, "-o", "json"])).stdout,
      ) as { zone: string; types: Type[] }[];
      return new Map((zones.find((z) => z.zone === "zone-1")?.types ?? []).map((t) => [t.kind, t]));
    };
    // A Mesh from the global and a Dataplane from the zone, in this session.
    expect(
      (
        await run([
          "apply",
          "-f",
          file("mesh-counted.yaml", "type: Mesh\nname: counted\nspec: {}\n"),
          "--server",
          globalUrl,
        ])
      ).code,
    ).toBe(0);
    expect(
      (
        await run([
          "apply",
          "-f",
          file(
            "dp-counted.yaml",
            "type: Dataplane\nmesh: default\nname: dp-counted\nspec:\n  address: 10.0.0.7\n",
          ),
          "--server",
          zoneUrl,
        ])
      ).code,
    ).toBe(0);
    const both = (types: Map<string, Type>, sender: string, receiver: string): boolean =>
      (types.get(sender)?.session.acked ?? 0) >= 1 &&
      (types.get(receiver)?.session.accepted ?? 0) >= 1;
    const global = await until(
      () => inspect(globalUrl),
      (t) => both(t, "Mesh", "Dataplane"),
      "the global counting both kinds",
    );
    const own = await until(
      () => inspect(zoneUrl),
      (t) => both(t, "Dataplane", "Mesh"),
      "the zone counting both kinds",
    );

    // On the global, it sends Mesh and receives Dataplane; on the zone, the other way round.
    expect(global.get("Mesh")).toMatchObject({
      direction: "global-to-zone",
      side: "sender",
      accepted: 0,
      rejected: 0,
    });
    expect(global.get("Dataplane")).toMatchObject({
      direction: "zone-to-global",
      side: "receiver",
      sent: 0,
      acked: 0,
      nacked: 0,
      rejected: 0,
    });
    expect(own.get("Dataplane")).toMatchObject({ side: "sender", accepted: 0 });
    expect(own.get("Mesh")).toMatchObject({ side: "receiver", sent: 0 });
    for (const t of [...global.values(), ...own.values()]) {
      expect(t.received).toBe(t.accepted + t.rejected);
      for (const k of ["sent", "acked", "nacked", "accepted", "rejected"] as const)
        expect(t.session[k]).toBeLessThanOrEqual(t[k]); // one session of all there were
    }

    const globalTable = (await run(["inspect", "zones", "--server", globalUrl])).stdout;
    expect(globalTable).toMatch(/TYPE +DIRECTION +THIS SESSION +ALL SESSIONS +LAST ERROR/);
    expect(globalTable).toMatch(
      /Mesh +global-to-zone +sent [1-9]\d*, acked [1-9]\d*, nacked 0 +sent [1-9]\d*, acked [1-9]\d*, nacked 0/,
    );
    expect(globalTable).toMatch(
      /Dataplane +zone-to-global +received [1-9]\d*, accepted [1-9]\d*, rejected 0 +received [1-9]\d*, accepted [1-9]\d*, rejected 0/,
    );
    const zoneTable = (await run(["inspect", "zones", "--server", zoneUrl])).stdout;
    expect(zoneTable).toMatch(
      /Mesh +global-to-zone +received [1-9]\d*, accepted [1-9]\d*, rejected 0/,
    );
    expect(zoneTable).toMatch(/Dataplane +zone-to-global +sent [1-9]\d*, acked [1-9]\d*, nacked 0/);
  }, 120_000); // about eight CLI processes

  it("rejects an invalid file naming the file and the problem", async () => {
    const bad = file("bad.yaml", "type: Mesh\nname: [unclosed\n");
    const r = await run(["apply", "-f", bad, "--server", globalUrl]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(bad);
    expect(r.stderr).toMatch(/invalid YAML/);
    const badSpec = file(
      "bad-spec.yaml",
      'type: Mesh\nname: ok\n---\ntype: Mesh\nname: broken\nspec:\n  mtls: "not a bool"\n',
    );
    const r2 = await run(["apply", "-f", badSpec, "--server", globalUrl]);
    expect(r2.code).toBe(1);
    expect(r2.stderr).toContain(`${badSpec}: document 2`);
    expect(r2.stderr).toMatch(/not a valid kds\.example\.v1\.MeshSpec/);
    const unknown = await run(["get", "Nope", "--server", globalUrl]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/unknown resource type "Nope"; known types: Zone, Mesh/);
    const unreachable = await run(["get", "Mesh", "--server", "http://127.0.0.1:1"]);
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toMatch(
      /could not connect to the admin API at http:\/\/127\.0\.0\.1:1/,
    );
    const badFlag = await run([
      "zone",
      "--name",
      "z",
      "--global",
      muxUrl,
      "--transport",
      "carrier-pigeon",
    ]);
    expect(badFlag.code).toBe(2);
    expect(badFlag.stderr).toMatch(/carrier-pigeon/);
  });

  it("tells an unregistered zone how to register, on every retry", async () => {
    const stray = new KdsProcess([
      "zone",
      "--name",
      "zone-9",
      "--global",
      muxUrl,
      "--token-file",
      await zoneToken(globalUrl, "zone-9"),
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
    ]);
    try {
      const retry =
        /kds-mux generate zone --name zone-9 \| kds-mux apply -f - --server http:\/\/127\.0\.0\.1:\d+[\s\S]*?retries in \d+ ms \(at /g;
      await stray.waitFor(new RegExp(`(${retry.source}[\\s\\S]*){2}`));
      expect(stray.output.match(retry)?.length).toBeGreaterThanOrEqual(2);
      expect(stray.output).toContain("type: Zone");
    } finally {
      expect(await stray.stop()).toBe(0);
    }
  });

  it("runs a zone over the half-duplex transport", async () => {
    const registered = await run(
      ["apply", "-f", "-", "--server", globalUrl],
      (await run(["generate", "zone", "--name", "zone-hd"])).stdout,
    );
    expect(registered.code).toBe(0);
    const hd = new KdsProcess([
      "zone",
      "--name",
      "zone-hd",
      "--global",
      muxUrl,
      "--token-file",
      await zoneToken(globalUrl, "zone-hd"),
      "--admin-listen",
      "127.0.0.1:0",
      "--transport",
      "half-duplex",
      "--store",
      "memory",
    ]);
    try {
      const url = (
        await hd.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/)
      )[1] as string;
      await hd.waitFor(/connected to global "global" over half-duplex/);
      const got = await until(
        () => run(["get", "Mesh", "--server", url, "-o", "json"]),
        (r) => r.code === 0 && (JSON.parse(r.stdout) as unknown[]).length > 0,
        "the mesh on the half-duplex zone",
      );
      expect(JSON.parse(got.stdout)).toContainEqual(
        expect.objectContaining({ type: "Mesh", name: "default" }),
      );
    } finally {
      expect(await hd.stop()).toBe(0);
    }
  });

  it("stops cleanly on SIGTERM", async () => {
    const other = new KdsProcess([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "127.0.0.1:0",
      "--log-format",
      "json",
      "--store",
      "memory",
    ]);
    const line = await other.waitFor(/\{.*"msg":"global \\"global\\" listening on [^"]+".*\}/);
    expect(JSON.parse(line[0]) as { level: string }).toMatchObject({ level: "info" });
    expect(await other.stop()).toBe(0);
    expect(other.output).toContain('"msg":"stopped"');
  });

  it("runs the demo: resources flow both ways, then it exits cleanly", async () => {
    const demo = await run(["demo", "--duration", "3s"]);
    expect(demo.code).toBe(0);
    expect(demo.stdout).toMatch(
      /kinds from \S+examples\/example-kinds\/kinds\.yaml: Mesh \(kds\.example\.v1\.MeshSpec, global-to-zone, cluster-scoped\)/,
    );
    expect(demo.stdout).toMatch(/zone-east <- got Mesh default/);
    expect(demo.stdout).toMatch(/zone-west <- got TrafficPolicy default\/timeouts/);
    expect(demo.stdout).toMatch(
      /global {4}<- got Dataplane default\/zone-east\.web-1 from zone-east/,
    );
    // Each zone's ZoneIngress reaches the other zone through the global, never its own zone.
    expect(demo.stdout).toMatch(
      /zone-west <- got ZoneIngress zone-east\.ingress \(from zone-east, through the global\)/,
    );
    expect(demo.stdout).toMatch(
      /zone-east <- got ZoneIngress zone-west\.ingress \(from zone-west, through the global\)/,
    );
    expect(demo.stdout).not.toMatch(/zone-east <- got ZoneIngress zone-east\./);
    expect(demo.stdout).toMatch(/zone-east {3}online/);
    // A change or status query that fails is reported on stderr (it used to be dropped); none fails here.
    expect(demo.stderr).not.toMatch(/demo: .* failed/);
    expect(demo.stdout).toMatch(
      /demo finished: \d+ changes reached the zones from the global, \d+ reached the global from the zones/,
    );
  }, 120_000);
});
