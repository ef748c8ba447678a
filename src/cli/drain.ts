/**
 * Graceful drain of `kds-mux global`: on the first SIGTERM/SIGINT, or an
 * admin's `POST /drain`, the instance reads as not ready (`/readyz` 503),
 * sends any zone that dials it on at once, and asks its zones to reconnect to another instance
 * (goaway RECONNECT) spread over `--drain-timeout`; then it closes what is
 * left and exits 0. A second signal exits at once (signals.ts).
 *
 * @module
 */
import { InvalidArgumentError, Option } from "commander";
import type { AdminAuthorizer } from "../auth/admin-authorizer.ts";
import { KdsError } from "../errors.ts";
import type { DrainOptions } from "../global/global-server.ts";
import type { Logger } from "../log.ts";
import { parseDuration } from "./address.ts";

/** The default of `--drain-timeout`. */
export const DEFAULT_DRAIN_TIMEOUT = "30s";

/** Share of the drain timeout the goaways are spread over; the rest lets the last zones' sessions wind down. */
export const DRAIN_SPREAD_SHARE = 0.8;

/** Parses a `--drain-timeout` value (0 allowed: every zone is told at once). */
export function parseDrainTimeout(text: string): number {
  let ms: number;
  try {
    ms = parseDuration(text);
  } catch {
    throw new InvalidArgumentError(
      `--drain-timeout "${text}" is not a duration; use for example 30s, 2m or 500ms (0 tells every zone at once)`,
    );
  }
  if (ms > 2 ** 31 - 1)
    throw new InvalidArgumentError(
      `--drain-timeout must be at most ${2 ** 31 - 1}ms (about 24 days), got "${text}"`,
    );
  return ms;
}

/** `--drain-timeout` of `kds-mux global`. */
export const drainTimeoutOption = (): Option =>
  new Option(
    "--drain-timeout <duration>",
    "on SIGTERM (or POST /drain on the admin listener): /readyz answers 503, no zone is admitted, and the zones are asked to reconnect to another instance (goaway RECONNECT) one by one over this long; then the rest are closed and the process exits 0 (a second SIGTERM exits at once)",
  )
    .argParser(parseDrainTimeout)
    .default(parseDuration(DEFAULT_DRAIN_TIMEOUT), DEFAULT_DRAIN_TIMEOUT);

/**
 * Drains `server` within `timeoutMs`: the zones' goaways are spread over
 * {@link DRAIN_SPREAD_SHARE} of it; when the timeout passes first, the zones
 * not yet asked are asked at once and it stops waiting (the caller closes
 * what is left).
 */
export async function drainWithin(
  server: { drain(options: DrainOptions): Promise<number> },
  timeoutMs: number,
  logger: Logger,
): Promise<void> {
  const deadline = AbortSignal.timeout(Math.max(1, timeoutMs));
  const started = performance.now();
  const asked = await server.drain({ spreadMs: timeoutMs * DRAIN_SPREAD_SHARE, signal: deadline });
  const tookMs = Math.round(performance.now() - started);
  if (deadline.aborted)
    logger.warn(
      `drain: ${asked} zones asked to reconnect to another instance; the drain timeout (${timeoutMs} ms) passed before every session wound down, so the rest are closed at once`,
      { asked, tookMs },
    );
  else
    logger.info(`drain: ${asked} zones asked to reconnect to another instance in ${tookMs} ms`, {
      asked,
      tookMs,
    });
}

/**
 * The admin listener's `POST /drain`: an admin (role `admin`; tokenless on a
 * loopback listener) starts the drain, as SIGTERM does, and gets 202. Other
 * methods get 405, other roles 403; undefined for other paths.
 */
export function drainRoute(
  authorizer: AdminAuthorizer,
  startDrain: () => void,
): (request: Request) => Promise<Response | undefined> {
  return async (request) => {
    if (new URL(request.url).pathname !== "/drain") return undefined;
    const text = (status: number, body: string, extra: Record<string, string> = {}): Response =>
      new Response(`${body}\n`, {
        status,
        headers: { "content-type": "text/plain; charset=utf-8", ...extra },
      });
    if (request.method !== "POST")
      return text(405, "POST /drain starts the drain", { allow: "POST" });
    let role: string;
    try {
      role = (await authorizer.authorize(request.headers, request.signal)).role;
    } catch (error) {
      if (KdsError.is(error, "unauthenticated"))
        return text(401, error.message, { "www-authenticate": "Bearer" });
      throw error;
    }
    if (role !== "admin")
      return text(403, `draining needs an admin token with role "admin", not ${role}`);
    startDrain();
    return text(
      202,
      "draining: /readyz answers 503 and the zones are asked to reconnect to another instance; the process exits once done",
    );
  };
}
