/**
 * A frame's bytes, from pieces encoded once where they can be shared. One
 * change fanned out to thousands of zones is the same resources in every
 * zone's response; only the nonce (and whatever else differs per zone)
 * does not repeat. A sender that knows this records, for the response it
 * hands to a view, its exact protobuf encoding as a list of pieces (see
 * {@link presetEncoding}): the shared ones are the same `Uint8Array`s for
 * every zone, and a transport that writes bytes itself copies them into one
 * write ({@link presetFrameEncoding}) instead of encoding the message per
 * zone (`encodeFrame` writes every other frame). The bytes are exactly what protobuf-es's `toBinary` writes for
 * the frame (fields in the schema's order), so nothing on the wire changes:
 * a peer decodes the same message, and the credit size (the encoded length,
 * docs/protocol.md) is the same number.
 *
 * A transport that serializes messages itself (connect-node's handler, the
 * in-memory transport) never looks here and sends the message as it is.
 *
 * @module
 */
import type { Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import { encodeFrame } from "./frame-encode.ts";
import { utf8Length, varintSize } from "./frame-size.ts";
import type { MuxResponse } from "./frames.ts";

/** A message's encoding in pieces, in order; their concatenation is the encoding. */
export interface EncodedPieces {
  /** The pieces; shared ones may be the same arrays in many encodings and must never be written to. */
  readonly pieces: readonly Uint8Array[];
  /** Their total length in bytes. */
  readonly byteLength: number;
}

/** Encodings recorded for responses, by message object. */
const preset = new WeakMap<MuxResponse, EncodedPieces>();

/**
 * Records `encoding` as the exact protobuf encoding of `response` (what
 * `toBinary` of its schema returns, byte for byte); the frame that carries it
 * is then written from these pieces. The caller must not change `response`
 * afterwards.
 */
export function presetEncoding(response: MuxResponse, encoding: EncodedPieces): void {
  preset.set(response, encoding);
}

/** Field numbers (wire type 2) of the frame's oneof cases that carry a response. */
const RESPONSE_FIELD = { response: 2, deltaResponse: 4 } as const;
/** `Frame.batch` (15) and `Batch.frames` (1). */
const BATCH_FIELD = 15;
const BATCH_FRAMES_FIELD = 1;

/**
 * The encoded length of `frame` when it is known without encoding (a
 * response with a preset encoding), else undefined.
 */
export function presetFrameLength(frame: Frame): number | undefined {
  const value = frame.value;
  if (frame.$unknown !== undefined) return undefined;
  if (value.case !== "deltaResponse" && value.case !== "response") return undefined;
  const inner = preset.get(value.value);
  return inner === undefined ? undefined : delimitedLength(inner.byteLength);
}

/**
 * `frame` encoded as a `kds.mux.v1.Frame` from the preset pieces of the
 * response it carries (or of the responses in a batch, the batch's other
 * frames encoded by `encodeFrame`); undefined when it holds none, for the
 * caller to encode it whole.
 */
export function presetFrameEncoding(frame: Frame): EncodedPieces | undefined {
  const value = frame.value;
  if (frame.$unknown !== undefined) return undefined;
  if (value.case === "deltaResponse" || value.case === "response") {
    const inner = preset.get(value.value);
    return inner === undefined ? undefined : delimited(RESPONSE_FIELD[value.case], inner);
  }
  if (value.case !== "batch" || value.value.$unknown !== undefined) return undefined;
  const frames = value.value.frames;
  if (!frames.some((f) => presetFrameLength(f) !== undefined)) return undefined;
  const pieces: Uint8Array[] = [];
  let byteLength = 0;
  for (const f of frames) {
    const bytes = presetFrameEncoding(f) ?? whole(encodeFrame(f));
    const one = delimited(BATCH_FRAMES_FIELD, bytes);
    for (const piece of one.pieces) pieces.push(piece);
    byteLength += one.byteLength;
  }
  return delimited(BATCH_FIELD, { pieces, byteLength });
}

function whole(bytes: Uint8Array): EncodedPieces {
  return { pieces: [bytes], byteLength: bytes.byteLength };
}

/** Copies `encoding` into `target` at `offset`; returns the offset after it. */
export function copyPieces(encoding: EncodedPieces, target: Uint8Array, offset: number): number {
  let at = offset;
  for (const piece of encoding.pieces) {
    target.set(piece, at);
    at += piece.byteLength;
  }
  return at;
}

/** `inner` as field `field` (length-delimited): its tag and length in front of its pieces. */
function delimited(field: number, inner: EncodedPieces): EncodedPieces {
  const head = new Uint8Array(varintSize((field << 3) | 2) + varintSize(inner.byteLength));
  const at = writeVarint(head, 0, (field << 3) | 2);
  writeVarint(head, at, inner.byteLength);
  return { pieces: [head, ...inner.pieces], byteLength: head.byteLength + inner.byteLength };
}

/** Bytes of a length-delimited field with a one-byte tag holding `length` bytes. */
function delimitedLength(length: number): number {
  return 1 + varintSize(length) + length;
}

/** Writes `n` (unsigned, below 2^32) as a varint at `offset`; returns the offset after it. */
export function writeVarint(target: Uint8Array, offset: number, n: number): number {
  let at = offset;
  let v = n >>> 0;
  while (v >= 0x80) {
    target[at++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  target[at++] = v;
  return at;
}

const utf8 = new TextEncoder();

/**
 * String fields encoded one after the other, each as protobuf writes a
 * string (tag, length, UTF-8 with a lone surrogate as U+FFFD). Every field
 * given is written: leave out a singular field whose value is "" (protobuf
 * omits it), keep an element of a repeated field that is "".
 */
export function stringFields(
  fields: readonly (readonly [field: number, text: string])[],
): Uint8Array {
  const lengths: number[] = [];
  let size = 0;
  for (const [field, text] of fields) {
    const length = utf8Length(text);
    lengths.push(length);
    size += varintSize((field << 3) | 2) + varintSize(length) + length;
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (let f = 0; f < fields.length; f++) {
    const [field, text] = fields[f] as readonly [number, string];
    const length = lengths[f] as number;
    at = writeVarint(out, at, (field << 3) | 2);
    at = writeVarint(out, at, length);
    if (length === text.length) {
      // ASCII (one byte per UTF-16 unit): nonces, versions and type URLs; cheaper than a call into the encoder.
      for (let i = 0; i < length; i++) out[at + i] = text.charCodeAt(i);
      at += length;
    } else at += utf8.encodeInto(text, out.subarray(at, at + length)).written;
  }
  return out;
}
