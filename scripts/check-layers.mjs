// `npm run check:layers` (a step of `npm test`): every import between folders
// of src/ points down the layer order of docs/architecture.md. Parses each
// relative import, static or dynamic, type-only or not, of every src/**/*.ts,
// maps both ends to their floor, and fails listing each arrow that points up
// (or sideways between siblings not listed in SIBLINGS).
//
//   node scripts/check-layers.mjs
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";

/**
 * The floors, top to bottom. A unit is a folder of src/ or a file at its top;
 * each imports only from its own unit, from a floor below, or from a sibling
 * on its floor along an arrow listed in SIBLINGS.
 */
export const FLOORS = [
  ["cli"],
  ["adapters"],
  ["conformance"],
  ["admin"],
  ["global", "zone"],
  ["transport", "rpc"],
  ["sync", "auth"],
  ["discovery"],
  ["mux"],
  ["store", "kinds", "observe", "util"],
  [
    "errors.ts",
    "log.ts",
    "metrics.ts",
    "connect-errors.ts",
    "names.ts",
    "version.ts",
    "schema.ts",
    "gen",
  ],
];

/** Imports allowed between siblings on one floor ("from -> to"); the reverse arrow is not. */
export const SIBLINGS = new Set([
  "store -> kinds", // a store holds resources of the kind model
  "store -> util",
  "observe -> store", // the readiness probe checks a store
  "observe -> util",
  "names.ts -> errors.ts",
  "connect-errors.ts -> errors.ts", // maps KdsError codes to Connect codes
  "schema.ts -> gen", // the kds-mux/schema entry point re-exports the generated messages
]);

/** The root entry point re-exports every layer. */
const ANY = new Set(["index.ts"]);

const SRC = resolve(dirname(new URL(import.meta.url).pathname), "..", "src");
const IMPORT =
  /(?:^|[\s;}])(?:import|export)\s+(?:type\s+)?(?:[^'";]*?\sfrom\s*)?["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/g;

/** The unit of a path inside src/: its top folder, or its file name at the top. */
export function unitOf(file) {
  return relative(SRC, file).split(sep)[0];
}

/** The floor index of a unit (0 is the top), or undefined for a unit no floor names. */
export function floorOf(unit) {
  const index = FLOORS.findIndex((floor) => floor.includes(unit));
  return index === -1 ? undefined : index;
}

/** Every relative import of `source`, as written. */
export function importsOf(source) {
  const found = [];
  const code = source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:])\/\/.*$/gm, "$1");
  for (const m of code.matchAll(IMPORT)) {
    const spec = m[1] ?? m[2];
    if (spec.startsWith(".")) found.push(spec);
  }
  return found;
}

/**
 * The arrows of `files` that break the order, as "file -> imported file (why)",
 * and how many imports between units were checked.
 */
export function violations(files, read = (f) => readFileSync(f, "utf8")) {
  const found = [];
  let checked = 0;
  for (const file of files) {
    const from = unitOf(file);
    if (ANY.has(from)) continue;
    const fromFloor = floorOf(from);
    if (fromFloor === undefined) {
      found.push(
        `src/${relative(SRC, file)}: src/${from} is on no floor of scripts/check-layers.mjs`,
      );
      continue;
    }
    for (const spec of importsOf(read(file))) {
      const target = resolve(dirname(file), spec);
      const to = unitOf(target);
      if (to === from || to.startsWith("..")) continue;
      checked++;
      const toFloor = floorOf(to);
      const arrow = `src/${relative(SRC, file)} -> src/${relative(SRC, target)}`;
      if (toFloor === undefined) found.push(`${arrow} (src/${to} is on no floor)`);
      else if (toFloor < fromFloor) found.push(`${arrow} (${from} imports ${to}, a floor above)`);
      else if (toFloor === fromFloor && !SIBLINGS.has(`${from} -> ${to}`))
        found.push(`${arrow} (${from} -> ${to}: siblings, not an allowed arrow)`);
    }
  }
  return { found, checked };
}

function sources(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith(".ts") ? [path] : [];
  });
}

if (process.argv[1] === new URL(import.meta.url).pathname) {
  const files = sources(SRC);
  const { found, checked } = violations(files);
  if (found.length > 0) {
    console.error(`${found.length} import(s) against the layer order (docs/architecture.md):`);
    for (const line of found) console.error(`  ${line}`);
    process.exit(1);
  }
  console.log(
    `layers: ${checked} imports between folders of ${files.length} files in src/, every one points down`,
  );
}
