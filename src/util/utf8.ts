/**
 * UTF-8 text of a range of bytes, for the hand-written protobuf readers
 * (src/mux/frame-decode.ts, src/sync/wire.ts).
 *
 * @module
 */

/** Up to this many ASCII bytes become a string from their char codes; longer ones go to the TextDecoder. */
const ASCII_MAX_BYTES = 32;

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * One array of char codes per length up to {@link ASCII_MAX_BYTES}, reused
 * by every call (utf8Text never yields, and fromCharCode only reads it): a
 * new array per string was most of a short string's cost (a zone decodes a
 * few per received resource).
 */
const codesOfLength: number[][] = Array.from({ length: ASCII_MAX_BYTES + 1 }, (_, n) =>
  new Array<number>(n).fill(0),
);

/**
 * The text of `bytes` [start, end), which must be valid UTF-8 (as proto3
 * strings must): throws a TypeError otherwise. A leading U+FEFF is text, not
 * a byte-order mark. Short ASCII runs (names, versions) skip the decoder.
 */
export function utf8Text(bytes: Uint8Array, start: number, end: number): string {
  const length = end - start;
  if (length <= ASCII_MAX_BYTES) {
    const codes = codesOfLength[length] as number[];
    let ascii = true;
    for (let i = 0; i < length; i++) {
      const b = bytes[start + i] as number;
      if (b > 0x7f) {
        ascii = false;
        break;
      }
      codes[i] = b;
    }
    if (ascii) return String.fromCharCode.apply(String, codes);
  }
  return strictUtf8.decode(bytes.subarray(start, end));
}
