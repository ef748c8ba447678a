// README.md and docs/*.md are reference: what is true now and how to
// reproduce it. The README stays a front page (at most 250 lines), the
// performance page holds the latest figures and the capacity model (at most
// 400 lines), and no page tells the story of how or when it was written:
// that goes to CHANGELOG.md.
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const root = resolve(import.meta.dirname, "../..");

/** README.md and every docs/*.md, as paths from the root. */
function pages(): string[] {
  return [
    "README.md",
    ...readdirSync(join(root, "docs"))
      .filter((f) => f.endsWith(".md"))
      .map((f) => `docs/${f}`),
  ];
}

/** Phrases that narrate a page's own history rather than state what holds. */
const NARRATION: readonly RegExp[] = [
  /\bthe session from \d{1,2}:\d{2}\b/i,
  /\bthis session's\b/i,
  /\b(an|the) earlier runs?\b/i,
  /\bearlier runs\b/i,
  /\bthe run above\b/i,
  /\bissue \d+ found\b/i,
  /\bbefore this (work|change|session)\b/i,
  /\b(another|a third) helper\b/i,
];

/** The narrating phrases of `text` (line breaks read as spaces), with their line. */
function narration(text: string): { line: number; phrase: string }[] {
  const out: { line: number; phrase: string }[] = [];
  const lines = text.split("\n");
  lines.forEach((line, i) => {
    // A phrase may run over a line break: look at this line and the start of the next.
    const window = `${line} ${(lines[i + 1] ?? "").trimStart().split(" ").slice(0, 4).join(" ")}`;
    for (const pattern of NARRATION) {
      const m = pattern.exec(window);
      if (m !== null && m.index < line.length) out.push({ line: i + 1, phrase: m[0] });
    }
  });
  return out;
}

const lineCount = (file: string): number =>
  readFileSync(join(root, file), "utf8").trimEnd().split("\n").length;

describe("docs read as reference", () => {
  it("tells narration from reference", () => {
    expect(narration("the code of the session from 12:14 UTC").map((n) => n.phrase)).toEqual([
      "the session from 12:14",
    ]);
    // Over a line break, reported on the line where it starts.
    expect(narration("On the code of the session from\n12:14 UTC, all targets are met.")).toEqual([
      { line: 1, phrase: "the session from 12:14" },
    ]);
    expect(narration("ready in 522 ms (371 ms in an\nearlier run)").map((n) => n.line)).toEqual([
      1,
    ]);
    expect(narration("Issue 24 found that byte credit")).toHaveLength(1);
    expect(narration("A session ends when its peer goes quiet; its next session resumes.")).toEqual(
      [],
    );
  });

  it("keeps README.md to a front page and docs/performance.md to one reference page", () => {
    expect(lineCount("README.md")).toBeLessThanOrEqual(250);
    expect(lineCount("docs/performance.md")).toBeLessThanOrEqual(400);
  });

  it("has no page that narrates how or when it was written", () => {
    const found = pages().flatMap((file) =>
      narration(readFileSync(join(root, file), "utf8")).map(
        ({ line, phrase }) => `${file}:${line}: "${phrase}"`,
      ),
    );
    expect(found).toEqual([]);
  });
});
