/**
 * Snapshot versions: a 64-bit digest (two FNV-1a lanes) of keys and
 * versions, so that an unchanged set has an unchanged version.
 *
 * @module
 */

/** Incremental digest of a sequence of strings. */
export class Digest {
  #a = 0x811c9dc5;
  #b = 0x01000193 ^ 0x5bd1e995;
  #count = 0;

  /** Adds a string (and a separator, so that "ab","c" differs from "a","bc"). */
  add(text: string): this {
    let a = this.#a;
    let b = this.#b;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995) ^ (b >>> 15);
    }
    a = Math.imul(a ^ 0xff, 0x01000193);
    b = Math.imul(b ^ 0xff, 0x5bd1e995) ^ (b >>> 15);
    this.#a = a;
    this.#b = b;
    this.#count++;
    return this;
  }

  /** The digest as a short string (count and 64 bits in hex). */
  toString(): string {
    return `${this.#count}-${(this.#a >>> 0).toString(16).padStart(8, "0")}${(this.#b >>> 0).toString(16).padStart(8, "0")}`;
  }
}
