/**
 * The logging seam. kds-mux logs through a {@link Logger} the caller passes;
 * the default writes warnings and errors to the console.
 *
 * @module
 */

/** Structured fields attached to a log line. */
export type LogFields = Record<string, unknown>;

/** A minimal structured logger; adapt any logging library to it. */
export interface Logger {
  /** Diagnostic detail. */
  debug(message: string, fields?: LogFields): void;
  /** Normal operation (sessions starting and ending). */
  info(message: string, fields?: LogFields): void;
  /** Something the operator should look at (retries, rejected zones). */
  warn(message: string, fields?: LogFields): void;
  /** A failure. */
  error(message: string, fields?: LogFields): void;
}

/** Log levels in increasing severity. */
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

const rank: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3, silent: 4 };

/** A logger that writes lines at or above `level` to the console. */
export function consoleLogger(level: LogLevel = "warn"): Logger {
  const at =
    (l: Exclude<LogLevel, "silent">, write: (...args: unknown[]) => void) =>
    (message: string, fields?: LogFields): void => {
      if (rank[l] < rank[level]) return;
      if (fields === undefined || Object.keys(fields).length === 0)
        write(`[kds-mux] ${l}: ${message}`);
      else write(`[kds-mux] ${l}: ${message}`, fields);
    };
  return {
    debug: at("debug", console.debug),
    info: at("info", console.info),
    warn: at("warn", console.warn),
    error: at("error", console.error),
  };
}

/** A logger that drops everything. */
export const silentLogger: Logger = consoleLogger("silent");
