// Whitespace in token files: the CLI writes none, and every reader strips it.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { readTokenFile } from "../../src/cli/secret-files.ts";
import { tokenIdOf, tokenOutput } from "../../src/cli/token-commands.ts";

const dir = mkdtempSync(join(tmpdir(), "kds-mux-token-files-"));
/** A JWT-shaped token with jti "id-1" (unsigned: only its id is read here). */
const token = `${Buffer.from('{"alg":"ES256"}').toString("base64url")}.${Buffer.from('{"jti":"id-1"}').toString("base64url")}.c2ln`;

describe("token files", () => {
  it("prints a token with no trailing newline unless stdout is a terminal", () => {
    expect(tokenOutput(token, false)).toBe(token);
    expect(tokenOutput(token, true)).toBe(`${token}\n`);
  });

  it("reads a token file whatever whitespace surrounds the token", () => {
    for (const [name, text] of [
      ["lf", `${token}\n`],
      ["crlf", `${token}\r\n`],
      ["spaces", `  \t${token} \n\n`],
      ["bare", token],
    ] as const) {
      const file = join(dir, `${name}.token`);
      writeFileSync(file, text);
      expect(readTokenFile(file), name).toBe(token);
      expect(tokenIdOf(file), name).toBe("id-1");
    }
  });

  it("refuses a file of whitespace only, saying how to create a token", () => {
    const file = join(dir, "blank.token");
    writeFileSync(file, " \n\t\n");
    expect(() => readTokenFile(file)).toThrow(
      /--token-file .*blank\.token is empty; create a token with kds-mux generate zone-token/,
    );
  });
});
