// Fails when the npm exports map (package.json) and the JSR/Deno one
// (deno.json) publish different entry points, versions or licences. npm points at the
// compiled dist/*.js, Deno and JSR at the src/*.ts it is compiled from.
import { readFileSync, existsSync } from "node:fs";

const root = new URL("..", import.meta.url);
const pkg = JSON.parse(readFileSync(new URL("package.json", root), "utf8"));
const deno = JSON.parse(readFileSync(new URL("deno.json", root), "utf8"));
const problems = [];
if (pkg.version !== deno.version)
  problems.push(`version: package.json has ${pkg.version}, deno.json has ${deno.version}`);
if (pkg.license !== deno.license)
  problems.push(`license: package.json has ${pkg.license}, deno.json has ${deno.license}`);
const npmEntries = Object.keys(pkg.exports).sort();
const denoEntries = Object.keys(deno.exports).sort();
if (JSON.stringify(npmEntries) !== JSON.stringify(denoEntries)) {
  problems.push(
    `entry points differ: package.json ${npmEntries.join(", ")}; deno.json ${denoEntries.join(", ")}`,
  );
}
for (const entry of npmEntries) {
  const compiled = pkg.exports[entry]?.default;
  const source = deno.exports[entry];
  if (typeof compiled !== "string" || typeof source !== "string") continue;
  const expected = compiled.replace(/^\.\/dist\//, "./src/").replace(/\.js$/, ".ts");
  if (expected !== source)
    problems.push(
      `"${entry}": package.json builds ${compiled} (from ${expected}) but deno.json exports ${source}`,
    );
  if (!existsSync(new URL(source, root))) problems.push(`"${entry}": ${source} does not exist`);
  const types = pkg.exports[entry]?.types;
  if (types !== compiled.replace(/\.js$/, ".d.ts"))
    problems.push(`"${entry}": types ${types} do not sit beside ${compiled}`);
}
if (problems.length > 0) {
  console.error(`package.json and deno.json disagree:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
console.log(`export maps agree (${npmEntries.length} entry points, version ${pkg.version})`);
