// Runs the real kds-mux executable as a child process.
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";

const bin = fileURLToPath(new URL("../../bin/kds-mux.mjs", import.meta.url));

/** A running kds-mux process whose output is collected. */
export class KdsProcess {
  readonly child: ChildProcess;
  output = "";
  readonly exited: Promise<number | null>;

  /** `openFiles`: run it under `ulimit -n openFiles` (through sh; exec keeps the pid). */
  constructor(args: string[], options: { openFiles?: number } = {}) {
    this.child =
      options.openFiles === undefined
        ? spawn(process.execPath, [bin, ...args], { stdio: ["ignore", "pipe", "pipe"] })
        : spawn(
            "sh",
            [
              "-c",
              `ulimit -n ${options.openFiles} && exec "$0" "$@"`,
              process.execPath,
              bin,
              ...args,
            ],
            { stdio: ["ignore", "pipe", "pipe"] },
          );
    this.child.stdout?.on("data", (d: Buffer) => (this.output += d.toString()));
    this.child.stderr?.on("data", (d: Buffer) => (this.output += d.toString()));
    this.exited = new Promise((resolve) => this.child.once("exit", (code) => resolve(code)));
  }

  /** Waits until the output matches `pattern` (generous by default: a process starting on a loaded machine is slow); returns the match. */
  async waitFor(pattern: RegExp, timeoutMs = 60_000): Promise<RegExpMatchArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = this.output.match(pattern);
      if (m !== null) return m;
      if (this.child.exitCode !== null)
        throw new Error(
          `process exited (${this.child.exitCode}) before printing ${pattern}:\n${this.output}`,
        );
      if (Date.now() > deadline)
        throw new Error(`no ${pattern} within ${timeoutMs} ms; output so far:\n${this.output}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  /** Sends SIGTERM and returns the exit code. */
  async stop(): Promise<number | null> {
    if (this.child.exitCode === null) this.child.kill("SIGTERM");
    return this.exited;
  }
}

/** Runs kds-mux to completion; `input` goes to stdin, `env` adds environment variables. */
export function run(
  args: string[],
  input?: string,
  env: Record<string, string> = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bin, ...args], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, ...env },
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.once("exit", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input ?? "");
  });
}

/** Calls `work` until `ok` accepts its value (every 200 ms); fails with the last value after `timeoutMs`. */
export async function until<T>(
  work: () => Promise<T>,
  ok: (value: T) => boolean,
  what: string,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await work();
    if (ok(value)) return value;
    if (Date.now() > deadline)
      throw new Error(
        `timed out waiting for ${what}; last: ${JSON.stringify(value, (_key, v: unknown) => (v instanceof Set ? [...(v as Set<unknown>)] : v))}`,
      );
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** A global started by {@link startDevGlobal}: its process and the two addresses it printed. */
export interface DevGlobal {
  readonly process: KdsProcess;
  /** Where zones dial it. */
  readonly zonesUrl: string;
  /** Its admin API. */
  readonly adminUrl: string;
}

/**
 * Starts `kds-mux global` on loopback ports the OS picks, with a memory store and
 * no zone authentication (as most CLI tests want) and the flags in `extra`, adds it
 * to `processes` (to be stopped by the test) and waits until it says where it listens.
 */
export async function startDevGlobal(
  processes: KdsProcess[],
  extra: readonly string[] = [],
): Promise<DevGlobal> {
  const global = new KdsProcess([
    "global",
    "--listen",
    "127.0.0.1:0",
    "--admin-listen",
    "127.0.0.1:0",
    "--store",
    "memory",
    "--insecure-no-zone-auth",
    ...extra,
  ]);
  processes.push(global);
  const m = await global.waitFor(
    /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
    90_000,
  );
  return { process: global, zonesUrl: m[1] as string, adminUrl: m[2] as string };
}
