// The embedded PostgreSQL launcher: durable data dir, clear refusals, and
// recovery from a process killed without stopping its server.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { startEmbeddedPostgres } from "../../src/adapters/node/embedded-postgres.ts";
import { KdsError } from "../../src/errors.ts";
import { silentLogger } from "../../src/log.ts";
import { PostgresStore } from "../../src/store/postgres.ts";
import { mesh, types } from "../store/fixtures.ts";

const childScript = fileURLToPath(new URL("../support/embedded-child.ts", import.meta.url));
const dirs: string[] = [];
const children: ChildProcess[] = [];

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "kds-embedded-"));
  dirs.push(dir);
  return dir;
}

/** Starts the child holder on `dir`; resolves with its first line ("ready <port>" or "error ..."). */
function holder(dir: string): { child: ChildProcess; line: Promise<string> } {
  const child = spawn(process.execPath, ["--import", "tsx", childScript, dir], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  children.push(child);
  let out = "";
  const line = new Promise<string>((resolve, reject) => {
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      const nl = out.indexOf("\n");
      if (nl >= 0) resolve(out.slice(0, nl));
    });
    child.once("exit", (code) =>
      reject(new Error(`holder exited (${code}) before a line: ${out}`)),
    );
  });
  return { child, line };
}

async function storeOn(url: string): Promise<PostgresStore> {
  return PostgresStore.open(types, { url, maxConnections: 2, logger: silentLogger });
}

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe("embedded PostgreSQL", () => {
  it("keeps the data across a stop and a start", async () => {
    const dir = await tempDir();
    const first = await startEmbeddedPostgres({ dataDir: dir, createSystemUser: true });
    try {
      const store = await storeOn(first.url);
      await store.put(mesh("kept", "across restarts"));
      await store.close();
    } finally {
      await first.stop();
    }
    const second = await startEmbeddedPostgres({ dataDir: dir, createSystemUser: true });
    try {
      const store = await storeOn(second.url);
      const kept = await store.get("Mesh", "", "kept");
      expect(kept?.spec).toMatchObject({ description: "across restarts" });
      expect(await store.revision()).toBe(1);
      await store.close();
    } finally {
      await second.stop();
    }
  });

  it("refuses a data dir that cannot be written, saying what to do", async () => {
    const dir = await tempDir();
    const file = join(dir, "a-file");
    await writeFile(file, "not a directory");
    for (const dataDir of [file, join(file, "below")]) {
      const error = await startEmbeddedPostgres({ dataDir, createSystemUser: true }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(KdsError.is(error, "invalid_argument")).toBe(true);
      expect((error as Error).message).toMatch(
        /cannot be written .*choose a `dataDir` this user can write/,
      );
    }
  });

  it("refuses a second process on the same data dir, and leaves the first one running", async () => {
    const dir = await tempDir();
    const first = holder(dir);
    const line = await first.line;
    expect(line).toMatch(/^ready \d+$/);
    const error = await startEmbeddedPostgres({ dataDir: dir, createSystemUser: true }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(KdsError.is(error, "invalid_argument")).toBe(true);
    expect((error as Error).message).toMatch(
      new RegExp(`in use by process ${first.child.pid}: stop that process first`),
    );
    // The first server still answers.
    const password = (await readFile(join(dir, "password"), "utf8")).trim();
    const store = await storeOn(
      `postgres://kds:${password}@127.0.0.1:${line.split(" ")[1]}/postgres`,
    );
    expect(await store.revision()).toBe(0);
    await store.close();
    first.child.kill("SIGTERM");
    expect(await new Promise((r) => first.child.once("exit", (code) => r(code)))).toBe(0);
  });

  it("takes over after its process was killed (SIGKILL), stopping the server it left running, with the data intact", async () => {
    const dir = await tempDir();
    const first = holder(dir);
    const line = await first.line;
    const password = (await readFile(join(dir, "password"), "utf8")).trim();
    const store = await storeOn(
      `postgres://kds:${password}@127.0.0.1:${line.split(" ")[1]}/postgres`,
    );
    await store.apply([
      { op: "put", input: mesh("a") },
      { op: "put", input: mesh("b") },
    ]);
    await store.close();
    const orphan = Number.parseInt(
      (await readFile(join(dir, "pg", "postmaster.pid"), "utf8")).split("\n")[0] ?? "",
      10,
    );
    first.child.kill("SIGKILL");
    await new Promise((r) => first.child.once("exit", r));
    // The server outlived its parent.
    expect(() => process.kill(orphan, 0)).not.toThrow();
    const again = await startEmbeddedPostgres({
      dataDir: dir,
      createSystemUser: true,
      logger: silentLogger,
    });
    try {
      const reopened = await storeOn(again.url);
      expect((await reopened.list("Mesh")).resources.map((r) => r.meta.name)).toEqual(["a", "b"]);
      await reopened.close();
    } finally {
      await again.stop();
    }
    expect(() => process.kill(orphan, 0)).toThrow();
  });
});
