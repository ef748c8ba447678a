/**
 * `--heartbeat-interval` and `--heartbeat-timeout` of `kds-mux global` and
 * `kds-mux zone`: the session's `heartbeatIntervalMs` and
 * `heartbeatTimeoutMs` (docs/protocol.md, "Heartbeats"). A side pings when it
 * heard nothing for an interval and ends a session silent for the timeout.
 * Every ping costs both sides a wake-up, so a large fleet trades a slower
 * dead-peer verdict for idle CPU (docs/performance.md, "Capacity model").
 *
 * @module
 */
import { Option } from "commander";
import { KdsError } from "../errors.ts";
import type { SessionOptions } from "../mux/options.ts";
import { durationFlag } from "./connection-flags.ts";

/** The flags, as commander parsed them. */
export interface HeartbeatFlags {
  /** --heartbeat-interval, in ms. */
  readonly heartbeatInterval?: number;
  /** --heartbeat-timeout, in ms. */
  readonly heartbeatTimeout?: number;
}

/** `--heartbeat-interval`. */
export const heartbeatIntervalOption = (): Option =>
  new Option(
    "--heartbeat-interval <duration>",
    "ping the peer when nothing was heard from it for this long (default 15s; a fleet of tens of thousands of zones saves idle CPU with 60s)",
  ).argParser(durationFlag("--heartbeat-interval"));

/** `--heartbeat-timeout`. */
export const heartbeatTimeoutOption = (): Option =>
  new Option(
    "--heartbeat-timeout <duration>",
    "end a session when nothing was heard from the peer for this long (default 60s, or four intervals when --heartbeat-interval is given; must be longer than the interval)",
  ).argParser(durationFlag("--heartbeat-timeout"));

/**
 * The session options the flags set (none when neither is given). With only
 * `--heartbeat-interval`, the timeout is four intervals, as the defaults are.
 * Throws `invalid_argument` when the timeout is not longer than the interval.
 */
export function heartbeatSession(flags: HeartbeatFlags): SessionOptions {
  const { heartbeatInterval: interval, heartbeatTimeout: timeout } = flags;
  if (interval === undefined && timeout === undefined) return {};
  const intervalMs = interval ?? Math.min(15_000, Math.floor((timeout as number) / 4));
  const timeoutMs = timeout ?? 4 * intervalMs;
  if (timeoutMs <= intervalMs)
    throw new KdsError(
      "invalid_argument",
      `--heartbeat-timeout (${timeoutMs}ms) must be longer than --heartbeat-interval (${intervalMs}ms); three intervals or more is a good choice`,
    );
  return { heartbeatIntervalMs: Math.max(1, intervalMs), heartbeatTimeoutMs: timeoutMs };
}
