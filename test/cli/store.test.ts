// `kds-mux global --store/--data-dir`: state kept across restarts in the
// embedded engine and on a PostgreSQL server; bad choices refused clearly.
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { freshDatabase, type TestDatabase } from "../support/postgres.ts";
import { KdsProcess, run } from "./process.ts";

const dirs: string[] = [];
const databases: TestDatabase[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
  for (const db of databases) await db.drop();
});

const meshYaml = "type: Mesh\nname: kept\nspec:\n  description: survives restarts\n";

/** Starts a global with `args`, applies a Mesh through its admin API, stops it; starts it again and reads the Mesh back. */
async function restartKeeps(args: string[]): Promise<string> {
  const first = new KdsProcess([
    "global",
    "--listen",
    "127.0.0.1:0",
    "--admin-listen",
    "127.0.0.1:0",
    ...args,
  ]);
  try {
    const url = (
      await first.waitFor(/admin API on (http:\/\/127\.0\.0\.1:\d+)/, 90_000)
    )[1] as string;
    const applied = await run(["apply", "-f", "-", "--server", url], meshYaml);
    expect(applied.stderr).toBe("");
  } finally {
    expect(await first.stop()).toBe(0);
  }
  const second = new KdsProcess([
    "global",
    "--listen",
    "127.0.0.1:0",
    "--admin-listen",
    "127.0.0.1:0",
    ...args,
  ]);
  try {
    const url = (
      await second.waitFor(/admin API on (http:\/\/127\.0\.0\.1:\d+)/, 90_000)
    )[1] as string;
    const got = await run(["get", "Mesh", "kept", "--server", url, "-o", "json"]);
    expect(got.code).toBe(0);
    return got.stdout;
  } finally {
    expect(await second.stop()).toBe(0);
  }
}

describe("kds-mux global --store", () => {
  it("keeps its state across a restart in --data-dir (embedded PostgreSQL)", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kds-cli-data-"));
    dirs.push(dir);
    await chmod(dir, 0o755); // as root, the server's own user must pass through (mkdtemp makes it 0700)
    const out = await restartKeeps(["--data-dir", join(dir, "global")]);
    expect(JSON.parse(out)).toMatchObject([
      { type: "Mesh", name: "kept", spec: { description: "survives restarts" } },
    ]);
  }, 240_000);

  it("keeps its state across a restart on a PostgreSQL server", async () => {
    const db = await freshDatabase();
    databases.push(db);
    const out = await restartKeeps(["--store", db.url]);
    expect(JSON.parse(out)).toMatchObject([{ type: "Mesh", name: "kept" }]);
  }, 120_000);

  it("refuses, with what to do, a data dir it cannot write, a database that does not answer, and a bad --store", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kds-cli-bad-"));
    dirs.push(dir);
    const file = join(dir, "file");
    await writeFile(file, "");
    const unwritable = await run([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--data-dir",
      join(file, "data"),
    ]);
    expect(unwritable.code).toBe(2);
    expect(unwritable.stderr).toMatch(
      /data directory .* cannot be written .*choose a --data-dir this user can write/,
    );
    const unreachable = await run([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--store",
      "postgres://kds:secret@127.0.0.1:1/kds",
    ]);
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toMatch(
      /cannot reach PostgreSQL at 127\.0\.0\.1:1\/kds .*check that the server runs/,
    );
    expect(unreachable.stderr).not.toMatch(/secret/);
    const bad = await run([
      "zone",
      "--name",
      "z",
      "--global",
      "http://127.0.0.1:1",
      "--store",
      "sqlite:x.db",
    ]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--store must be embedded, memory or a postgres:\/\/ URL/);
    const mixed = await run(["global", "--store", "memory", "--data-dir", dir]);
    expect(mixed.code).toBe(2);
    expect(mixed.stderr).toMatch(/--data-dir is for the embedded store/);
  }, 60_000);
});
