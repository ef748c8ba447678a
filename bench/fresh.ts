// Runs one scenario in a fresh Node process, so garbage and connections left
// by earlier scenarios do not skew its memory figures. The scenario module
// prints its result as the last line of JSON on stdout when run directly.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

/**
 * Node flags for every child process a scenario starts, from
 * `KDS_BENCH_CHILD_ARGS` (space-separated), e.g. `--cpu-prof
 * --cpu-prof-dir=/tmp/prof` to profile the zones and the global alike
 * (Node refuses --cpu-prof in NODE_OPTIONS).
 */
export function childNodeArgs(): string[] {
  return (process.env.KDS_BENCH_CHILD_ARGS ?? "").split(" ").filter((arg) => arg !== "");
}

/**
 * How the benchmarks load TypeScript: bench/loader compiles it as tsc does
 * for the published package (tsx's keepNames would add a property
 * dictionary to every closure; see bench/loader/hooks.mjs). Pass it to
 * every Node process a scenario starts: `node --import <BENCH_LOADER>`.
 */
export const BENCH_LOADER = new URL("./loader/register.mjs", import.meta.url).href;

/** Runs `module` (a file URL) with `args` under the bench's loader (and `nodeArgs`, e.g. a larger heap) and parses its last stdout line. */
export async function inFreshProcess<T>(
  module: string,
  args: readonly (string | number)[],
  nodeArgs: readonly string[] = [],
): Promise<T> {
  const child = spawn(
    process.execPath,
    [
      ...childNodeArgs(),
      ...nodeArgs,
      "--import",
      BENCH_LOADER,
      fileURLToPath(module),
      ...args.map(String),
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  if (code !== 0)
    throw new Error(`${fileURLToPath(module)} ${args.join(" ")} failed (exit ${code})`);
  return JSON.parse(out.trim().split("\n").at(-1) as string) as T;
}

/** True when `module` (import.meta.url) is the process's entry point. */
export function isMain(module: string): boolean {
  return process.argv[1] === fileURLToPath(module);
}
