/**
 * The connection flags of `kds-mux global` and `kds-mux zone`: caps on open
 * connections per listener, the idle, authentication and request timeouts,
 * and (global) the hello timeout and how many zone streams may wait for
 * their hello, in all and per zone. Defaults keep the listeners together
 * below the process's soft open-files limit.
 *
 * @module
 */
import { InvalidArgumentError, Option } from "commander";
import {
  DEFAULT_MAX_CONNECTIONS_PER_ADMIN_TOKEN,
  defaultConnectionCaps,
  openFilesSoftLimit,
  type ConnectionLimits,
} from "../adapters/node/connection-limits.ts";
import {
  DEFAULT_MAX_HANDSHAKES,
  DEFAULT_MAX_HANDSHAKES_PER_ZONE,
} from "../global/global-server.ts";
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import { parseDuration } from "./address.ts";

/** The CLI's default idle timeout. */
export const DEFAULT_IDLE_TIMEOUT = "60s";
/** The CLI's default hello timeout (the library's handshake timeout is longer: 30 s). */
export const DEFAULT_HELLO_TIMEOUT = "10s";
/** The CLI's default authentication timeout (`ConnectionLimits.authTimeoutMs`). */
export const DEFAULT_AUTH_TIMEOUT = "5s";
/** The CLI's default request timeout (`ConnectionLimits.requestTimeoutMs`). */
export const DEFAULT_REQUEST_TIMEOUT = "10s";

/** Connection flags, parsed (durations in milliseconds). */
export interface ConnectionFlags {
  /** --max-connections (global): connections on the listener zones dial. */
  readonly maxConnections?: number;
  /** --admin-max-connections: connections on the admin API's listener. */
  readonly adminMaxConnections?: number;
  /** --idle-timeout, in ms. */
  readonly idleTimeout?: number;
  /** --hello-timeout (global), in ms. */
  readonly helloTimeout?: number;
  /** --max-handshakes (global). */
  readonly maxHandshakes?: number;
  /** --max-handshakes-per-zone (global). */
  readonly maxHandshakesPerZone?: number;
  /** --auth-timeout, in ms. */
  readonly authTimeout?: number;
  /** --request-timeout, in ms. */
  readonly requestTimeout?: number;
}

const MAX_MS = 2 ** 31 - 1;

function count(flag: string): (text: string) => number {
  return (text) => {
    const n = Number(text);
    if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(n) || n < 1 || n > MAX_MS)
      throw new InvalidArgumentError(
        `${flag} must be a whole number from 1 to ${MAX_MS}, got "${text}"`,
      );
    return n;
  };
}

/** Commander's parser for the duration flag `flag`: from 1 ms to setTimeout's limit (about 24 days). */
export function durationFlag(flag: string): (text: string) => number {
  return (text) => {
    let ms: number;
    try {
      ms = parseDuration(text);
    } catch {
      throw new InvalidArgumentError(
        `${flag} "${text}" is not a duration; use for example 60s, 2m or 500ms`,
      );
    }
    if (ms < 1 || ms > MAX_MS)
      throw new InvalidArgumentError(
        `${flag} must be from 1ms to ${MAX_MS}ms (about 24 days), got "${text}"`,
      );
    return ms;
  };
}

/** --max-connections (the global's zone listener). */
export const maxConnectionsOption = (): Option =>
  new Option(
    "--max-connections <n>",
    "most connections open at once on --listen; more are closed as soon as accepted, open ones are kept (default: from the open-files limit, logged at start)",
  ).argParser(count("--max-connections"));
/** --admin-max-connections. */
export const adminMaxConnectionsOption = (): Option =>
  new Option(
    "--admin-max-connections <n>",
    "most connections open at once on --admin-listen, a cap of its own so zones never crowd out the admin API (default: from the open-files limit, at most 128)",
  ).argParser(count("--admin-max-connections"));
/** --idle-timeout. */
export const idleTimeoutOption = (): Option =>
  new Option(
    "--idle-timeout <duration>",
    `close a connection with no open stream or request (HTTP/2, HTTP/1.1 keep-alive) after this long`,
  )
    .argParser(durationFlag("--idle-timeout"))
    .default(parseDuration(DEFAULT_IDLE_TIMEOUT), DEFAULT_IDLE_TIMEOUT);
/** --hello-timeout (global). */
export const helloTimeoutOption = (): Option =>
  new Option(
    "--hello-timeout <duration>",
    "end an admitted zone stream that sends no hello within this long (goaway PROTOCOL_ERROR, handshake_timeout)",
  )
    .argParser(durationFlag("--hello-timeout"))
    .default(parseDuration(DEFAULT_HELLO_TIMEOUT), DEFAULT_HELLO_TIMEOUT);
/** --max-handshakes (global). */
export const maxHandshakesOption = (): Option =>
  new Option(
    "--max-handshakes <n>",
    "most zone streams in admission or waiting for their hello at once; more are refused with overloaded (resource_exhausted)",
  )
    .argParser(count("--max-handshakes"))
    .default(DEFAULT_MAX_HANDSHAKES);

