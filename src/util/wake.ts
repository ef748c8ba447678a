/**
 * A level-triggered wake-up for single-consumer event loops: wakes that
 * happen while nobody waits are remembered (once), never queued.
 *
 * @module
 */

/** Wakes one waiting loop. */
export class Waker {
  #pending = false;
  #resolve: (() => void) | undefined;

  /** Wakes the waiter, or marks that a wake happened. */
  wake(): void {
    const resolve = this.#resolve;
    this.#resolve = undefined;
    if (resolve !== undefined) resolve();
    else this.#pending = true;
  }

  /** Resolves at the next wake (at once if one happened since the last wait). */
  wait(): Promise<void> {
    if (this.#pending) {
      this.#pending = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      this.#resolve = resolve;
    });
  }
}

/** Resolves after `ms` (or never for Infinity); the returned cancel clears the timer. */
export function timer(ms: number): { promise: Promise<void>; cancel(): void } {
  if (!Number.isFinite(ms)) return { promise: new Promise<void>(() => undefined), cancel: () => undefined };
  let handle: ReturnType<typeof setTimeout> | undefined;
  const promise = new Promise<void>((resolve) => {
    handle = setTimeout(resolve, Math.max(0, ms));
  });
  return { promise, cancel: () => clearTimeout(handle) };
}
