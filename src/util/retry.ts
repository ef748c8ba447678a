/**
 * Runs a long-lived loop (following a store, say) again after every failure,
 * with backoff, until its signal aborts. Failures are handed to `onError`;
 * none is swallowed.
 *
 * @module
 */
import { sleep } from "./abort.ts";
import { backoffDelay, type ResolvedBackoff } from "./backoff.ts";

/**
 * Calls `run` until it resolves or `signal` aborts. After each rejection,
 * `onError` is told the error and the delay before the next attempt. `run`
 * calls `healthy()` once it made progress, which resets the backoff.
 * Resolves when `run` resolves or the signal aborts; never rejects.
 */
export async function retryUntilAborted(
  signal: AbortSignal,
  backoff: ResolvedBackoff,
  run: (healthy: () => void) => Promise<void>,
  onError: (error: unknown, delayMs: number) => void,
  random: () => number = Math.random,
): Promise<void> {
  let attempt = 0;
  const healthy = (): void => {
    attempt = 0;
  };
  while (!signal.aborted) {
    try {
      await run(healthy);
      return;
    } catch (error) {
      if (signal.aborted) return;
      const delay = backoffDelay(attempt++, backoff, random);
      onError(error, delay);
      try {
        await sleep(delay, signal);
      } catch {
        return; // the signal aborted while waiting: the loop is being shut down, nothing is pending
      }
    }
  }
}

/**
 * Calls `fn` until it resolves, waiting with backoff after each rejection
 * (reported through `onError`). Rejects only when `signal` aborts.
 */
export async function retrying<T>(
  signal: AbortSignal,
  backoff: ResolvedBackoff,
  fn: () => Promise<T>,
  onError: (error: unknown, delayMs: number) => void,
  random: () => number = Math.random,
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      if (signal.aborted) throw error;
      const delay = backoffDelay(attempt, backoff, random);
      onError(error, delay);
      await sleep(delay, signal);
    }
  }
}