/** --max-handshakes-per-zone (global). */
export const maxHandshakesPerZoneOption = (): Option =>
  new Option(
    "--max-handshakes-per-zone <n>",
    "most of those streams one zone (one zone's credentials) may hold at once, so one token cannot fill --max-handshakes; more are refused with overloaded",
  )
    .argParser(count("--max-handshakes-per-zone"))
    .default(DEFAULT_MAX_HANDSHAKES_PER_ZONE);
/** --auth-timeout. */
export const authTimeoutOption = (): Option =>
  new Option(
    "--auth-timeout <duration>",
    "close a connection that has carried no call with valid credentials (a zone's token or certificate; on a non-loopback admin listener an admin token) within this long, whatever its streams are doing",
  )
    .argParser(durationFlag("--auth-timeout"))
    .default(parseDuration(DEFAULT_AUTH_TIMEOUT), DEFAULT_AUTH_TIMEOUT);
/** --request-timeout. */
export const requestTimeoutOption = (): Option =>
  new Option(
    "--request-timeout <duration>",
    "cut a request whose headers or body have not arrived within this long (plus 1 s per 64 KiB of body received); the zone mux stream is exempt",
  )
    .argParser(durationFlag("--request-timeout"))
    .default(parseDuration(DEFAULT_REQUEST_TIMEOUT), DEFAULT_REQUEST_TIMEOUT);

/** The limits of a process's listeners, resolved from its flags and the descriptor limit. */
export interface ResolvedConnectionLimits {
  /** The global's zone listener (undefined for a zone process). */
  readonly zones?: ConnectionLimits;
  /** The admin API's listener. */
  readonly admin: ConnectionLimits;
}

/**
 * Fills in the caps from the soft open-files limit, logs what was chosen (and
 * warns when explicit caps leave no headroom below the limit). `softLimit`:
 * the descriptor limit to assume instead of reading it (for tests).
 */
export function resolveConnectionLimits(
  flags: ConnectionFlags,
  role: "global" | "zone",
  logger: Logger,
  metrics: Metrics,
  softLimit?: number,
): ResolvedConnectionLimits {
  const defaults = defaultConnectionCaps(softLimit ?? openFilesSoftLimit());
  const idleTimeoutMs = flags.idleTimeout ?? parseDuration(DEFAULT_IDLE_TIMEOUT);
  const authTimeoutMs = flags.authTimeout ?? parseDuration(DEFAULT_AUTH_TIMEOUT);
  const requestTimeoutMs = flags.requestTimeout ?? parseDuration(DEFAULT_REQUEST_TIMEOUT);
  const admin: ConnectionLimits = {
    listener: "admin",
    maxConnections: flags.adminMaxConnections ?? defaults.admin,
    // One admin token (a read-only one, say) holding event streams open cannot fill the cap and lock the operator out.
    maxConnectionsPerIdentity: DEFAULT_MAX_CONNECTIONS_PER_ADMIN_TOKEN,
    idleTimeoutMs,
    authTimeoutMs,
    requestTimeoutMs,
    setting: "--admin-max-connections",
    logger,
    metrics,
  };
  const zones: ConnectionLimits | undefined =
    role === "global"
      ? {
          listener: "zones",
          maxConnections: flags.maxConnections ?? defaults.zones,
          idleTimeoutMs,
          authTimeoutMs,
          requestTimeoutMs,
          setting: "--max-connections",
          logger,
          metrics,
        }
      : undefined;
  const limit = `${defaults.softLimit}${defaults.measured ? "" : " (assumed: /proc/self/limits is not readable)"}`;
  const caps =
    zones === undefined
      ? `admin listener at most ${admin.maxConnections}`
      : `zone listener at most ${zones.maxConnections}, admin listener at most ${admin.maxConnections}`;
  const hello =
    role === "global"
      ? `; a zone stream must say hello within ${flags.helloTimeout ?? parseDuration(DEFAULT_HELLO_TIMEOUT)} ms, at most ${flags.maxHandshakes ?? DEFAULT_MAX_HANDSHAKES} waiting at once, ${flags.maxHandshakesPerZone ?? DEFAULT_MAX_HANDSHAKES_PER_ZONE} per zone`
      : "";
  logger.info(
    `connections: ${caps} (open-files soft limit ${limit}); idle connections close after ${idleTimeoutMs} ms, unauthenticated ones after ${authTimeoutMs} ms (the oldest first at the cap), request bodies within ${requestTimeoutMs} ms${hello}`,
    {
      zoneMaxConnections: zones?.maxConnections,
      adminMaxConnections: admin.maxConnections,
      openFilesLimit: defaults.softLimit,
    },
  );
  const total = admin.maxConnections + (zones?.maxConnections ?? 0);
  if (total >= defaults.softLimit) {
    logger.warn(
      `the connection caps add up to ${total}, not below the open-files soft limit ${defaults.softLimit}: a flood of connections can exhaust the process's descriptors and lock out the store and the admin API; lower --max-connections / --admin-max-connections or raise the limit (ulimit -n)`,
    );
  }
  return { zones, admin };
}
