// `npm run check:package`: what a user installs is what this checks. It packs
// the package (prepack builds dist/ from a clean folder), then, on the tarball:
//
//   files     what `npm pack` ships: every exports target, bin, LICENSE,
//             CHANGELOG.md, SECURITY.md; no tests, benchmarks or scripts
//   publint   publint on the tarball, no message of any level
//   attw      @arethetypeswrong/cli on the tarball, profile esm-only (the
//             package is ESM only: no `require` entry and no node10 types)
//   node      every exports subpath imported on each pinned Node line
//             (scripts/node-lines.mjs), and the kds-mux bin run from the install
//   deno      the same imports on Deno (node_modules resolution)
//   bun       the same imports on Bun
//   tsc       a TypeScript consumer that imports every subpath and names every
//             export the runtime saw, under moduleResolution node16, nodenext
//             and bundler, strict and without skipLibCheck
//   jsr       `deno publish --dry-run` on the sources (deno.json)
//
// How the tarball is installed, offline: it is unpacked into
// <tmp>/node_modules/kds-mux as npm would, and each dependency the tarball's
// package.json declares (dependencies, and the optionalDependencies installed
// on this machine) is a symlink to this checkout's node_modules/<name>. Nothing
// else is linked, so an import of a package the tarball does not declare fails
// here as it would for a user. `npm install <tarball> --offline` was not used:
// it resolves version ranges of the dependencies' own dependencies from
// registry metadata, which `npm ci` does not put in npm's cache, so it needs
// the network on a fresh machine; the links need nothing but `npm ci`.
// The Node binaries come from npm's cache (see scripts/node-lines.mjs).
//
//   node scripts/check-package.mjs          every step
//   node scripts/check-package.mjs --keep   keep the temp folder (its path is printed)
import { execFile } from "node:child_process";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { NODE_LINES, nodeBinary } from "./node-lines.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const bin = (name) => join(root, "node_modules", ".bin", name);
const keep = process.argv.includes("--keep");
/** Bound of one command (the slowest, a tsc run, took 73 s at load average 15 on 2 cores). */
const COMMAND_TIMEOUT_MS = 5 * 60_000;
const started = performance.now();
const results = [];

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const subpaths = Object.keys(pkg.exports).map((key) =>
  key === "." ? pkg.name : `${pkg.name}/${key.slice(2)}`,
);

const tmp = await mkdtemp(join(tmpdir(), "kds-mux-package-"));
try {
  await main();
} finally {
  if (keep) console.log(`kept ${tmp}`);
  else await rm(tmp, { recursive: true, force: true });
}
const failed = results.filter((r) => !r.passed);
console.log(
  `\npackage check: ${results.length - failed.length} passed, ${failed.length} failed in ${((performance.now() - started) / 1000).toFixed(1)} s`,
);
process.exit(failed.length > 0 ? 1 : 0);

async function main() {
  checkEngines();
  // Three things that do not need each other: the tarball (a build), the
  // Node binaries (file copies) and the JSR dry run (a type check of src/).
  const jsr = step("jsr", () => denoPublishDryRun());
  const nodes = Promise.all(NODE_LINES.map((line) => nodeBinary(line)));
  nodes.catch(() => undefined); // Awaited (and its failure reported) by the "node binaries" step below.
  const tarball = await pack();
  if (tarball === undefined) {
    await jsr;
    return;
  }
  const consumer = await install(tarball);
  const nodePaths = await step("node binaries", async () => ({
    detail: NODE_LINES.map((l) => l.version).join(", "),
    value: await nodes,
  }));
  // The first Node line's export lists are what every other runtime and the
  // TypeScript consumer must agree with.
  const [first, ...rest] = NODE_LINES.map((line, index) => ({ line, index }));
  const reference =
    nodePaths === undefined
      ? undefined
      : await step(`node ${first.line.version}`, () =>
          nodeSmoke(consumer, nodePaths[first.index], undefined),
        );
  const checks = [
    ["publint", () => publint(tarball)],
    ["attw", () => attw(tarball)],
    ...(nodePaths === undefined
      ? []
      : rest.map(({ line, index }) => [
          `node ${line.version}`,
          () => nodeSmoke(consumer, nodePaths[index], reference),
        ])),
    [
      "deno",
      () =>
        smoke(
          consumer,
          "deno",
          [bin("deno"), "run", "--allow-all", "--no-lock", "--cached-only", "smoke.mjs"],
          reference,
        ),
    ],
    ["bun", () => smoke(consumer, "bun", [bin("bun"), "--no-install", "smoke.mjs"], reference)],
    ...["node16", "nodenext", "bundler"].map((mode) => [
      `tsc ${mode}`,
      () => typecheck(consumer, mode, reference),
    ]),
  ];
  // Two at a time: the machine has two cores, and the JSR dry run is still going.
  await pool(checks, 2);
  await jsr;
}

