// Two `kds-mux zone --name east` processes on one PostgreSQL database: one
// leads (it alone dials the global), the other stands by (reads work, writes
// are refused naming the leader, /readyz and inspect say so). Fencing: the
// leader SIGSTOPped past its lease is replaced; SIGCONTed, it never dials nor
// writes again while the other leads. When the leader is SIGKILLed, the
// standby takes over. A lease duration that is not a duration is refused.
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { createServer, connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { freshDatabase, type TestDatabase } from "../support/postgres.ts";
import { KdsProcess, run, until, startDevGlobal } from "./process.ts";

const processes: KdsProcess[] = [];
const databases: TestDatabase[] = [];
afterAll(async () => {
  for (const p of processes) {
    if (p.child.exitCode === null) p.child.kill("SIGCONT");
    await p.stop();
  }
  for (const d of databases) await d.drop();
});

async function fresh(): Promise<TestDatabase> {
  const d = await freshDatabase();
  databases.push(d);
  return d;
}

const kinds = new URL("../../examples/example-kinds/kinds.yaml", import.meta.url).pathname;
const LEASE = "2s";

function zone(muxUrl: string, url: string): KdsProcess {
  const p = new KdsProcess([
    "zone",
    "--name",
    "east",
    "--global",
    muxUrl,
    "--kinds",
    kinds,
    "--admin-listen",
    "127.0.0.1:0",
    "--store",
    url,
    "--lease-duration",
    LEASE,
    "--log-level",
    "info",
  ]);
  processes.push(p);
  return p;
}

const adminOf = async (p: KdsProcess): Promise<string> =>
  (await p.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/, 90_000))[1] as string;

const count = (text: string, pattern: RegExp): number =>
  text.match(new RegExp(pattern.source, "g"))?.length ?? 0;

