// The TypeScript in README.md and docs/*.md is code that compiles and runs:
// a ```ts block names its file (```ts file=examples/readme/sync.ts), and the
// block is that file's `#region readme`, with its imports spelled as a user
// of the package spells them ("kds-mux", "kds-mux/node"). `npm run
// typecheck` checks the files (examples/ is in tsconfig.json); this test
// checks that the Markdown quotes them exactly, that README.md has no
// TypeScript block that does not, and runs them.
import { execFile } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const root = resolve(import.meta.dirname, "../..");
const exec = promisify(execFile);

/** Import specifiers as the example files write them -> as the Markdown shows them. */
function specifiers(): Map<string, string> {
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
    exports: Record<string, { types: string }>;
  };
  const out = new Map<string, string>();
  for (const [subpath, entry] of Object.entries(pkg.exports)) {
    const source = entry.types.replace(/^\.\/dist\//, "../../src/").replace(/\.d\.ts$/, ".ts");
    out.set(source, subpath === "." ? "kds-mux" : `kds-mux${subpath.slice(1)}`);
  }
  // The own-kinds project's generated code, as that project imports it (buf generate into src/gen).
  out.set("../own-kinds/src/gen/acme/v1/kinds_pb.ts", "./gen/acme/v1/kinds_pb.js");
  return out;
}

/** What the Markdown shows of `file`: its `#region readme`, imports respelled. */
function quoted(file: string): string {
  const text = readFileSync(join(root, file), "utf8");
  const region = /\/\/ #region readme\n([\s\S]*?)\/\/ #endregion readme\n/.exec(text)?.[1];
  if (region === undefined)
    throw new Error(`${file} has no // #region readme ... // #endregion readme`);
  let out = region;
  for (const [from, to] of specifiers()) out = out.replaceAll(`"${from}"`, `"${to}"`);
  return out;
}

interface Block {
  doc: string;
  line: number;
  info: string;
  body: string;
}

/** The fenced code blocks of a Markdown file. */
function blocks(doc: string): Block[] {
  const out: Block[] = [];
  const lines = readFileSync(join(root, doc), "utf8").split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = /^(```+)(.*)$/.exec(lines[i]!);
    if (open === null) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !lines[i]!.startsWith(open[1]!); i++) body.push(lines[i]!);
    out.push({ doc, line: start + 1, info: open[2]!.trim(), body: `${body.join("\n")}\n` });
  }
  return out;
}

const documents = [
  "README.md",
  ...readdirSync(join(root, "docs"))
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
];

describe("TypeScript in the docs", () => {
  const all = documents.flatMap(blocks);
  const quotes = all.filter((b) => /^ts\s+file=/.test(b.info));

  it("quotes each example file exactly", () => {
    expect(quotes.length).toBeGreaterThanOrEqual(2);
    for (const block of quotes) {
      const file = /file=(\S+)/.exec(block.info)![1]!;
      expect(block.body, `${block.doc}:${block.line} quotes ${file}`).toBe(quoted(file));
    }
  });

  it("has no TypeScript block in README.md that is not a quoted, type-checked file", () => {
    const loose = all.filter(
      (b) => b.doc === "README.md" && /^(ts|typescript)\b/.test(b.info) && !/file=/.test(b.info),
    );
    expect(loose.map((b) => `${b.doc}:${b.line}`)).toEqual([]);
  });

  it("tells a region that changed from one that still matches", () => {
    const file = "examples/readme/sync.ts";
    expect(quoted(file)).toContain('from "kds-mux";');
    expect(quoted(file)).not.toContain("../../src");
    expect(`${quoted(file)}// one more line\n`).not.toBe(quoted(file));
  });

  it("runs the quoted files", async () => {
    const tsx = join(root, "node_modules/.bin/tsx");
    const sync = await exec(tsx, [join(root, "examples/readme/sync.ts")], { timeout: 60_000 });
    expect(sync.stdout).toContain(
      'Gateway "edge" reached the zone; Workload "zone-east.web-1" reached the global',
    );
    expect(sync.stdout).toContain("zone-east online: true");
    const network = await exec(tsx, [join(root, "examples/readme/network.ts")], {
      timeout: 60_000,
    });
    expect(network.stdout).toContain("nonce: 'g-1'");
  }, 120_000);
});
