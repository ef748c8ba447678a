/**
 * {@link SmallMap}: a map from strings for the few entries a stream holds at
 * once (keys changed and not yet sent, responses not yet ACKed), whose
 * storage is kept when it empties.
 *
 * Why not a `Map`: V8 gives a `Map` or `Set` a new table when a `delete`
 * leaves it under a quarter full (so whenever its last entry goes) and on
 * every `clear()`, and a table in the old generation gets its
 * new one there. A stream's map that takes a key with each change and lets
 * it go with the send or the ACK lives from change to change, so it is old:
 * every change of every zone left an old-generation table behind, which only
 * a full collection frees (200,000 set-and-delete cycles on 10,000 promoted
 * maps grew the old space by 9 MiB; in a sampling profile of what a global
 * serving 10,000 zones kept past its young collections, half was such
 * tables).
 *
 * @module
 */

/** Most entries kept in the array, looked up by a linear scan; beyond it a `Map` holds them. */
const ARRAY_MAX = 8;

/**
 * A map from string keys, in insertion order, as a `Map` (a key set again
 * keeps its place; a key deleted and set again goes last). Up to
 * {@link ARRAY_MAX} entries live in one array that is reused as entries come
 * and go, so a map that empties and refills allocates nothing; more spill
 * into a `Map`, dropped when the map empties. Iterating while changing the
 * map is not supported; {@link SmallMap.drain} takes keys out as it goes.
 */
export class SmallMap<V> {
  /** `[key, value, key, value, ...]`: the first `2 * #count` slots hold entries, the rest `undefined`. */
  #slots: Array<string | V | undefined> | undefined;
  #count = 0;
  /** The entries once there are more than {@link ARRAY_MAX} (then the array holds none). */
  #map: Map<string, V> | undefined;

  /** The number of entries. */
  get size(): number {
    return this.#map === undefined ? this.#count : this.#map.size;
  }

  /** The value of `key`, or undefined. */
  get(key: string): V | undefined {
    if (this.#map !== undefined) return this.#map.get(key);
    const at = this.#indexOf(key);
    return at < 0 ? undefined : (this.#slots?.[at + 1] as V);
  }

  /** Whether `key` has an entry. */
  has(key: string): boolean {
    return this.#map !== undefined ? this.#map.has(key) : this.#indexOf(key) >= 0;
  }

  /** Sets `key` to `value` (in place when it has an entry, last otherwise). */
  set(key: string, value: V): this {
    const map = this.#map;
    if (map !== undefined) {
      map.set(key, value);
      return this;
    }
    const at = this.#indexOf(key);
    const slots = this.#slots;
    if (at >= 0) (slots as Array<string | V | undefined>)[at + 1] = value;
    else if (slots === undefined) {
      this.#slots = [key, value];
      this.#count = 1;
    } else if (this.#count < ARRAY_MAX) {
      const end = 2 * this.#count++;
      if (end < slots.length) {
        slots[end] = key;
        slots[end + 1] = value;
      } else slots.push(key, value);
    } else {
      const spilled = new Map<string, V>();
      for (let i = 0; i < 2 * this.#count; i += 2) {
        spilled.set(slots[i] as string, slots[i + 1] as V);
        slots[i] = undefined;
        slots[i + 1] = undefined;
      }
      spilled.set(key, value);
      this.#count = 0;
      this.#map = spilled;
    }
    return this;
  }

  /** Removes `key`'s entry; returns whether it had one. */
  delete(key: string): boolean {
    const map = this.#map;
    if (map !== undefined) {
      if (!map.delete(key)) return false;
      if (map.size === 0) this.#map = undefined;
      return true;
    }
    const at = this.#indexOf(key);
    if (at < 0) return false;
    this.#removeFront(at, 1);
    return true;
  }

  /** Removes every entry (the array is kept for the next). */
  clear(): void {
    this.#map = undefined;
    const slots = this.#slots;
    if (slots !== undefined) for (let i = 0; i < 2 * this.#count; i++) slots[i] = undefined;
    this.#count = 0;
  }

  /** The first key in insertion order, or undefined when empty. */
  firstKey(): string | undefined {
    if (this.#map !== undefined) return this.#map.keys().next().value;
    return this.#count === 0 ? undefined : (this.#slots?.[0] as string);
  }

  /** Calls `visit` with each entry, in insertion order (the map must not change meanwhile). */
  forEach(visit: (value: V, key: string) => void): void {
    if (this.#map !== undefined) {
      for (const [key, value] of this.#map) visit(value, key);
      return;
    }
    const slots = this.#slots;
    if (slots === undefined) return;
    for (let i = 0; i < 2 * this.#count; i += 2) visit(slots[i + 1] as V, slots[i] as string);
  }

  /** The keys, in insertion order (the map must not change meanwhile). */
  *keys(): IterableIterator<string> {
    if (this.#map !== undefined) {
      yield* this.#map.keys();
      return;
    }
    const slots = this.#slots;
    if (slots === undefined) return;
    for (let i = 0; i < 2 * this.#count; i += 2) yield slots[i] as string;
  }

  /**
   * Offers the keys to `take` in insertion order and removes each it takes
   * (returns true for); stops at the first it does not take, which stays
   * with the rest. `take` must not change the map. Returns whether every key
   * was taken.
   */
  drain(take: (key: string) => boolean): boolean {
    const map = this.#map;
    if (map !== undefined) {
      for (const key of map.keys()) {
        if (!take(key)) return false;
        map.delete(key); // deleting the visited key while iterating is well defined for a Map
      }
      this.#map = undefined;
      return true;
    }
    const slots = this.#slots;
    let taken = 0;
    while (
      taken < this.#count &&
      take((slots as Array<string | V | undefined>)[2 * taken] as string)
    )
      taken++;
    const all = taken === this.#count;
    if (taken > 0) this.#removeFront(0, taken);
    return all;
  }

  #indexOf(key: string): number {
    const slots = this.#slots;
    if (slots === undefined) return -1;
    for (let i = 0; i < 2 * this.#count; i += 2) if (slots[i] === key) return i;
    return -1;
  }

  /** Removes `n` entries from slot `at` on, moving the later ones down. */
  #removeFront(at: number, n: number): void {
    const slots = this.#slots as Array<string | V | undefined>;
    const end = 2 * this.#count;
    const gap = 2 * n;
    for (let i = at + gap; i < end; i++) slots[i - gap] = slots[i];
    for (let i = end - gap; i < end; i++) slots[i] = undefined;
    this.#count -= n;
  }
}