const connected = /zone "east" connected to global/;
const leads = /this replica leads \(term (\d+)/;

describe("zone replicas on one PostgreSQL database", { timeout: 300_000 }, () => {
  it("elect one leader; the standby refuses writes naming it; a paused leader never dials or writes again once replaced; a killed one is replaced", async () => {
    const url = (await fresh()).url;
    const { zonesUrl: muxUrl, adminUrl: globalAdmin } = await startDevGlobal(processes, [
      "--log-level",
      "info",
    ]);
    const zoneDoc = "type: Zone\nname: east\nspec:\n  enabled: true\n";
    expect((await run(["apply", "-f", "-", "--server", globalAdmin], zoneDoc)).code).toBe(0);

    const a = zone(muxUrl, url);
    const aAdmin = await adminOf(a);
    await a.waitFor(connected, 60_000);
    const b = zone(muxUrl, url);
    const bAdmin = await adminOf(b);
    await b.waitFor(/this replica is a standby/, 60_000);

    // Probes and inspect say which is which.
    expect(await (await fetch(`${aAdmin}/readyz`)).text()).toBe("ready (leader)\n");
    expect(await (await fetch(`${bAdmin}/readyz`)).text()).toBe("ready (standby)\n");
    const inspected = await run(["inspect", "zones", "--server", bAdmin, "-o", "json"]);
    expect(JSON.parse(inspected.stdout)[0]).toMatchObject({
      leadership: { role: "standby", leaderAddress: aAdmin },
    });
    // The standby refuses a write, naming the leader's admin API; the leader takes it; both read it.
    const dp = (name: string): string =>
      `type: Dataplane\nmesh: default\nname: ${name}\nspec:\n  address: 10.0.0.1\n`;
    const refused = await run(["apply", "-f", "-", "--server", bAdmin], dp("dp-0"));
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(`send it to the leader's admin API at ${aAdmin}`);
    expect((await run(["apply", "-f", "-", "--server", aAdmin], dp("dp-1"))).code).toBe(0);
    const onB = await run([
      "get",
      "Dataplane",
      "--mesh",
      "default",
      "--server",
      bAdmin,
      "-o",
      "json",
    ]);
    expect(JSON.parse(onB.stdout).map((r: { name: string }) => r.name)).toEqual(["dp-1"]);

    // Fencing: pause the leader past its lease.
    const sql = postgres(url, { max: 1, onnotice: () => undefined });
    const revision = async (): Promise<number> =>
      Number((await sql`SELECT revision::text AS r FROM kds_state`)[0]?.r);
    try {
      a.child.kill("SIGSTOP");
      await b.waitFor(leads, 60_000);
      await b.waitFor(connected, 60_000);
      // The new leader writes what the global sends.
      const meshDoc = "type: Mesh\nname: after-takeover\nspec: {}\n";
      expect((await run(["apply", "-f", "-", "--server", globalAdmin], meshDoc)).code).toBe(0);
      await until(
        async () => (await run(["get", "Mesh", "--server", bAdmin, "-o", "json"])).stdout,
        (out) => out.includes("after-takeover"),
        "the new leader to store the global's new mesh",
        60_000,
      );
      const before = await revision();
      const pausedOutput = a.output.length;
      a.child.kill("SIGCONT");
      await a.waitFor(/no longer leads/, 30_000);
      // Three lease durations: time enough for a dial or a write, had it made one.
      await new Promise((r) => setTimeout(r, 6_000));
      const resumed = a.output.slice(pausedOutput);
      expect(count(a.output, connected)).toBe(1);
      expect(resumed).not.toMatch(leads);
      expect(await revision()).toBe(before);
      expect(count(b.output, connected)).toBe(1);
      expect(await (await fetch(`${aAdmin}/readyz`)).text()).toBe("ready (standby)\n");
    } finally {
      await sql.end();
    }

    // The leader dies: the standby (the old leader) takes over and has everything.
    b.child.kill("SIGKILL");
    await until(
      async () => count(a.output, leads),
      (n) => n === 2,
      "the standby to lead after the leader was killed",
      60_000,
    );
    await until(
      async () => count(a.output, connected),
      (n) => n === 2,
      "the new leader to connect",
      60_000,
    );
    const onGlobal = await until(
      async () =>
        (
          await run([
            "get",
            "Dataplane",
            "--mesh",
            "default",
            "--server",
            globalAdmin,
            "-o",
            "json",
          ])
        ).stdout,
      (out) => out.includes("east.dp-1"),
      "the zone's dataplane on the global",
      60_000,
    );
    expect(JSON.parse(onGlobal)).toHaveLength(1);
  });

  it("a leader whose store connection is cut stops before the standby takes over", async () => {
    const url = new URL((await fresh()).url);
    // The leader reaches PostgreSQL through a proxy this test cuts; the standby directly.
    const sockets = new Set<Socket>();
    const proxy = createServer((client) => {
      const upstream = connect(Number(url.port || 5432), url.hostname);
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on("error", () => undefined); // a cut connection: both ends are destroyed below
        s.on("close", () => sockets.delete(s));
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    const proxied = new URL(url);
    proxied.port = String((proxy.address() as { port: number }).port);
    proxied.hostname = "127.0.0.1";
    const devGlobal = await startDevGlobal(processes);
    const zoneDoc = "type: Zone\nname: east\nspec:\n  enabled: true\n";
    expect((await run(["apply", "-f", "-", "--server", devGlobal.adminUrl], zoneDoc)).code).toBe(0);
    const a = zone(devGlobal.zonesUrl, proxied.toString());
    await a.waitFor(connected, 60_000);
    const b = zone(devGlobal.zonesUrl, url.toString());
    await b.waitFor(/this replica is a standby/, 60_000);
    try {
      proxy.close();
      for (const s of sockets) s.destroy();
      const stopped = await a.waitFor(
        /^(\d\d):(\d\d):(\d\d)\.(\d{3}) WARN .*no longer leads.*$/m,
        60_000,
      );
      const took = await b.waitFor(
        /^(\d\d):(\d\d):(\d\d)\.(\d{3}) INFO .*this replica leads/m,
        60_000,
      );
      const at = (t: RegExpMatchArray): number =>
        ((Number(t[1]) * 60 + Number(t[2])) * 60 + Number(t[3])) * 1000 + Number(t[4]);
      // Both processes log this machine's clock: the old leader stopped first.
      const gap = (at(took) - at(stopped) + 86_400_000) % 86_400_000;
      const logs = `the old leader's log:\n${a.output}\nthe new leader's log:\n${b.output}`;
      expect(gap, logs).toBeGreaterThan(0);
      expect(gap, logs).toBeLessThan(43_200_000);
      expect(stopped[0], logs).toContain("could not renew its lease before the renew deadline");
      await b.waitFor(connected, 60_000);
      expect(count(a.output, connected)).toBe(1);
    } finally {
      proxy.close();
      for (const s of sockets) s.destroy();
    }
  });

  it("allows one zone process per embedded data dir: a second is refused at start, naming the first", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kds-zone-lock-"));
    chmodSync(dir, 0o755); // as root, the embedded server's own user must pass through
    try {
      const args = (admin: string) => [
        "zone",
        "--name",
        "east",
        "--global",
        "http://127.0.0.1:1",
        "--kinds",
        kinds,
        "--admin-listen",
        admin,
        "--data-dir",
        join(dir, "east"),
        "--log-level",
        "info",
      ];
      const first = new KdsProcess(args("127.0.0.1:0"));
      processes.push(first);
      await adminOf(first);
      const second = await run(args("127.0.0.1:0"));
      expect(second.code).not.toBe(0);
      expect(second.stderr).toContain(
        `is in use by process ${first.child.pid} (kds-mux zone "east" with its admin API on 127.0.0.1:0): stop that process first`,
      );
      expect(first.child.exitCode).toBeNull();
      await first.stop();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("refuses a lease duration that is not a duration, and one without a shared store", async () => {
    const bad = await run([
      "zone",
      "--name",
      "east",
      "--global",
      "http://127.0.0.1:1",
      "--store",
      "postgres://nobody@127.0.0.1:1/none",
      "--lease-duration",
      "soon",
    ]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--lease-duration "soon" is not a duration');
    const alone = await run([
      "zone",
      "--name",
      "east",
      "--global",
      "http://127.0.0.1:1",
      "--store",
      "memory",
      "--lease-duration",
      "10s",
    ]);
    expect(alone.code).not.toBe(0);
    expect(alone.stderr).toContain("--lease-duration is the lease of zone replicas");
  });
});
