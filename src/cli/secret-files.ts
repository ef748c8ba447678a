/**
 * Files the CLI reads and writes for identity: PEM certificates and keys,
 * token files (re-read before every dial, so a renewed token is picked up),
 * and secrets written readable by their owner only.
 *
 * @module
 */
import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { KdsError } from "../errors.ts";

function read(file: string, flag: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (error) {
    throw new KdsError(
      "invalid_argument",
      `${flag} ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? String(error)})`,
      { cause: error },
    );
  }
}

/** Reads a PEM file named by `flag`; fails clearly when it is missing or holds no PEM block. */
export function readPem(file: string, flag: string): string {
  const text = read(file, flag);
  if (!/-----BEGIN [A-Z0-9 ]+-----/.test(text))
    throw new KdsError(
      "invalid_argument",
      `${flag} ${file} holds no PEM block (-----BEGIN ...-----)`,
    );
  return text;
}

/** Reads a token file (the token, surrounding whitespace ignored). */
export function readTokenFile(file: string): string {
  const token = read(file, "--token-file").trim();
  if (token === "")
    throw new KdsError(
      "invalid_argument",
      `--token-file ${file} is empty; create a token with kds-mux generate zone-token`,
    );
  return token;
}

/** Writes `text` to `file`, readable and writable by its owner only. */
export function writeSecretFile(file: string, text: string): void {
  try {
    writeFileSync(file, text, { mode: 0o600 });
    chmodSync(file, 0o600); // the mode above applies only to a file that did not exist
  } catch (error) {
    throw new KdsError(
      "invalid_argument",
      `cannot write ${file} (${(error as NodeJS.ErrnoException).code ?? String(error)})`,
      { cause: error },
    );
  }
}
