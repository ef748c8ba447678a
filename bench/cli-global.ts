// The CLI's global as a bench runs it (bench/restart-storm.ts, bench/scale.ts,
// bench/churn.ts): `kds-mux global` compiled to one file, started as a child
// process on a PostgreSQL store, logging into a file, and the URLs it prints
// once it listens; asking its probe, and stopping it and the zone processes.
import { build } from "esbuild";
import { spawn, type ChildProcess, type StdioOptions } from "node:child_process";
import { closeSync, openSync, readFileSync, statSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { childNodeArgs } from "./fresh.ts";

const cli = fileURLToPath(new URL("../src/cli/run.ts", import.meta.url));
/**
 * The globals run the CLI compiled to one JavaScript file (its packages imported from node_modules),
 * as a deployed global runs compiled code: through bench/loader every start first compiled each of the
 * CLI's TypeScript modules, 1.4 s of a restart at a load of 9 and more under load, which a real
 * restart does not spend. bench/results is not tracked; the kind file the CLI finds next to
 * its sources (../../examples) resolves the same from there.
 */
export const compiledCli = fileURLToPath(new URL("./results/storm-global.mjs", import.meta.url));

/** Compiles the CLI into {@link compiledCli} (esbuild, a few hundred ms). */
export async function compileCli(): Promise<void> {
  await build({
    entryPoints: [cli],
    outfile: compiledCli,
    bundle: true,
    packages: "external",
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "error",
  });
}

/** How to start one global. */
export interface CliGlobalOptions {
  /** The PostgreSQL store's URL (`--store`). */
  readonly storeUrl: string;
  /** `--listen`, e.g. 127.0.0.1:0. */
  readonly listen: string;
  /** The file its output is appended to; the URLs are read from what it writes there after the start. */
  readonly logFile: string;
  /** More CLI arguments after `global --listen --admin-listen --store`. */
  readonly args: readonly string[];
  /** Node flags before the compiled CLI (after KDS_BENCH_CHILD_ARGS), e.g. `--import` of a probe. */
  readonly nodeArgs?: readonly string[];
  /** Open an IPC channel to it (the child's fourth stdio). */
  readonly ipc?: boolean;
  /** How long it may take to listen. */
  readonly limitMs: number;
}

/** A started global: its process, and its zone and admin URLs once it listens. */
export interface CliGlobal {
  readonly child: ChildProcess;
  readonly urls: Promise<{ mux: string; admin: string }>;
}

/** Starts `kds-mux global` compiled ({@link compileCli} first). */
export function startCliGlobal(options: CliGlobalOptions): CliGlobal {
  // The global logs into a file, not a pipe: a pipe blocks the global's log writes whenever this
  // process, busy and on a loaded machine, is slow to read it (a 1,000-zone resume spent 7-9% of its
  // CPU blocked writing its "connected" lines). Several globals may append to the same file, one
  // after the other.
  const from = statSync(options.logFile, { throwIfNoEntry: false })?.size ?? 0;
  const log = openSync(options.logFile, "a");
  const stdio: StdioOptions = [
    "ignore",
    log,
    log,
    ...(options.ipc === true ? ["ipc" as const] : []),
  ];
  // The global runs compiled (see compiledCli), with KDS_BENCH_CHILD_ARGS (e.g. --cpu-prof).
  const child = spawn(
    process.execPath,
    [
      ...childNodeArgs(),
      ...(options.nodeArgs ?? []),
      compiledCli,
      "global",
      "--listen",
      options.listen,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      options.storeUrl,
      ...options.args,
    ],
    { stdio },
  );
  closeSync(log);
  const urls = (async () => {
    const started = performance.now();
    for (;;) {
      const text = readFileSync(options.logFile, "utf8").slice(from);
      const m =
        /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/.exec(
          text,
        );
      if (m !== null) return { mux: m[1] as string, admin: m[2] as string };
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(
          `the global exited (${child.exitCode ?? child.signalCode}) before listening:\n${text}`,
        );
      if (performance.now() - started > options.limitMs)
        throw new Error(`the global did not listen within ${options.limitMs / 1000} s:\n${text}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return { child, urls };
}

/**
 * Sends `message` to a global started with `ipc` and a probe loaded
 * (bench/scale-probe.ts answers it) and waits for its reply holding `key`;
 * rejects when the global exits first.
 */
export function askProbe(
  child: ChildProcess,
  message: object,
  key: string,
): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: Record<string, unknown>): void => {
      if (!(key in m)) return;
      child.off("message", onMessage);
      child.off("exit", onExit);
      resolve(m);
    };
    const onExit = (): void => reject(new Error(`the global exited before answering ${key}`));
    child.on("message", onMessage);
    child.once("exit", onExit);
    child.send(message);
  });
}

/**
 * Stops a global (SIGKILL, if it still runs) and says on stderr how many
 * ERROR lines its log file holds, with the first, prefixed by `bench`.
 */
export async function stopCliGlobal(
  global: CliGlobal & { readonly log: string },
  bench: string,
): Promise<void> {
  const child = global.child;
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await exited;
  }
  const errors = readFileSync(global.log, "utf8")
    .split("\n")
    .filter((l) => / ERROR /.test(l));
  if (errors.length > 0)
    process.stderr.write(
      `${bench}: ${global.log}: ${errors.length} errors; the first: ${errors[0]}\n`,
    );
}

/**
 * Ends bench/fanout-zones.ts processes: their stdin closes, which stops
 * their zones; one that has not exited after 30 s (starved of CPU) is
 * SIGKILLed.
 */
export async function stopZoneProcesses(
  processes: readonly (ChildProcess & { readonly stdin: { end(): void } })[],
): Promise<void> {
  for (const z of processes) z.stdin.end();
  await Promise.all(
    processes.map((z) =>
      z.exitCode !== null || z.signalCode !== null
        ? undefined
        : new Promise((r) => {
            const timer = setTimeout(() => z.kill("SIGKILL"), 30_000);
            z.once("exit", () => r(clearTimeout(timer)));
          }),
    ),
  );
}
