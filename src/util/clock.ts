/**
 * Time as the loops see it. Code that waits on time takes a {@link Clock}
 * (default {@link systemClock}), so a test can step time instead of sleeping
 * and can tell "nothing happened" from "nothing happened yet".
 *
 * @module
 */

/** A monotonic clock with one-shot timers. */
export interface Clock {
  /** Monotonic time in milliseconds. */
  now(): number;
  /**
   * Calls `fire` once, `ms` milliseconds of this clock from now (at once for
   * `ms` <= 0, but never synchronously). Returns a function that cancels the
   * timer if it has not fired yet.
   */
  setTimer(fire: () => void, ms: number): () => void;
}

/** `performance.now()` and `setTimeout`. */
export const systemClock: Clock = Object.freeze({
  now: () => performance.now(),
  setTimer(fire: () => void, ms: number): () => void {
    const handle = setTimeout(fire, Math.max(0, ms));
    return () => clearTimeout(handle);
  },
});
