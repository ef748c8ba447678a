/**
 * A fixed-capacity FIFO queue. It never grows: {@link Ring.push} returns false
 * when the queue is full, and the caller decides what that means.
 *
 * @module
 */

/** Fixed-capacity FIFO queue backed by a circular array. */
export class Ring<T> {
  /** The most items the queue ever holds. */
  readonly capacity: number;
  readonly #items: (T | undefined)[];
  #head = 0;
  #size = 0;

  /** @param capacity - the most items the queue ever holds (at least 1) */
  constructor(capacity: number) {
    this.capacity = capacity;
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`ring capacity must be a positive integer, got ${capacity}`);
    this.#items = new Array<T | undefined>(capacity);
  }

  /** Number of queued items. */
  get size(): number {
    return this.#size;
  }

  /** Appends `item`; false when the queue is full. */
  push(item: T): boolean {
    if (this.#size === this.capacity) return false;
    this.#items[(this.#head + this.#size) % this.capacity] = item;
    this.#size++;
    return true;
  }

  /** The oldest item, without removing it. */
  peek(): T | undefined {
    return this.#size === 0 ? undefined : this.#items[this.#head];
  }

  /** Removes and returns the oldest item. */
  shift(): T | undefined {
    if (this.#size === 0) return undefined;
    const item = this.#items[this.#head];
    this.#items[this.#head] = undefined;
    this.#head = (this.#head + 1) % this.capacity;
    this.#size--;
    return item;
  }

  /** Removes the first item for which `match` is true; true if one was removed. */
  remove(match: (item: T) => boolean): boolean {
    for (let i = 0; i < this.#size; i++) {
      const idx = (this.#head + i) % this.capacity;
      if (match(this.#items[idx] as T)) {
        for (let j = i; j < this.#size - 1; j++) {
          this.#items[(this.#head + j) % this.capacity] = this.#items[(this.#head + j + 1) % this.capacity];
        }
        this.#items[(this.#head + this.#size - 1) % this.capacity] = undefined;
        this.#size--;
        return true;
      }
    }
    return false;
  }

  /** Removes and returns every item, oldest first. */
  drain(): T[] {
    const out: T[] = [];
    while (this.#size > 0) out.push(this.shift() as T);
    return out;
  }
}
