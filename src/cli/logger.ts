/**
 * Logging for the long-running commands: readable lines by default, JSON
 * lines with `--log-format json`. Logs go to stderr; command output to stdout.
 * Options that library messages name are shown as the CLI's flags ({@link withFlags}).
 *
 * @module
 */
import type { LogFields, Logger, LogLevel } from "../log.ts";
import { withFlags } from "./option-flags.ts";

/** Log line formats. */
export type LogFormat = "text" | "json";

const rank: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3, silent: 4 };

function fieldText(value: unknown): string {
  if (value instanceof Error) return JSON.stringify(withFlags(value.message));
  if (typeof value === "string") {
    const text = withFlags(value);
    return /\s|"/.test(text) ? JSON.stringify(text) : text;
  }
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
        for (const [k, v] of Object.entries(fields))
          plain[k] =
            v instanceof Error ? withFlags(v.message) : typeof v === "string" ? withFlags(v) : v;
        write(
          JSON.stringify({
            time: new Date().toISOString(),
            level: l,
            msg: withFlags(message),
            ...plain,
          }),
        );
        return;
      }
      const time = new Date().toISOString().slice(11, 23);
      const extra = Object.entries(fields)
        .map(([k, v]) => `${k}=${fieldText(v)}`)
        .join(" ");
      write(
        `${time} ${l.toUpperCase().padEnd(5)} ${withFlags(message)}${extra === "" ? "" : `  ${extra}`}`,
      );
    };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}
