// A zone SIGKILLed and restarted on its durable store (embedded PostgreSQL in
// --data-dir): its own resources are still in its store and still on the
// global; nothing was deleted on either side.
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { KdsProcess, run, until, startDevGlobal } from "./process.ts";

const dir = mkdtempSync(join(tmpdir(), "kds-zone-restart-"));
chmodSync(dir, 0o755); // as root, the embedded server's own user must pass through
const processes: KdsProcess[] = [];
afterAll(async () => {
  for (const p of processes) await p.stop();
  rmSync(dir, { recursive: true, force: true });
});

const json = async (args: string[]): Promise<unknown[] | undefined> => {
  const r = await run([...args, "-o", "json"]);
  return r.code === 0 ? (JSON.parse(r.stdout) as unknown[]) : undefined;
};

function startZone(muxUrl: string): KdsProcess {
  const p = new KdsProcess([
    "zone",
    "--name",
    "zone-1",
    "--global",
    muxUrl,
    "--admin-listen",
    "127.0.0.1:0",
    "--data-dir",
    join(dir, "zone-1"),
    "--log-level",
    "info",
  ]);
  processes.push(p);
  return p;
}

describe("a zone restarted after SIGKILL", { timeout: 300_000 }, () => {
  it("keeps its resources in its store and on the global", async () => {
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

    const first = startZone(muxUrl);
    const zoneAdmin = (
      await first.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/, 90_000)
    )[1] as string;
    const dataplanes = Array.from(
      { length: 5 },
      (_, i) => `type: Dataplane\nmesh: default\nname: dp-${i}\nspec:\n  address: 10.0.0.${i}\n`,
    ).join("---\n");
    expect((await run(["apply", "-f", "-", "--server", zoneAdmin], dataplanes)).code).toBe(0);
    const before = await until(
      () => json(["get", "Dataplane", "--mesh", "default", "--server", adminUrl]),
      (v) => v?.length === 5,
      "5 dataplanes on the global",
      60_000,
    );
    const versions = (list: unknown[] | undefined): string[] =>
      (list as { name: string; version: string }[]).map((r) => `${r.name}@${r.version}`).sort();

    first.child.kill("SIGKILL");
    await first.exited;
    const second = startZone(muxUrl);
    const again = (
      await second.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/, 90_000)
    )[1] as string;
    await second.waitFor(/connected to global "global"/, 90_000);
    expect(await json(["get", "Dataplane", "--mesh", "default", "--server", again])).toHaveLength(
      5,
    );
    // A change after the restart syncs, and the global still holds all five (none was deleted meanwhile).
    expect(
      (
        await run(
          ["apply", "-f", "-", "--server", again],
          "type: Dataplane\nmesh: default\nname: dp-new\nspec:\n  address: 10.0.9.9\n",
        )
      ).code,
    ).toBe(0);
    const after = await until(
      () => json(["get", "Dataplane", "--mesh", "default", "--server", adminUrl]),
      (v) => v?.length === 6,
      "6 dataplanes on the global",
      60_000,
    );
    // The five copies on the global are the very same versions: never deleted, never rewritten.
    expect(versions(after).filter((v) => !v.startsWith("zone-1.dp-new@"))).toEqual(
      versions(before),
    );
  });
});
