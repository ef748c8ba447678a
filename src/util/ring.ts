/**
 * A bounded FIFO queue. It grows its storage on demand up to a fixed
 * capacity and never past it: {@link Ring.push} returns false when the queue
 * is full, and the caller decides what that means.
 *
 * @module
 */

/** Slots of a ring's storage at its first push (it doubles from there). */
const FIRST_SLOTS = 4;

/** Bounded FIFO queue backed by a circular array that grows up to `capacity`. */
export class Ring<T> {
  /** The most items the queue ever holds. */
  readonly capacity: number;
  #items: (T | undefined)[];
  #head = 0;
  #size = 0;

  /** @param capacity - the most items the queue ever holds (at least 1) */
  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new RangeError(`ring capacity must be a positive integer, got ${capacity}`);
    this.capacity = capacity;
    // No storage until the first push: every idle session holds four rings, most of them empty or nearly.
    this.#items = [];
  }

  /** Number of queued items. */
  get size(): number {
    return this.#size;
  }

  /** Appends `item`; false when the queue is full. */
  push(item: T): boolean {
    if (this.#size === this.capacity) return false;
    if (this.#size === this.#items.length) this.#grow();
    this.#items[(this.#head + this.#size) % this.#items.length] = item;
    this.#size++;
    return true;
  }

  /** The oldest item, without removing it. */
  peek(): T | undefined {
    return this.#size === 0 ? undefined : this.#items[this.#head];
  }

  /** The item at position `index` from the oldest (0), or undefined. */
  at(index: number): T | undefined {
    return index < 0 || index >= this.#size
      ? undefined
      : this.#items[(this.#head + index) % this.#items.length];
  }

  /** Removes and returns the oldest item. */
  shift(): T | undefined {
    if (this.#size === 0) return undefined;
    const item = this.#items[this.#head];
    this.#items[this.#head] = undefined;
    this.#head = (this.#head + 1) % this.#items.length;
    this.#size--;
    return item;
  }

  /** Removes the first item for which `match` is true; true if one was removed. */
  remove(match: (item: T) => boolean): boolean {
    const n = this.#items.length;
    for (let i = 0; i < this.#size; i++) {
      if (!match(this.#items[(this.#head + i) % n] as T)) continue;
      for (let j = i; j < this.#size - 1; j++)
        this.#items[(this.#head + j) % n] = this.#items[(this.#head + j + 1) % n];
      this.#items[(this.#head + this.#size - 1) % n] = undefined;
      this.#size--;
      return true;
    }
    return false;
  }

  /** Removes and returns every item, oldest first. */
  drain(): T[] {
    const out: T[] = [];
    while (this.#size > 0) out.push(this.shift() as T);
    return out;
  }

  #grow(): void {
    const next = new Array<T | undefined>(
      Math.min(this.capacity, Math.max(FIRST_SLOTS, this.#items.length * 2)),
    );
    for (let i = 0; i < this.#size; i++)
      next[i] = this.#items[(this.#head + i) % this.#items.length];
    this.#items = next;
    this.#head = 0;
  }
}
