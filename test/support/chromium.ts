// Finds a headless Chromium for the browser tests and launches it through
// playwright-core, so the tests need no apt step and no browser download:
//   1. CHROMIUM_PATH, when set (it must point at an executable);
//   2. a system Chromium at one of SYSTEM_CHROMIUM_PATHS;
//   3. the Chromium shipped inside the npm package @sparticuz/chromium
//      (Linux x64 only), unpacked once per version into the OS temp folder.
// Test files that launch Chromium live in test/browser/: `npm test` runs them
// as its own "browser" step (npm run test:browser), apart from the vitest step.
import { existsSync } from "node:fs";
import { mkdtemp, rename, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { chromium, type Browser } from "playwright-core";

/** Where a system (distribution) Chromium usually lives; the first that exists is used. */
export const SYSTEM_CHROMIUM_PATHS = ["/usr/bin/chromium", "/usr/bin/chromium-browser"] as const;

/**
 * Chromium flags for a headless run as root on a closed network: without the
 * background-networking flags Chromium keeps trying (and failing) to reach
 * Google's hosts.
 */
export const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
] as const;

/** Which Chromium {@link launchChromium} picked, and why. */
export interface ChromiumSource {
  readonly executablePath: string;
  readonly from: "CHROMIUM_PATH" | "system" | "@sparticuz/chromium";
}

/**
 * Launches headless Chromium (see the file comment for where it comes from).
 * The caller closes the returned browser.
 */
export async function launchChromium(): Promise<Browser> {
  const source = await findChromium();
  try {
    return await chromium.launch({
      executablePath: source.executablePath,
      args: [...CHROMIUM_ARGS],
      timeout: 60_000,
    });
  } catch (error) {
    throw new Error(
      `could not start Chromium from ${source.from} (${source.executablePath}): ${String(error)}`,
      { cause: error },
    );
  }
}

/** Picks the Chromium {@link launchChromium} starts, unpacking the npm-shipped one when needed. */
export async function findChromium(): Promise<ChromiumSource> {
  const configured = process.env.CHROMIUM_PATH;
  if (configured !== undefined && configured !== "") {
    if (!existsSync(configured))
      throw new Error(
        `CHROMIUM_PATH is ${configured}, but nothing is there: point it at a Chromium executable or unset it`,
      );
    return { executablePath: configured, from: "CHROMIUM_PATH" };
  }
  const system = SYSTEM_CHROMIUM_PATHS.find((path) => existsSync(path));
  if (system !== undefined) return { executablePath: system, from: "system" };
  return { executablePath: await unpackShippedChromium(), from: "@sparticuz/chromium" };
}

/**
 * Unpacks @sparticuz/chromium's brotli-packed binary (about 200 MB unpacked)
 * into `<tmp>/kds-mux-chromium-<version>/` and returns the executable's path.
 * The package itself always unpacks to `<tmp>/chromium` and reuses whatever is
 * there, which races when two test files (or two checkouts) unpack at once and
 * reuses another version's binary. So each call unpacks into its own fresh
 * folder and renames it into place; a rename is atomic, so the final folder is
 * either complete or absent, and the loser of a race throws its copy away.
 */
async function unpackShippedChromium(): Promise<string> {
  if (process.platform !== "linux" || process.arch !== "x64") {
    throw new Error(
      `no Chromium found: @sparticuz/chromium ships one for Linux x64 only (this is ${process.platform}/${process.arch}); ` +
        `install Chromium or set CHROMIUM_PATH to its executable`,
    );
  }
  const require = createRequire(import.meta.url);
  const packageDir = dirname(dirname(dirname(require.resolve("@sparticuz/chromium"))));
  const { version } = require(join(packageDir, "package.json")) as { version: string };
  const finalDir = join(tmpdir(), `kds-mux-chromium-${version}`);
  const finalPath = join(finalDir, "chromium");
  if (existsSync(finalPath)) return finalPath;

  const staging = await mkdtemp(join(tmpdir(), `kds-mux-chromium-${version}-unpacking-`));
  try {
    const { default: shipped } = await import("@sparticuz/chromium");
    // The package unpacks into os.tmpdir(), which reads TMPDIR on every call;
    // it computes every output path synchronously inside executablePath()
    // before its first await, so pointing TMPDIR at the staging folder for the
    // duration of that call redirects all of it. The check below catches a
    // version that stops doing so.
    const previous = process.env.TMPDIR;
    process.env.TMPDIR = staging;
    let unpacking: Promise<string>;
    try {
      unpacking = shipped.executablePath();
    } finally {
      if (previous === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = previous;
    }
    const unpacked = await unpacking;
    if (unpacked !== join(staging, "chromium")) {
      throw new Error(
        `@sparticuz/chromium ${version} unpacked to ${unpacked}, not into ${staging}: check how this version picks its output folder`,
      );
    }
    try {
      await rename(staging, finalDir);
    } catch (error) {
      // Another process renamed its complete copy into place first (ENOTEMPTY
      // or EEXIST); theirs is as good as ours. Anything else is a real failure.
      if (!existsSync(finalPath)) throw error;
    }
    return finalPath;
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}
