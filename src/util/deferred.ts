/**
 * A promise with its resolve and reject functions at hand.
 *
 * @module
 */

/** A promise whose settlement is controlled from outside. */
export interface Deferred<T> {
  /** The promise. */
  readonly promise: Promise<T>;
  /** Fulfils the promise. */
  resolve(value: T): void;
  /** Rejects the promise. */
  reject(reason: unknown): void;
}

/** Creates a {@link Deferred}. */
export function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (reason: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
