/**
 * A level-triggered wake-up for single-consumer event loops: wakes that
 * happen while nobody waits are remembered (once), never queued.
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

/** Resolves after `ms` of `clock` (or never for Infinity); the returned cancel clears the timer. */
export function timer(ms: number, clock: Clock = systemClock): { promise: Promise<void>; cancel(): void } {
  if (!Number.isFinite(ms)) return { promise: new Promise<void>(() => undefined), cancel: () => undefined };
  let cancel: () => void = () => undefined;
  const promise = new Promise<void>((resolve) => {
    cancel = clock.setTimer(resolve, ms);
  });
  return { promise, cancel };
}
