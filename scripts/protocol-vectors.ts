// Writes the protocol test vectors (docs/protocol/vectors/*.json) from the
// code's own encoders and limits (src/conformance/vector-cases.ts), one file
// per vector; `--check` only compares and exits 1 when a file differs, is
// missing or is left over.
//   npx tsx scripts/protocol-vectors.ts [--check]
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { protocolVectors, vectorFile } from "../src/conformance/vector-cases.ts";

const dir = resolve(import.meta.dirname, "../docs/protocol/vectors");
const check = process.argv.includes("--check");
const vectors = protocolVectors();
const wanted = new Map(vectors.map((v) => [`${v.name}.json`, vectorFile(v)]));
mkdirSync(dir, { recursive: true });
const present = readdirSync(dir).filter((f) => f.endsWith(".json"));
const problems: string[] = [];
for (const file of present)
  if (!wanted.has(file)) {
    if (check) problems.push(`${file}: no such vector any more`);
    else rmSync(join(dir, file));
  }
for (const [file, text] of wanted) {
  let old: string | undefined;
  try {
    old = readFileSync(join(dir, file), "utf8");
  } catch {
    old = undefined; // a new vector
  }
  if (old === text) continue;
  if (check)
    problems.push(
      `${file}: ${old === undefined ? "missing" : "differs from what the code decides"}`,
    );
  else writeFileSync(join(dir, file), text);
}
if (problems.length > 0) {
  console.error(`${problems.join("\n")}\nregenerate with: npx tsx scripts/protocol-vectors.ts`);
  process.exit(1);
}
const refused = vectors.filter((v) => v.verdict === "refuse").length;
console.log(
  `${check ? "checked" : "wrote"} ${vectors.length} vectors (${refused} refused) in docs/protocol/vectors`,
);
