/**
 * Small helpers around AbortSignal shared by every layer.
 *
 * @module
 */
import { abortError } from "../errors.ts";
import { systemClock, type Clock } from "./clock.ts";

/** `AbortSignal.prototype`'s own `aborted` getter, called directly by {@link isAborted}. */
const abortedGetter = (
  Object.getOwnPropertyDescriptor(AbortSignal.prototype, "aborted") as PropertyDescriptor
).get as (this: AbortSignal) => boolean;

/**
 * Whether `signal` has aborted (false when there is none): `signal.aborted`,
 * read through the prototype's getter. On Node 20 every AbortSignal has a
 * hidden class of its own, so reading `signal.aborted` on a path that sees
 * thousands of signals (one per session) misses V8's lookup caches each
 * time: about 780 ns a read across 10,000 signals against 120 ns for the
 * getter called directly (bench/abort-read.ts; 14 ns either way on Node
 * 22, where signals share one class; docs/performance.md, "Where a
 * change's time goes"). Use it on paths that run per message; elsewhere
 * `signal.aborted` reads better.
 */
export function isAborted(signal: AbortSignal | undefined): boolean {
  return signal !== undefined && abortedGetter.call(signal);
}

/**
 * Resolves after `ms` milliseconds of `clock`, or rejects with the abort error
 * as soon as `signal` aborts.
 */
export function sleep(ms: number, signal?: AbortSignal, clock: Clock = systemClock): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(abortError(signal, "sleep"));
      return;
    }
    const onAbort = (): void => {
      cancel();
      reject(abortError(signal as AbortSignal, "sleep"));
    };
    const cancel = clock.setTimer(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Races `promise` against `signal`: rejects with the abort error when the
 * signal aborts first. The listener is removed either way.
 */
export function raceAbort<T>(
  promise: Promise<T>,
  signal: AbortSignal | undefined,
  what: string,
): Promise<T> {
  if (signal === undefined) return promise;
  if (signal.aborted) return Promise.reject(abortError(signal, what));
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(abortError(signal, what));
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

/**
 * A signal of one's own that aborts when `parent` does, through one listener
 * on `parent` until `release`. A long-lived task that adds and removes
 * listeners over and over (one per dial, per backoff sleep) adds them to its
 * own signal: on a parent shared by thousands of such tasks (one shutdown
 * signal for every zone of a process) each add and remove walks every
 * listener of the parent (Node's EventTarget), which made a 2,500-zone
 * process spend half its CPU there while its zones reconnected.
 */
export function childSignal(parent: AbortSignal): {
  readonly signal: AbortSignal;
  /** Removes the listener on `parent` (the child no longer follows it). */
  release(): void;
} {
  const controller = new AbortController();
  if (parent.aborted) {
    controller.abort(parent.reason);
    return { signal: controller.signal, release: () => undefined };
  }
  const onAbort = (): void => controller.abort(parent.reason);
  parent.addEventListener("abort", onAbort, { once: true });
  return {
    signal: controller.signal,
    release: () => parent.removeEventListener("abort", onAbort),
  };
}

/** A signal that aborts when any of `signals` aborts (AbortSignal.any where available). */
export function anySignal(signals: readonly AbortSignal[]): AbortSignal {
  const any = (AbortSignal as { any?: (s: AbortSignal[]) => AbortSignal }).any;
  if (any !== undefined) return any([...signals]);
  const controller = new AbortController();
  for (const s of signals) {
    if (s.aborted) {
      controller.abort(s.reason);
      break;
    }
    s.addEventListener("abort", () => controller.abort(s.reason), {
      once: true,
      signal: controller.signal,
    });
  }
  return controller.signal;
}
