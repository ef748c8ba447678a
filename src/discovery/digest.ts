/**
 * Set versions: an order-independent 64-bit digest of (key, version) pairs,
 * kept up to date as entries come and go, so an unchanged set keeps its
 * version and a change costs O(1) to account for.
 *
 * @module
 */

/** Hashes one string into two independent 32-bit lanes. */
function hash(text: string): [number, number] {
  let a = 0x811c9dc5;
  let b = 0x9747b28c;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 13;
  }
  return [a >>> 0, (b ^ (b >>> 15)) >>> 0];
}

/** Order-independent digest of a set of (key, version) pairs. */
export class SetDigest {
  #a = 0;
  #b = 0;
  #count = 0;

  /** Accounts for an entry entering the set. */
  add(key: string, version: string): void {
    const [a, b] = hash(`${key}\u0000${version}`);
    this.#a = (this.#a + a) >>> 0;
    this.#b = (this.#b + b) >>> 0;
    this.#count++;
  }

  /** Accounts for an entry leaving the set (it must have been added with the same version). */
  remove(key: string, version: string): void {
    const [a, b] = hash(`${key}\u0000${version}`);
    this.#a = (this.#a - a) >>> 0;
    this.#b = (this.#b - b) >>> 0;
    this.#count--;
  }

  /** The digest, as "<count>-<64 bits in hex>". */
  toString(): string {
    return `${this.#count}-${this.#a.toString(16).padStart(8, "0")}${this.#b.toString(16).padStart(8, "0")}`;
  }
}

/** The digest of a whole set at once. */
export function digestOf(
  entries: Iterable<{ readonly key: string; readonly version: string }>,
): string {
  const d = new SetDigest();
  for (const e of entries) d.add(e.key, e.version);
  return d.toString();
}
