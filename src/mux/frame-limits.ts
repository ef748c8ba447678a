/**
 * What a frame may hold: the weight of a frame (its encoded length, its
 * elements and an estimate of the memory its decoded form holds), the model
 * that estimate uses, and the limits a receiver refuses a frame by.
 * `weighFrame` (frame-size.ts) weighs a decoded frame, `scanFrame`
 * (frame-scan.ts) its encoded bytes; both use what is here.
 *
 * @module
 */
import type { DescMessage } from "@bufbuild/protobuf";

/** What measuring a frame found. */
export interface FrameWeight {
  /** The frame's exact protobuf-encoded length as a `kds.mux.v1.Frame`. */
  wireBytes: number;
  /** Estimated bytes its decoded form holds beyond the wire bytes (objects, arrays, strings). */
  heapBytes: number;
  /** Its elements: every string, bytes or message value (repeated ones each), map entry, repeated scalar and unknown field. */
  elements: number;
}

// Rough V8 (64-bit) costs of decoded values; an upper-leaning estimate, not a measurement of every runtime.
// weighFrame (frame-size.ts) and scanFrame (frame-scan.ts) both estimate with these.
/** An object: its header, plus a slot per field (see {@link objectHeap}). */
const OBJECT_HEAP = 32;
/** A slot: an object's field, an array's element, a map's entry. */
export const SLOT_HEAP = 8;
/** A string: its header (the characters are added). An empty string is shared: a slot only. */
export const STRING_HEAP = 24;
/** A `Uint8Array` view (its bytes stay in the wire buffer, which `wireBytes` counts). */
export const BYTES_HEAP = 96;
/** An array or a map's object, before its elements. */
const CONTAINER_HEAP = 32;
/** An unknown field's record and its data view. */
export const UNKNOWN_HEAP = 48 + BYTES_HEAP;

/** What one decoded message of type `desc` holds before its elements: its object, and an empty array or map for each repeated field. */
export function objectHeap(desc: DescMessage): number {
  let containers = 0;
  for (const field of desc.fields)
    if (field.fieldKind === "list" || field.fieldKind === "map") containers++;
  return OBJECT_HEAP + SLOT_HEAP * (desc.fields.length + 1) + CONTAINER_HEAP * containers;
}

/** Heap of a decoded string of `utf8Bytes` (an empty one is shared). */
export function stringHeap(utf8Bytes: number): number {
  return utf8Bytes === 0 ? 0 : STRING_HEAP + utf8Bytes;
}

/**
 * The most elements one frame may hold (see {@link FrameWeight.elements}):
 * 2^19. A delta response of 10,000 resources holds about 60,000; a resume
 * request naming 100,000 resources about 300,000.
 */
export const MAX_FRAME_ELEMENTS = 2 ** 19;

/**
 * The most a frame's decoded form may hold, as a multiple of its encoded
 * length (plus {@link DENSE_FRAME_ALLOWANCE_BYTES}, so small frames never
 * reach it). Frames of real resources decode to 1.5 to 4 times their
 * length; it takes a frame made mostly of empty strings or empty messages
 * (2 bytes each on the wire, an array slot or a whole object decoded) to
 * pass it.
 */
export const MAX_DECODED_EXPANSION = 16;
/** What a frame may hold decoded beyond {@link MAX_DECODED_EXPANSION} times its length. */
export const DENSE_FRAME_ALLOWANCE_BYTES = 16 * 1024;

/**
 * Why a frame of `weight` is refused before it is buffered (or, where the
 * transport can look at the bytes first, before it is decoded), or
 * undefined when it is not: more than {@link MAX_FRAME_ELEMENTS} elements,
 * or a decoded form over {@link MAX_DECODED_EXPANSION} times its length.
 */
export function frameRefusal(weight: FrameWeight): string | undefined {
  if (weight.elements > MAX_FRAME_ELEMENTS) {
    return (
      `a frame of ${weight.wireBytes} encoded bytes holds ${weight.elements} elements or more, over the ${MAX_FRAME_ELEMENTS} a frame may hold ` +
      "(strings, bytes, messages, map entries, repeated values); split what it carries over several frames"
    );
  }
  if (weight.heapBytes > MAX_DECODED_EXPANSION * weight.wireBytes + DENSE_FRAME_ALLOWANCE_BYTES) {
    return (
      `a frame of ${weight.wireBytes} encoded bytes decodes to an estimated ${weight.heapBytes} bytes of objects, over ${MAX_DECODED_EXPANSION} times its length: ` +
      "it is made of empty or tiny elements (empty strings, empty messages) that no real resource needs; send resources with content"
    );
  }
  return undefined;
}
