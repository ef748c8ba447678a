/**
 * Logging for the long-running commands: readable lines by default, JSON
 * lines with `--log-format json`. Logs go to stderr; command output to stdout.
 *
 * @module
 */
import type { LogFields, Logger, LogLevel } from "../log.ts";

/** Log line formats. */
export type LogFormat = "text" | "json";

const rank: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3, silent: 4 };

function fieldText(value: unknown): string {
  if (value instanceof Error) return JSON.stringify(value.message);
  if (typeof value === "string") return /\s|"/.test(value) ? JSON.stringify(value) : value;
  return JSON.stringify(value) ?? String(value);
}

/** A logger writing to `write` (stderr by default) in `format`, at `level` and above. */
export function cliLogger(
  format: LogFormat,
  level: LogLevel = "info",
  write: (line: string) => void = (l) => process.stderr.write(`${l}\n`),
): Logger {
  const at =
    (l: Exclude<LogLevel, "silent">) =>
    (message: string, fields: LogFields = {}): void => {
      if (rank[l] < rank[level]) return;
      if (format === "json") {
        const plain: Record<string, unknown> = {};
        for (const [k, v] of Object.entries(fields)) plain[k] = v instanceof Error ? v.message : v;
        write(JSON.stringify({ time: new Date().toISOString(), level: l, msg: message, ...plain }));
        return;
      }
      const time = new Date().toISOString().slice(11, 23);
      const extra = Object.entries(fields)
        .map(([k, v]) => `${k}=${fieldText(v)}`)
        .join(" ");
      write(`${time} ${l.toUpperCase().padEnd(5)} ${message}${extra === "" ? "" : `  ${extra}`}`);
    };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}