/** Runs the named checks, at most `width` at once. */
async function pool(checks, width) {
  const queue = [...checks];
  const worker = async () => {
    for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
      await step(next[0], next[1]);
    }
  };
  await Promise.all(Array.from({ length: width }, worker));
}

/** Runs one named check, records and prints its result; resolves with its value (undefined if it failed). */
async function step(name, fn) {
  const t0 = performance.now();
  try {
    const outcome = (await fn()) ?? {};
    const seconds = (performance.now() - t0) / 1000;
    results.push({ name, passed: true });
    console.log(
      `pass  ${name} (${seconds.toFixed(1)} s)${outcome.detail ? `: ${outcome.detail}` : ""}`,
    );
    return outcome.value ?? outcome;
  } catch (error) {
    const seconds = (performance.now() - t0) / 1000;
    results.push({ name, passed: false });
    console.log(`FAIL  ${name} (${seconds.toFixed(1)} s): ${error.message}`);
    return undefined;
  }
}

/** engines.node names exactly the pinned lines, so it says what is tested. */
function checkEngines() {
  const expected = NODE_LINES.map((l) => `^${l.version}`).join(" || ");
  if (pkg.engines?.node !== expected) {
    results.push({ name: "engines", passed: false });
    console.log(
      `FAIL  engines: package.json engines.node is "${pkg.engines?.node}", but the lines tested are "${expected}" (scripts/node-lines.mjs): make them agree`,
    );
  } else {
    results.push({ name: "engines", passed: true });
    console.log(`pass  engines: ${expected}`);
  }
}

