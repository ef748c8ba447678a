// Bundles the browser zone with esbuild into examples/browser/dist/.
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** Builds the page; returns the directory to serve. */
export async function buildBrowserZone(): Promise<string> {
  const dir = fileURLToPath(new URL("./", import.meta.url));
  const out = `${dir}dist/`;
  mkdirSync(out, { recursive: true });
  await build({
    entryPoints: [`${dir}main.ts`],
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    outfile: `${out}main.js`,
    logLevel: "warning",
  });
  copyFileSync(`${dir}index.html`, `${out}index.html`);
  return out;
}
