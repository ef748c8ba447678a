/**
 * Parsing `--listen HOST:PORT`.
 *
 * @module
 */
import { KdsError } from "../errors.ts";

/** Splits "HOST:PORT" (or "[v6]:PORT", or ":PORT" for 127.0.0.1). */
export function parseListen(text: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(text);
  const port = Number(m?.[3]);
  if (m === null || !Number.isInteger(port) || port > 65_535) {
    throw new KdsError("invalid_argument", `--listen "${text}" must be HOST:PORT, for example 127.0.0.1:5685`);
  }
  return { host: m[1] ?? (m[2] === "" || m[2] === undefined ? "127.0.0.1" : m[2]), port };
}

/** Parses a duration such as "30s", "2m", "500ms" or a number of seconds. */
export function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (m === null) throw new KdsError("invalid_argument", `"${text}" is not a duration; use for example 30s, 2m or 500ms`);
  const n = Number(m[1]);
  const unit = m[2] ?? "s";
  return Math.round(n * (unit === "ms" ? 1 : unit === "s" ? 1000 : unit === "m" ? 60_000 : 3_600_000));
}
