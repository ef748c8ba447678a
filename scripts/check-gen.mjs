// Fails when generated code (or a descriptor set) differs from what buf
// writes for the protos now, and when `buf lint` finds a problem. Runs buf
// into a temporary directory so the working tree is never touched.
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { bufProjects, buf, root } from "./buf-projects.mjs";

function listFiles(dir) {
  const out = [];
  const walk = (d) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(relative(dir, p));
    }
  };
  if (existsSync(dir)) walk(dir);
  return out.sort();
}

const tmp = mkdtempSync(join(tmpdir(), "kds-mux-gen-"));
const problems = [];
let files = 0;
try {
  for (const [i, project] of bufProjects.entries()) {
    const out = join(tmp, String(i));
    buf(project.dir, ["lint"]);
    buf(project.dir, ["generate", "--output", out]);
    for (const dir of project.generated) {
      const fresh = join(out, dir);
      const committed = join(root, project.dir, dir);
      const where = join(project.dir, dir);
      const a = listFiles(fresh);
      const b = listFiles(committed);
      files += a.length;
      for (const f of new Set([...a, ...b])) {
        if (!a.includes(f))
          problems.push(`${join(where, f)}: committed but not generated from the protos`);
        else if (!b.includes(f))
          problems.push(`${join(where, f)}: generated from the protos but not committed`);
        else if (!readFileSync(join(fresh, f)).equals(readFileSync(join(committed, f))))
          problems.push(`${join(where, f)}: differs from the generated output`);
      }
    }
    if (project.descriptorSet !== undefined) {
      const fresh = join(out, "descriptors.binpb");
      buf(project.dir, ["build", "-o", fresh]);
      const committed = join(root, project.dir, project.descriptorSet);
      files++;
      if (!existsSync(committed))
        problems.push(`${join(project.dir, project.descriptorSet)}: missing`);
      else if (!readFileSync(fresh).equals(readFileSync(committed)))
        problems.push(
          `${join(project.dir, project.descriptorSet)}: differs from \`buf build\` of the protos`,
        );
    }
  }
  if (problems.length > 0) {
    console.error(
      `generated files are out of date with the protos:\n  ${problems.join("\n  ")}\nRun \`npm run generate\` and commit the result.`,
    );
    process.exit(1);
  }
  console.log(
    `generated code matches the protos (${files} files in ${bufProjects.length} buf projects); buf lint passed`,
  );
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
