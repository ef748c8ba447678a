/**
 * A bounded queue read as an async iterable by exactly one reader. Writers
 * never wait: {@link AsyncQueue.push} returns false when the queue is full,
 * and the caller decides what that means.
 *
 * @module
 */
import { Ring } from "./ring.ts";
import { Waker } from "./wake.ts";

/** Bounded single-reader async queue. */
export class AsyncQueue<T> implements AsyncIterable<T> {
  readonly #items: Ring<T>;
  readonly #waker = new Waker();
  #closed = false;
  #error: unknown;
  #failed = false;

  /** @param capacity - the most items it holds */
  constructor(capacity: number) {
    this.#items = new Ring(capacity);
  }

  /** Items waiting to be read. */
  get size(): number {
    return this.#items.size;
  }

  /** Appends `item`; false when full or closed. */
  push(item: T): boolean {
    if (this.#closed || !this.#items.push(item)) return false;
    this.#signal();
    return true;
  }

  /** Ends the iteration after the queued items; with `error`, the reader gets it instead of the end. */
  close(error?: unknown): void {
    if (this.#closed) return;
    this.#closed = true;
    if (error !== undefined) {
      this.#failed = true;
      this.#error = error;
    }
    this.#signal();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T, void, undefined> {
    for (;;) {
      if (this.#items.size > 0) {
        yield this.#items.shift() as T;
        continue;
      }
      if (this.#closed) {
        if (this.#failed) throw this.#error;
        return;
      }
      await this.#waker.wait();
    }
  }

  #signal(): void {
    this.#waker.wake();
  }
}
