/**
 * The one backoff of kds-mux: exponential with full jitter, for the zone's
 * reconnects, the discovery NACK backoff and store retries.
 *
 * @module
 */
import { KdsError } from "../errors.ts";

/** Backoff tunables (reconnects, NACK resends, store retries). */
export interface BackoffOptions {
  /** Ceiling of the first retry's delay. Default 1 s. */
  baseMs?: number;
  /** The ceiling never grows past this. Default 60 s. */
  capMs?: number;
  /** A session that stayed up this long resets the backoff to the start. Default 60 s. */
  resetAfterMs?: number;
}

/** {@link BackoffOptions} with defaults filled in. */
export type ResolvedBackoff = Required<BackoffOptions>;

/** The defaults of {@link BackoffOptions}. */
export const defaultBackoff: ResolvedBackoff = Object.freeze({
  baseMs: 1_000,
  capMs: 60_000,
  resetAfterMs: 60_000,
});

/** Fills in defaults and checks ranges. */
export function resolveBackoff(options: BackoffOptions = {}): ResolvedBackoff {
  const r: ResolvedBackoff = {
    baseMs: options.baseMs ?? defaultBackoff.baseMs,
    capMs: options.capMs ?? defaultBackoff.capMs,
    resetAfterMs: options.resetAfterMs ?? defaultBackoff.resetAfterMs,
  };
  for (const [k, v] of Object.entries(r)) {
    if (!Number.isFinite(v) || v < 0)
      throw new KdsError(
        "invalid_argument",
        `backoff option ${k} must be a non-negative number of milliseconds, got ${v}`,
      );
  }
  if (r.capMs < r.baseMs)
    throw new KdsError(
      "invalid_argument",
      `backoff capMs (${r.capMs}) must not be smaller than baseMs (${r.baseMs})`,
    );
  return r;
}

/** The ceiling of retry number `attempt` (0-based): min(cap, base * 2^attempt). */
export function backoffCeiling(attempt: number, backoff: ResolvedBackoff): number {
  return Math.min(backoff.capMs, backoff.baseMs * 2 ** Math.min(attempt, 52));
}

/** Full jitter: a uniformly random whole number of milliseconds from 0 up to (not including) `ceilingMs`. */
export function fullJitter(ceilingMs: number, random: () => number = Math.random): number {
  return Math.floor(random() * ceilingMs);
}

/** Full jitter: a uniformly random delay from 0 to the attempt's ceiling. */
export function backoffDelay(
  attempt: number,
  backoff: ResolvedBackoff,
  random: () => number = Math.random,
): number {
  return fullJitter(backoffCeiling(attempt, backoff), random);
}
