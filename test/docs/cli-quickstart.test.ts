// The README's CLI quick start, run as written: its sh block, each command in
// turn, the global and the zone left running. Only the ports differ: the
// README's 5685 (zones), 5681 (global admin) and 5682 (zone admin) become
// free ports, passed to the two servers with --listen and --admin-listen, so
// the test never collides with a kds-mux someone runs on the defaults.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const root = resolve(import.meta.dirname, "../..");
const exec = promisify(execFile);

/** The commands of the sh block under "## Quick start: the CLI", comments dropped, continuations joined. */
function quickStart(): string[] {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Quick start: the CLI"));
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1];
  if (block === undefined) throw new Error("README.md has no sh block under its CLI quick start");
  return block
    .replace(/\\\n\s*/g, "")
    .split("\n")
    .map((line) => line.replace(/(^|\s{2,})#.*$/, "").trim())
    .filter((line) => line !== "");
}

async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => done(typeof address === "object" && address !== null ? address.port : 0));
    });
  });
}

const children: ChildProcess[] = [];
afterAll(() => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGTERM");
});

/** Starts a long-running command; resolves once it logs that it listens. */
function serve(command: string): Promise<void> {
  const child = spawn("bash", ["-c", `exec ${command}`], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  let output = "";
  return new Promise((done, fail) => {
    const timer = setTimeout(
      () => fail(new Error(`no "listening" within 60 s: ${command}\n${output}`)),
      60_000,
    );
    const collect = (d: Buffer): void => {
      output += d.toString();
      if (/listening on/.test(output)) {
        clearTimeout(timer);
        done();
      }
    };
    child.stdout?.on("data", collect);
    child.stderr?.on("data", collect);
    child.once("exit", () => {
      clearTimeout(timer);
      fail(new Error(`exited before listening: ${command}\n${output}`));
    });
  });
}

/** Runs `command` until its output matches `expected` (sync takes a moment), at most 20 tries. */
async function runUntil(command: string, expected: RegExp | undefined): Promise<string> {
  let last = "";
  for (let attempt = 0; attempt < 20; attempt++) {
    const { stdout, stderr } = await exec("bash", ["-c", command], { cwd: root, timeout: 60_000 });
    last = stdout + stderr;
    if (expected === undefined || expected.test(last)) return last;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`${command}\nnever printed ${expected}; last:\n${last}`);
}

describe("the README's CLI quick start", () => {
  it("runs as written: a Mesh reaches the zone, a Dataplane reaches the global, the zone is online", async () => {
    const [zones, globalAdmin, zoneAdmin] = [await freePort(), await freePort(), await freePort()];
    const commands = quickStart().map((c) =>
      c
        .replaceAll("npx kds-mux", `node ${join(root, "bin/kds-mux.mjs")}`)
        .replaceAll("127.0.0.1:5685", `127.0.0.1:${zones}`)
        .replaceAll("127.0.0.1:5681", `127.0.0.1:${globalAdmin}`)
        .replaceAll("127.0.0.1:5682", `127.0.0.1:${zoneAdmin}`),
    );
    expect(commands).toHaveLength(8);
    // What the README's comments say each command shows (undefined: it only has to succeed).
    const expected: (RegExp | undefined)[] = [
      undefined,
      /Zone zone-east applied/,
      undefined,
      /Mesh default applied/,
      /^Mesh\s+default\s/m,
      /Dataplane default\/web-1 applied/,
      /zone-east\.web-1/,
      /^zone-east\s+online\s/m,
    ];
    for (const [i, command] of commands.entries()) {
      if (/^node \S+ global /.test(command)) {
        await serve(
          `${command} --listen 127.0.0.1:${zones} --admin-listen 127.0.0.1:${globalAdmin}`,
        );
      } else if (/^node \S+ zone /.test(command)) {
        await serve(`${command} --admin-listen 127.0.0.1:${zoneAdmin}`);
      } else {
        await runUntil(command, expected[i]);
      }
    }
  }, 180_000);
});
