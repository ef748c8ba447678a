// Fails when src/gen differs from what `buf generate` writes for proto/ now,
// and when `buf lint` finds a problem. Runs buf into a temporary directory so
// the working tree is never touched.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const tmp = mkdtempSync(join(tmpdir(), "kds-mux-gen-"));
const run = (args) =>
  execFileSync("npx", ["--no-install", "buf", ...args], { cwd: root, stdio: ["ignore", "pipe", "inherit"] });

function listFiles(dir) {
  const out = [];
  const walk = (d) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(relative(dir, p));
    }
  };
  walk(dir);
  return out.sort();
}

try {
  run(["lint"]);
  run(["generate", "--output", tmp]);
  const fresh = join(tmp, "src/gen");
  const committed = join(root, "src/gen");
  const a = listFiles(fresh);
  const b = listFiles(committed);
  const problems = [];
  for (const f of new Set([...a, ...b])) {
    if (!a.includes(f)) problems.push(`${f}: in src/gen but not generated from proto/`);
    else if (!b.includes(f)) problems.push(`${f}: generated from proto/ but missing in src/gen`);
    else if (!readFileSync(join(fresh, f)).equals(readFileSync(join(committed, f))))
      problems.push(`${f}: differs from the generated output`);
  }
  if (problems.length > 0) {
    console.error(`src/gen is out of date with proto/:\n  ${problems.join("\n  ")}\nRun \`npm run generate\` and commit the result.`);
    process.exit(1);
  }
  console.log(`src/gen matches proto/ (${a.length} files); buf lint passed`);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