/** `npm pack` (its prepack builds dist/) and the checks on the list of files; resolves with the tarball's path. */
async function pack() {
  let tarball;
  await step("pack", async () => {
    const out = join(tmp, "pack");
    await mkdir(out);
    const { stdout } = await exec("npm", ["pack", "--json", "--pack-destination", out], {
      cwd: root,
    });
    // npm prints the prepack build's output first; the JSON array starts a line.
    const json = [...stdout.matchAll(/^\[\s*\{/gm)].at(-1);
    if (json === undefined) throw new Error(`npm pack --json printed no JSON:\n${stdout}`);
    const [packed] = JSON.parse(stdout.slice(json.index));
    const files = new Set(packed.files.map((f) => f.path));
    const problems = [];
    for (const required of [
      "package.json",
      "README.md",
      "LICENSE",
      "CHANGELOG.md",
      "SECURITY.md",
    ]) {
      if (!files.has(required)) problems.push(`${required} is not in the tarball`);
    }
    // The protocol and its test vectors are for implementers in other languages: they ship.
    if (!files.has("docs/protocol.md")) problems.push("docs/protocol.md is not in the tarball");
    const vectors = [...files].filter((f) => /^docs\/protocol\/vectors\/[^/]+\.json$/.test(f));
    if (vectors.length < 60)
      problems.push(
        `only ${vectors.length} protocol test vectors (docs/protocol/vectors/*.json) are in the tarball`,
      );
    for (const target of Object.values(pkg.bin ?? {})) {
      if (!files.has(target.replace(/^\.\//, "")))
        problems.push(`bin ${target} is not in the tarball`);
    }
    for (const [key, conditions] of Object.entries(pkg.exports)) {
      for (const target of Object.values(conditions)) {
        if (!files.has(target.replace(/^\.\//, "")))
          problems.push(`exports "${key}" -> ${target} is not in the tarball`);
      }
    }
    const shipped = [...files];
    for (const path of shipped) {
      if (
        /^(test|bench|scripts|\.ci|node_modules)\//.test(path) ||
        /\.test\.[cm]?[jt]s$/.test(path)
      )
        problems.push(`${path} is shipped (tests, benchmarks and scripts stay out)`);
    }
    // Every compiled file has its source: a dist/ file left over from a
    // source that moved or was deleted would ship dead code.
    for (const path of shipped) {
      const match = /^dist\/(.*)\.(?:js|d\.ts|js\.map)$/.exec(path);
      if (match !== null && !files.has(`src/${match[1]}.ts`))
        problems.push(`${path} has no source src/${match[1]}.ts (a stale build?)`);
    }
    if (problems.length > 0) throw new Error(`\n  ${problems.join("\n  ")}`);
    tarball = join(out, packed.filename);
    return {
      detail: `${packed.filename}, ${shipped.length} files, ${(packed.size / 1024).toFixed(0)} KiB packed, ${(packed.unpackedSize / 1024 / 1024).toFixed(1)} MiB unpacked`,
    };
  });
  return tarball;
}

/** Unpacks the tarball as npm would and links the dependencies it declares; resolves with the consumer folder. */
async function install(tarball) {
  const consumer = join(tmp, "consumer");
  const target = join(consumer, "node_modules", pkg.name);
  await mkdir(target, { recursive: true });
  await exec("tar", ["-xzf", tarball, "-C", target, "--strip-components=1"]);
  const installed = JSON.parse(await readFile(join(target, "package.json"), "utf8"));
  const wanted = [
    ...Object.keys(installed.dependencies ?? {}).map((name) => ({ name, optional: false })),
    ...Object.keys(installed.optionalDependencies ?? {}).map((name) => ({ name, optional: true })),
    // What a TypeScript consumer on Node installs beside it.
    { name: "@types/node", optional: false },
    // A consumer that has tsx: the bin must still run the compiled dist/.
    { name: "tsx", optional: false },
  ];
  for (const { name, optional } of wanted) {
    const source = join(root, "node_modules", name);
    if (!existsSync(source)) {
      if (optional) continue;
      throw new Error(`${name} is a dependency of the tarball but not installed here: run npm ci`);
    }
    const link = join(consumer, "node_modules", name);
    await mkdir(dirname(link), { recursive: true });
    await symlink(realpathSync(source), link, "dir");
  }
  // The tarball ships src/ beside dist/ (for source maps). Were the bin to run
  // the TypeScript sources in an install (it does so in a checkout), this
  // file says so.
  await writeFile(
    join(target, "src", "cli", "run.ts"),
    'throw new Error("the installed bin ran src/cli/run.ts instead of dist/cli/run.js");\n',
  );
  await writeFile(
    join(consumer, "package.json"),
    `${JSON.stringify({ name: "kds-mux-consumer", private: true, type: "module", dependencies: { [pkg.name]: installed.version } }, null, 2)}\n`,
  );
  await writeFile(
    join(consumer, "smoke.mjs"),
    `// Imports every subpath of ${pkg.name}'s exports map; prints each one's export names.
const subpaths = ${JSON.stringify(subpaths)};
const exports = {};
for (const subpath of subpaths) exports[subpath] = Object.keys(await import(subpath)).sort();
const runtime = globalThis.Deno ? "deno " + Deno.version.deno : globalThis.Bun ? "bun " + Bun.version : "node " + process.versions.node;
console.log(JSON.stringify({ runtime, exports }));
`,
  );
  return consumer;
}

/** Runs smoke.mjs on one runtime; checks every subpath has exports, the same ones `reference` saw. */
async function smoke(consumer, label, [command, ...args], reference) {
  const { stdout } = await exec(command, args, {
    cwd: consumer,
    env: { ...process.env, NO_COLOR: "1" },
  });
  const line = stdout.trim().split("\n").at(-1);
  const seen = JSON.parse(line);
  const problems = [];
  for (const subpath of subpaths) {
    const names = seen.exports[subpath] ?? [];
    if (names.length === 0) problems.push(`${subpath} has no exports`);
    if (reference !== undefined) {
      const want = reference.exports[subpath];
      if (JSON.stringify(names) !== JSON.stringify(want))
        problems.push(
          `${subpath} exports ${names.join(", ")}; ${reference.runtime} saw ${want.join(", ")}`,
        );
    }
  }
  if (problems.length > 0) throw new Error(`${label}: ${problems.join("; ")}`);
  const total = Object.values(seen.exports).reduce((sum, names) => sum + names.length, 0);
  return { detail: `${seen.runtime}: ${subpaths.length} subpaths, ${total} exports`, value: seen };
}

/** The import smoke on one Node binary, then the installed bin's --help on it. */
async function nodeSmoke(consumer, node, reference) {
  const seen = await smoke(consumer, "node", [node, "smoke.mjs"], reference);
  const cli = join(consumer, "node_modules", pkg.name, pkg.bin["kds-mux"]);
  const { stdout } = await exec(node, [cli, "--help"], { cwd: consumer });
  if (!stdout.includes("Usage: kds-mux")) throw new Error(`kds-mux --help printed:\n${stdout}`);
  return { detail: `${seen.detail}; bin kds-mux --help ok`, value: seen.value };
}

/** A TypeScript consumer under one moduleResolution: every subpath, every export the runtime saw. */
async function typecheck(consumer, mode, reference) {
  if (reference === undefined) throw new Error("no runtime export list to check the types against");
  const file = join(consumer, `consumer.${mode}.ts`);
  {
    const lines = subpaths.map((subpath, i) => `import * as m${i} from "${subpath}";`);
    lines.push(
      "",
      "// Every runtime export is declared (strict mode also rejects an untyped module, TS7016).",
    );
    lines.push("export const used: unknown[] = [");
    subpaths.forEach((subpath, i) => {
      for (const name of reference.exports[subpath]) lines.push(`  m${i}.${name},`);
    });
    lines.push("];");
    await writeFile(file, `${lines.join("\n")}\n`);
  }
  const module = { node16: "node16", nodenext: "nodenext", bundler: "preserve" }[mode];
  const config = join(consumer, `tsconfig.${mode}.json`);
  await writeFile(
    config,
    JSON.stringify({
      compilerOptions: {
        module,
        moduleResolution: mode,
        target: "ES2022",
        // DOM as well: the types of @connectrpc/connect use HeadersInit, and
        // kds-mux's use CryptoKey (Web Crypto), which @types/node does not declare.
        lib: ["ES2022", "DOM"],
        types: ["node"],
        strict: true,
        noEmit: true,
        // The shipped declarations are checked; TypeScript's own lib files are not.
        skipLibCheck: false,
        skipDefaultLibCheck: true,
      },
      files: [`consumer.${mode}.ts`],
    }),
  );
  await exec(
    process.execPath,
    [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", config],
    {
      cwd: consumer,
    },
  );
  return {
    detail: `${subpaths.length} subpaths, ${Object.values(reference.exports).flat().length} exports named`,
  };
}

async function publint(tarball) {
  const { stdout } = await exec(process.execPath, [
    bin("publint"),
    "run",
    tarball,
    "--strict",
    "--level",
    "suggestion",
  ]);
  if (!/All good!/.test(stdout)) throw new Error(`publint has something to say:\n${stdout}`);
  return { detail: "All good!" };
}

async function attw(tarball) {
  await exec(process.execPath, [
    bin("attw"),
    tarball,
    "--profile",
    "esm-only",
    "--no-definitely-typed",
    "--format",
    "ascii",
    "--no-color",
    "--no-emoji",
  ]);
  return { detail: `profile esm-only, ${subpaths.length} entry points, no problems` };
}

async function denoPublishDryRun() {
  const { stdout, stderr } = await exec(bin("deno"), ["publish", "--dry-run", "--allow-dirty"], {
    cwd: root,
    env: { ...process.env, NO_COLOR: "1" },
  });
  const warnings = `${stdout}\n${stderr}`.match(/^warning\[[^\]]+\]/gm) ?? [];
  return {
    detail: `deno publish --dry-run ok${warnings.length > 0 ? ` (${warnings.join(", ")})` : ""}`,
  };
}

/** execFile with a bound in time; a failure carries the command's output. */
function exec(command, args, options = {}) {
  return new Promise((resolve, reject) => {
    const child = execFile(
      command,
      args,
      {
        timeout: COMMAND_TIMEOUT_MS,
        killSignal: "SIGKILL",
        maxBuffer: 64 * 1024 * 1024,
        ...options,
      },
      (error, stdout, stderr) => {
        if (error) {
          const what = error.killed
            ? `timed out after ${COMMAND_TIMEOUT_MS / 1000} s`
            : `exit ${error.code}`;
          reject(new Error(`${command} ${args.join(" ")}: ${what}\n${stdout}${stderr}`.trimEnd()));
        } else resolve({ stdout, stderr });
      },
    );
    child.stdin?.end();
  });
}
