/**
 * The wake-ups of the code base, one idea each:
 * - {@link Waker}: level-triggered, one waiting loop; a wake while nobody
 *   waits is remembered (once), never queued.
 * - {@link Pulse}: edge-triggered, any number of waiters; a notification
 *   wakes those waiting now and is not remembered.
 * - {@link timer}: a cancellable delay on a {@link Clock}.
 *
 * Every wait can be given an `AbortSignal`; an abort resolves the wait (the
 * waiter then looks at the signal) and leaves no listener behind.
 *
 * @module
 */
import { systemClock, type Clock } from "./clock.ts";

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

  /** Resolves at the next wake (at once if one happened since the last wait), or when `signal` aborts. */
  wait(signal?: AbortSignal): Promise<void> {
    if (this.#pending) {
      this.#pending = false;
      return Promise.resolve();
    }
    if (signal?.aborted === true) return Promise.resolve();
    return new Promise<void>((resolve) => {
      if (signal === undefined) {
        this.#resolve = resolve;
        return;
      }
      const done = (): void => {
        signal.removeEventListener("abort", done);
        if (this.#resolve === done) this.#resolve = undefined;
        resolve();
      };
      this.#resolve = done;
      signal.addEventListener("abort", done, { once: true });
    });
  }
}

/** Wakes everyone waiting at the moment of {@link Pulse.notify}. */
export class Pulse {
  #waiters = new Set<() => void>();

  /** How many waits are pending. */
  get waiting(): number {
    return this.#waiters.size;
  }

  /** Resolves every pending wait. */
  notify(): void {
    if (this.#waiters.size === 0) return;
    const waiting = this.#waiters;
    this.#waiters = new Set();
    for (const done of waiting) done();
  }

  /**
   * Resolves at the next {@link Pulse.notify}, when `signal` aborts, or (with
   * `ms`) after that long on `clock`, whichever comes first.
   */
  next(signal?: AbortSignal, ms = Infinity, clock: Clock = systemClock): Promise<void> {
    if (signal?.aborted === true) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let cancelTimer: () => void = () => undefined;
      const done = (): void => {
        cancelTimer();
        signal?.removeEventListener("abort", done);
        this.#waiters.delete(done);
        resolve();
      };
      this.#waiters.add(done);
      signal?.addEventListener("abort", done, { once: true });
      if (Number.isFinite(ms)) cancelTimer = clock.setTimer(done, ms);
    });
  }
}

/** Resolves after `ms` of `clock` (or never for Infinity); the returned cancel clears the timer. */
export function timer(
  ms: number,
  clock: Clock = systemClock,
): { promise: Promise<void>; cancel(): void } {
  if (!Number.isFinite(ms))
    return { promise: new Promise<void>(() => undefined), cancel: () => undefined };
  let cancel: () => void = () => undefined;
  const promise = new Promise<void>((resolve) => {
    cancel = clock.setTimer(resolve, ms);
  });
  return { promise, cancel };
}
