// Library errors speak of options; only the CLI names its flags. No string
// literal under src/ outside src/cli holds a `--flag` (except the allowed
// cases below, each with its reason), and the CLI puts its flag in the place
// of an option a library message names.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import ts from "typescript";
import { afterAll, describe, expect, it } from "vitest";
import type { Command } from "commander";
import { cliLogger } from "../../src/cli/logger.ts";
import { program } from "../../src/cli/main.ts";
import { OPTION_FLAGS, withFlags } from "../../src/cli/option-flags.ts";

const root = resolve(import.meta.dirname, "../..");

/** Files that are not library messages at all. */
const SKIPPED: Record<string, string> = {
  "src/observe/status-page-html.ts":
    "the status page's HTML, built by npm run build:page: `--fg` and the like are CSS custom properties",
};

/** Flags allowed in one file, and why. */
const ALLOWED: Record<string, { flags: readonly string[]; why: string }> = {
  "src/adapters/node/embedded-postgres.ts": {
    flags: [
      "--pgdata",
      "--auth",
      "--username",
      "--pwfile",
      "--encoding",
      "--locale",
      "--no-instructions",
      "--system",
      "--user-group",
      "--no-create-home",
    ],
    why: "arguments kds-mux passes to initdb and useradd, and the useradd command it tells root to run",
  },
  "src/observe/page/main.ts": {
    flags: ["--c"],
    why: "the status page's script sets the CSS custom property --c (a legend colour)",
  },
};

/**
 * A flag inside a whole `kds-mux ...` command line the message quotes (the
 * commands that register a zone, issue or revoke a token, rotate a key):
 * those are the operator's tool, told to whoever the global refuses, and a
 * library user's global serves the same admin API the commands call.
 */
function inQuotedCommand(text: string, at: number): boolean {
  return /kds-mux [a-z]/.test(text.slice(0, at));
}

/** Every string literal and template of `file`, templates with their substitutions as `${}`. */
function literals(file: string): { text: string; line: number }[] {
  const source = ts.createSourceFile(
    file,
    readFileSync(file, "utf8"),
    ts.ScriptTarget.Latest,
    true,
    ts.ScriptKind.TS,
  );
  const out: { text: string; line: number }[] = [];
  const visit = (node: ts.Node): void => {
    const line = source.getLineAndCharacterOfPosition(node.getStart()).line + 1;
    if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) {
      out.push({ text: node.text, line });
      return;
    }
    if (ts.isTemplateExpression(node)) {
      const text = [node.head.text, ...node.templateSpans.map((s) => `\${}${s.literal.text}`)];
      out.push({ text: text.join(""), line });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts"))
    .map((e) => join(e.parentPath, e.name));
}

const FLAG = /(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*/g;

describe("library messages name options, not CLI flags", () => {
  it("finds no --flag in a string literal under src/ outside src/cli and src/gen", () => {
    const found: string[] = [];
    let files = 0;
    for (const file of sources(join(root, "src"))) {
      const path = relative(root, file);
      if (path.startsWith("src/cli/") || path.startsWith("src/gen/") || path in SKIPPED) continue;
      files++;
      for (const { text, line } of literals(file)) {
        for (const m of text.matchAll(FLAG)) {
          if (inQuotedCommand(text, m.index)) continue;
          if (ALLOWED[path]?.flags.includes(m[0])) continue;
          found.push(`${path}:${line}: ${m[0]} in ${JSON.stringify(text.slice(0, 120))}`);
        }
      }
    }
    expect(files).toBeGreaterThan(100);
    expect(found).toEqual([]);
  });

  it("would catch a flag in a message, and lets a quoted kds-mux command through", () => {
    const dir = mkdtempSync(join(tmpdir(), "kds-flags-"));
    try {
      const file = join(dir, "x.ts");
      const source = [
        "const a = `raise --max-handshakes to $" + "{n}`;", // a template with a substitution
        'const b = "run: kds-mux rotate signing-key --retire-previous";',
      ];
      writeFileSync(file, `${source.join("\n")}\n`);
      const hits = literals(file).flatMap(({ text }) =>
        [...text.matchAll(FLAG)].filter((m) => !inQuotedCommand(text, m.index)).map((m) => m[0]),
      );
      expect(hits).toEqual(["--max-handshakes"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("maps every option the CLI knows to a flag the CLI has", () => {
    const flags = new Set<string>();
    const collect = (command: Command): void => {
      for (const option of command.options) if (option.long !== undefined) flags.add(option.long);
      command.commands.forEach(collect);
    };
    collect(program());
    for (const flag of Object.values(OPTION_FLAGS)) {
      const name = /--[a-z-]+/.exec(flag)?.[0] ?? flag;
      expect(flags.has(name), `${flag} is no flag of the CLI`).toBe(true);
    }
    expect(
      withFlags(
        "the zone retries with backoff (an operator may raise the global's `maxHandshakes` option, or lower its `handshakeTimeoutMs`)",
      ),
    ).toBe(
      "the zone retries with backoff (an operator may raise the global's --max-handshakes option, or lower its --hello-timeout)",
    );
    expect(withFlags("`kds-mux get` and `unknownOption` stay")).toBe(
      "`kds-mux get` and `unknownOption` stay",
    );
  });
});

describe("the CLI names the flag of an option a library error names", () => {
  it("in its log lines, text and JSON, message and fields", () => {
    const lines: string[] = [];
    const refusal = new Error("the zone retries (raise `maxHandshakes`)");
    for (const format of ["text", "json"] as const) {
      cliLogger(format, "info", (line) => lines.push(line)).warn("refused: raise `maxHandshakes`", {
        error: refusal,
        hint: "lower `handshakeTimeoutMs`",
      });
    }
    expect(lines).toHaveLength(2);
    for (const line of lines) {
      expect(line).toContain("refused: raise --max-handshakes");
      expect(line).toContain("the zone retries (raise --max-handshakes)");
      expect(line).toContain("lower --hello-timeout");
      expect(line).not.toContain("`");
    }
  });

  const dirs: string[] = [];
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it("prints --data-dir where startEmbeddedPostgres says `dataDir`", () => {
    const dir = mkdtempSync(join(tmpdir(), "kds-flags-cli-"));
    dirs.push(dir);
    const file = join(dir, "a-file");
    writeFileSync(file, "not a directory");
    const run = spawnSync(
      process.execPath,
      [
        join(root, "bin/kds-mux.mjs"),
        "global",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--data-dir",
        join(file, "data"),
      ],
      { encoding: "utf8", timeout: 60_000 },
    );
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/choose a --data-dir this user can write/);
    expect(run.stderr).toMatch(/use another --store \(memory, or a postgres:\/\/ URL\)/);
    expect(run.stderr).not.toMatch(/`dataDir`|`store`/);
  });
});
