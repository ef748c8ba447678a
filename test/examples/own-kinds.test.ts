// The workflow kds-mux is for, as docs/library.md walks through it: a project of
// its own (examples/own-kinds) copied into a fresh directory, kds-mux
// installed from this checkout's `npm pack`, `buf generate` with
// protoc-gen-es, a typecheck, and a global and a zone syncing both kinds.
// npm works from its cache when it can (--prefer-offline) and asks the
// registry only for what the cache lacks.
import { execFile, spawn } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const example = join(root, "examples/own-kinds");
const work = mkdtempSync(join(tmpdir(), "kds-mux-own-kinds-"));
const project = join(work, "own-kinds");
const exec = promisify(execFile);

const timings: string[] = [];

/** Runs `command` in `cwd` with a deadline; resolves with its output, rejects with it. */
async function sh(
  cwd: string,
  command: string,
  args: string[],
  timeoutMs = 180_000,
): Promise<string> {
  const started = performance.now();
  try {
    const { stdout, stderr } = await exec(command, args, {
      cwd,
      timeout: timeoutMs,
      killSignal: "SIGKILL",
      maxBuffer: 16 * 1024 * 1024,
      env: {
        ...process.env,
        npm_config_audit: "false",
        npm_config_fund: "false",
        npm_config_update_notifier: "false",
      },
    });
    timings.push(
      `${command} ${args.slice(0, 2).join(" ")} ${((performance.now() - started) / 1000).toFixed(1)} s`,
    );
    return stdout + stderr;
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(
      `${command} ${args.join(" ")} failed in ${cwd}: ${e.message}\n${e.stdout ?? ""}${e.stderr ?? ""}`,
    );
  }
}

/** Starts `node args` in `cwd`, returns its output once it listens, and stops it. */
async function firstLines(cwd: string, args: string[]): Promise<string> {
  const child = spawn(process.execPath, args, { cwd, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const listening = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no "listening" within 60 s:\n${output}`)),
      60_000,
    );
    const collect = (d: Buffer): void => {
      output += d.toString();
      if (output.includes("listening on")) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on("data", collect);
    child.stderr.on("data", collect);
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`exited before listening:\n${output}`));
    });
  });
  try {
    await listening;
  } finally {
    child.kill("SIGTERM");
    await exited;
  }
  return output;
}

function files(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(relative(dir, p));
    }
  };
  walk(dir);
  return out.sort();
}

afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("examples/own-kinds in a fresh directory", () => {
  it("installs kds-mux from npm pack, generates with buf, typechecks, and syncs both kinds", async () => {
    // 1. The project, as a user would copy it (nothing built or installed).
    cpSync(example, project, {
      recursive: true,
      filter: (src) => !/[/\\](node_modules|dist|kinds\.binpb|package-lock\.json)$/.test(src),
    });
    const committed = join(work, "committed-gen");
    cpSync(join(project, "src/gen"), committed, { recursive: true });
    rmSync(join(project, "src/gen"), { recursive: true });

    // 2. kds-mux from this checkout: npm pack runs prepack (the build) and writes the tarball
    //    where the example's package.json expects it (../kds-mux-<version>.tgz).
    const { version } = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
      version: string;
    };
    await sh(root, "npm", ["pack", "--pack-destination", work]);
    expect(readdirSync(work)).toContain(`kds-mux-${version}.tgz`);
    expect(
      JSON.parse(readFileSync(join(project, "package.json"), "utf8")).dependencies["kds-mux"],
    ).toBe(`file:../kds-mux-${version}.tgz`);
    await sh(project, "npm", ["install", "--prefer-offline", "--no-audit", "--no-fund"], 240_000);

    // 3. buf generate with protoc-gen-es, exactly as committed.
    await sh(project, "npm", ["run", "generate"]);
    const generated = files(join(project, "src/gen"));
    expect(generated).toEqual(["acme/v1/kinds_pb.ts"]);
    expect(generated).toEqual(files(committed));
    for (const f of generated)
      expect(readFileSync(join(project, "src/gen", f), "utf8")).toBe(
        readFileSync(join(committed, f), "utf8"),
      );

    // 4. Typecheck (and compile) against the installed package's types.
    await sh(project, "npm", ["run", "build"]);

    // 5. A global and a zone sync both kinds.
    const out = await sh(project, "npm", ["start"], 60_000);
    expect(out).toContain('Gateway "edge" reached zone-1: {"hosts":["example.com"],"port":443}');
    expect(out).toContain(
      'Workload "web-1" reached the global as "zone-1.web-1": {"address":"10.0.0.1","service":"web"}',
    );
    expect(out).toContain("both kinds synced");

    // 6. The packed CLI, as docs/cli.md runs it: the project's kinds file over `buf build`, and
    //    the example kinds it falls back to (shipped in the tarball).
    await sh(project, "npx", ["--no-install", "buf", "build", "-o", "kinds.binpb"]);
    const cli = join(project, "node_modules/kds-mux/bin/kds-mux.mjs");
    expect(
      await firstLines(project, [
        cli,
        "global",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--store",
        "memory",
        "--kinds",
        "kinds.yaml",
      ]),
    ).toContain(
      "kinds from kinds.yaml: Gateway (acme.v1.GatewaySpec, global-to-zone, cluster-scoped), Workload (acme.v1.WorkloadSpec, zone-to-global, mesh-scoped)",
    );
    expect(
      await firstLines(project, [
        cli,
        "global",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--store",
        "memory",
      ]),
    ).toMatch(
      /no --kinds given: syncing the example kinds Mesh .* from \S+node_modules\/kds-mux\/examples\/example-kinds\/kinds\.yaml/,
    );
    console.log(`own-kinds in a fresh directory: ${timings.join(", ")}`);
  }, 480_000);
});
