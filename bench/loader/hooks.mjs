// A Node module hook that compiles the project's .ts files with esbuild the
// way tsc compiles them for dist/, so the benchmarks measure the code users
// run. tsx (which tests use) compiles with esbuild's keepNames: it wraps
// every named function and closure in a helper that redefines its `name`,
// which gives each closure a dictionary of properties of its own (256 bytes
// on V8) and a call at every creation. On a global holding 1,000 idle zones
// that was 80,000 closures, 20 KiB of heap per zone that the compiled
// package does not hold (a heap snapshot of bench/fanout.ts, 1,000 zones).
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { transform } from "esbuild";

/** What tsconfig.json sets that changes emitted code (target and import elision). */
const tsconfigRaw = {
  compilerOptions: { target: "ES2022", useDefineForClassFields: true, verbatimModuleSyntax: true },
};

/** Node's load hook: a file:// URL ending in .ts is compiled, anything else loads as usual. */
export async function load(url, context, nextLoad) {
  if (!url.startsWith("file:") || !url.endsWith(".ts")) return nextLoad(url, context);
  const path = fileURLToPath(url);
  const result = await transform(await readFile(path, "utf8"), {
    loader: "ts",
    format: "esm",
    target: "node20",
    sourcefile: path,
    sourcemap: "inline",
    keepNames: false,
    tsconfigRaw,
  });
  return { format: "module", source: result.code, shortCircuit: true };
}
