// Every relative link and #anchor in README.md, CHANGELOG.md, SECURITY.md and docs/**/*.md resolves: the
// file exists, and the anchor is a heading of it, slugged as GitHub does.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const root = resolve(import.meta.dirname, "../..");

/** The Markdown files checked: README.md, CHANGELOG.md, SECURITY.md and the .md files under docs/, subfolders included (docs/protocol/vectors/README.md). */
function documents(): string[] {
  const docs = readdirSync(join(root, "docs"), { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".md"))
    .map((f) => join(root, "docs", f));
  return [join(root, "README.md"), join(root, "CHANGELOG.md"), join(root, "SECURITY.md"), ...docs];
}

/** `text` without fenced code blocks (their lines blanked, so line numbers hold). */
function withoutFences(text: string): string[] {
  let fence: string | undefined;
  return text.split("\n").map((line) => {
    const marker = /^\s*(```+|~~~+)/.exec(line)?.[1];
    if (fence === undefined && marker !== undefined) {
      fence = marker[0]!.repeat(3);
      return "";
    }
    if (fence !== undefined) {
      if (marker?.startsWith(fence) === true) fence = undefined;
      return "";
    }
    return line;
  });
}

/** A heading's anchor as GitHub makes it (github-slugger): lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  const text = heading
    .replace(/`/g, "")
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1") // a link in a heading keeps its text
    .replace(/<[^>]+>/g, "")
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{N}\p{M}\p{Pc}\- ]/gu, "").replace(/ /g, "-");
}

/** The anchors of a Markdown file's headings, numbered as GitHub numbers repeats. */
function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of withoutFences(readFileSync(file, "utf8"))) {
    const heading = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const base = slug(heading);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const line of withoutFences(readFileSync(file, "utf8"))) {
    for (const m of line.matchAll(/<a\s+(?:name|id)="([^"]+)"/g)) out.add(m[1]!);
  }
  return out;
}

/** Every link target of `file` outside code: inline links, images and reference definitions, with their line. */
function links(file: string): { target: string; line: number }[] {
  const out: { target: string; line: number }[] = [];
  withoutFences(readFileSync(file, "utf8")).forEach((raw, i) => {
    const line = raw.replace(/`[^`]*`/g, "");
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g))
      out.push({ target: m[1]!, line: i + 1 });
    const definition = /^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$/.exec(line);
    if (definition !== null) out.push({ target: definition[1]!, line: i + 1 });
  });
  return out;
}

/** What is wrong with `target` in `file`, or undefined when it resolves. */
function broken(file: string, target: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined; // http:, https:, mailto: ...
  const [path = "", anchor] = target.split("#", 2);
  const resolved = path === "" ? file : resolve(dirname(file), decodeURIComponent(path));
  if (!existsSync(resolved)) return `${path} does not exist`;
  if (anchor === undefined || anchor === "") return undefined;
  if (statSync(resolved).isDirectory() || !resolved.endsWith(".md"))
    return `#${anchor} points into a file that is not Markdown`;
  return anchors(resolved).has(decodeURIComponent(anchor))
    ? undefined
    : `#${anchor} is no heading of ${relative(root, resolved)}`;
}

describe("documentation links", () => {
  it("slugs headings as GitHub does", () => {
    expect(slug("Flow control: windows per lane, in frames and bytes")).toBe(
      "flow-control-windows-per-lane-in-frames-and-bytes",
    );
    expect(slug("The Connect protocol's JSON codec")).toBe("the-connect-protocols-json-codec");
    expect(slug("`kds-mux global` -- flags")).toBe("kds-mux-global----flags");
    expect(slug("Ping / pong and 2^19 elements")).toBe("ping--pong-and-219-elements");
  });

  it("finds a broken anchor and a missing file", () => {
    const protocol = join(root, "docs/protocol.md");
    expect(broken(protocol, "#flow-control-windows-per-lane")).toMatch(/is no heading/);
    expect(broken(protocol, "#changelog")).toBeUndefined();
    expect(broken(protocol, "no-such-file.md")).toMatch(/does not exist/);
    expect(broken(protocol, "kinds.md")).toBeUndefined();
  });

  it("resolves every relative link and anchor in README.md, CHANGELOG.md, SECURITY.md and docs/**/*.md", () => {
    const problems: string[] = [];
    let checked = 0;
    for (const file of documents()) {
      for (const { target, line } of links(file)) {
        checked++;
        const problem = broken(file, target);
        if (problem !== undefined)
          problems.push(`${relative(root, file)}:${line}: ${target}: ${problem}`);
      }
    }
    console.log(`checked ${checked} links in ${documents().length} files`);
    expect(checked).toBeGreaterThan(20);
    expect(problems).toEqual([]);
  });
});
