/**
 * Parsing flag values: `--listen HOST:PORT`, durations and byte sizes.
 *
 * @module
 */
import { KdsError } from "../errors.ts";

/** Splits "HOST:PORT" (or "[v6]:PORT", or ":PORT" for 127.0.0.1). */
export function parseListen(text: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(text);
  const port = Number(m?.[3]);
  if (m === null || !Number.isInteger(port) || port > 65_535) {
    throw new KdsError(
      "invalid_argument",
      `--listen "${text}" must be HOST:PORT, for example 127.0.0.1:5685`,
    );
  }
  return { host: m[1] ?? (m[2] === "" || m[2] === undefined ? "127.0.0.1" : m[2]), port };
}

/** Parses a duration such as "30s", "2m", "500ms" or a number of seconds. */
export function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (m === null)
    throw new KdsError(
      "invalid_argument",
      `"${text}" is not a duration; use for example 30s, 2m or 500ms`,
    );
  const n = Number(m[1]);
  const unit = m[2] ?? "s";
  return Math.round(
    n * (unit === "ms" ? 1 : unit === "s" ? 1000 : unit === "m" ? 60_000 : 3_600_000),
  );
}

/** Parses a byte size such as "16MiB", "512KiB", "1GiB" or a plain number of bytes; `flag` names it in the error. */
export function parseByteSize(text: string, flag: string): number {
  const m = /^(\d+)\s*(B|KiB|MiB|GiB)?$/i.exec(text.trim());
  const units: Record<string, number> = { b: 1, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3 };
  const bytes =
    m === null ? Number.NaN : Number(m[1]) * (units[(m[2] ?? "b").toLowerCase()] ?? Number.NaN);
  if (!Number.isSafeInteger(bytes) || bytes <= 0) {
    throw new KdsError(
      "invalid_argument",
      `${flag} "${text}" is not a byte size; use for example 16MiB, 512KiB or 1GiB (or a number of bytes)`,
    );
  }
  return bytes;
}
