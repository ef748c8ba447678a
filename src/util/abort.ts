/**
 * Small helpers around AbortSignal shared by every layer.
 *
 * @module
 */
import { abortError } from "../errors.ts";
import { systemClock, type Clock } from "./clock.ts";

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
