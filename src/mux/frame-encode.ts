/**
 * Encodes a frame for the wire, after room for a transport's prefix (gRPC's
 * 5-byte length prefix), into one buffer. The bytes are exactly protobuf-es's
 * `toBinary(FrameSchema, frame)` (a property test checks it:
 * test/mux/frame-encode.test.ts).
 *
 * Delta responses, and batches of them, are the bulk of a sync: those are
 * written in one pass into a buffer of their exact size, measured first; so
 * is a plain ACK (a delta request of a type URL and a response nonce alone),
 * which every zone sends for every response it applies.
 * `toBinary` writes each nested message into a buffer of its own and copies
 * it into its parent's, so a resource's bytes were copied once per level
 * (resource, response, frame, batch), and the transport copied the whole
 * frame once more behind its prefix; a global serving a 100k-resource sync
 * spent a third of its CPU time there. Any other frame, and a delta response
 * holding anything this writer does not write (unknown fields, aliases, a
 * TTL), is measured by its credit size (frame-size.ts) and written back to
 * front in place by the generic writer (message-write.ts): a 64 KiB request
 * or response is copied once, into the buffer the transport sends.
 *
 * @module
 */
import type { Any } from "@bufbuild/protobuf/wkt";
import { FrameSchema, type Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import type {
  DeltaDiscoveryRequest,
  DeltaDiscoveryResponse,
  Resource,
} from "../gen/kds/v1/discovery_pb.ts";
import { creditSize, plainAckSize, utf8Length, varintSize } from "./frame-size.ts";
import { writeMessageBackwards, type Sink } from "./message-write.ts";
import * as tags from "./frame-tags.ts";

/** Allocates the output buffer (a transport may pass an allocator that skips zero-filling, such as Node's `Buffer.allocUnsafe`). */
export type Allocate = (bytes: number) => Uint8Array;

const newBytes: Allocate = (bytes) => new Uint8Array(bytes);

/**
 * `frame` encoded as a `kds.mux.v1.Frame` at offset `prefix` of a buffer of
 * `prefix` + its encoded length (the first `prefix` bytes are left for the
 * caller to fill).
 */
export function encodeFrame(frame: Frame, prefix = 0, allocate: Allocate = newBytes): Uint8Array {
  const plan: Plan = { sizes: [], others: [] };
  const size = frameSize(frame, plan);
  if (size === undefined) {
    const bytes = creditSize(frame);
    const out = allocate(prefix + bytes);
    const start = writeMessageBackwards(
      FrameSchema,
      frame,
      { buf: out, view: undefined },
      out.byteLength,
    );
    if (start !== prefix)
      throw new Error(`frame-encode: wrote ${out.byteLength - start} of ${bytes} bytes`);
    return out;
  }
  const out = allocate(prefix + size);
  const w: Writer = {
    buf: out,
    pos: prefix,
    sizes: plan.sizes,
    at: 0,
    others: plan.others,
    other: 0,
    sink: { buf: out, view: undefined },
  };
  writeFrame(w, frame);
  if (w.pos !== out.byteLength)
    throw new Error(`frame-encode: wrote ${w.pos - prefix} of ${size} bytes`);
  return out;
}

/**
 * What the measuring pass leaves for the writing pass: lengths in the order
 * the writer needs them (a message's length before its fields'), and the
 * frames inside a batch that the generic writer writes (message-write.ts).
 */
interface Plan {
  readonly sizes: number[];
  readonly others: Frame[];
}

interface Writer {
  readonly buf: Uint8Array;
  pos: number;
  readonly sizes: readonly number[];
  at: number;
  readonly others: readonly Frame[];
  other: number;
  /** The same buffer, for the generic writer. */
  readonly sink: Sink;
}

/** Bytes of a length-delimited field (one-byte tag) holding `length` bytes. */
function fieldSize(length: number): number {
  return 1 + varintSize(length) + length;
}

function plain(message: { $unknown?: unknown[] }): boolean {
  return message.$unknown === undefined || message.$unknown.length === 0;
}

/** The encoded length of `frame`, planned into `plan`; undefined when the whole frame goes through `toBinary`. */
function frameSize(frame: Frame, plan: Plan): number | undefined {
  // A frame carrying a trace context (only while tracing) goes through the generic writer.
  if (!plain(frame) || frame.traceContext !== undefined) return undefined;
  const value = frame.value;
  if (value.case === "deltaResponse") {
    const at = plan.sizes.length;
    const body = responseSize(value.value, plan);
    if (body === undefined) {
      plan.sizes.length = at;
      return undefined;
    }
    return fieldSize(body);
  }
  if (value.case === "deltaRequest") {
    const typeUrl = utf8Length(value.value.typeUrl);
    const nonce = utf8Length(value.value.responseNonce);
    const body = plainAckSize(value.value, typeUrl, nonce);
    if (body === undefined) return undefined;
    plan.sizes.push(body, typeUrl, nonce);
    return fieldSize(body);
  }
  if (value.case === "batch" && plain(value.value)) {
    const at = plan.sizes.length;
    plan.sizes.push(0); // the batch's length
    let body = 0;
    for (const inner of value.value.frames) {
      const slot = plan.sizes.length;
      plan.sizes.push(0); // the inner frame's length
      let size = frameSize(inner, plan);
      if (size === undefined) {
        plan.sizes.length = slot + 1;
        plan.others.push(inner);
        size = creditSize(inner);
        plan.sizes.push(-1); // marks a frame for the generic writer
      }
      plan.sizes[slot] = size;
      body += fieldSize(size);
    }
    plan.sizes[at] = body;
    return fieldSize(body);
  }
  return undefined;
}

/** The encoded length of a delta response's fields (its own length goes first into the plan), or undefined when it holds what this writer does not write. */
function responseSize(response: DeltaDiscoveryResponse, plan: Plan): number | undefined {
  if (!plain(response)) return undefined;
  const sizes = plan.sizes;
  const at = sizes.length;
  sizes.push(0, 0, 0, 0); // the body, the version's, type URL's and nonce's lengths
  const version = utf8Length(response.systemVersionInfo);
  const typeUrl = utf8Length(response.typeUrl);
  const nonce = utf8Length(response.nonce);
  let body = 0;
  if (version > 0) body += fieldSize(version);
  if (typeUrl > 0) body += fieldSize(typeUrl);
  if (nonce > 0) body += fieldSize(nonce);
  for (const resource of response.resources) {
    const size = resourceSize(resource, sizes);
    if (size === undefined) return undefined;
    body += fieldSize(size);
  }
  for (const key of response.removedResources) {
    const length = utf8Length(key);
    sizes.push(length);
    body += fieldSize(length);
  }
  sizes[at] = body;
  sizes[at + 1] = version;
  sizes[at + 2] = typeUrl;
  sizes[at + 3] = nonce;
  return body;
}

/** Planned: the resource's length, then its version's, its Any's (-1 when it has none), the Any's type URL's, and its name's. */
function resourceSize(resource: Resource, sizes: number[]): number | undefined {
  if (!plain(resource) || resource.aliases.length > 0 || resource.ttl !== undefined)
    return undefined;
  const any: Any | undefined = resource.resource;
  if (any !== undefined && !plain(any)) return undefined;
  const version = utf8Length(resource.version);
  const name = utf8Length(resource.name);
  let body = 0;
  if (version > 0) body += fieldSize(version);
  if (name > 0) body += fieldSize(name);
  let anyBody = -1;
  let typeUrl = 0;
  if (any !== undefined) {
    typeUrl = typeUrlLength(any.typeUrl);
    anyBody = 0;
    if (typeUrl > 0) anyBody += fieldSize(typeUrl);
    if (any.value.byteLength > 0) anyBody += fieldSize(any.value.byteLength);
    body += fieldSize(anyBody);
  }
  sizes.push(body, version, anyBody, typeUrl, name);
  return body;
}

function writeVarint(w: Writer, n: number): void {
  const buf = w.buf;
  let pos = w.pos;
  while (n >= 0x80) {
    buf[pos++] = (n & 0x7f) | 0x80;
    n = Math.floor(n / 0x80);
  }
  buf[pos++] = n;
  w.pos = pos;
}

const encoder = new TextEncoder();

/** Writes a string field of `length` UTF-8 bytes (when not empty). */
function writeString(w: Writer, tag: number, text: string, length: number): void {
  if (length === 0) return;
  w.buf[w.pos++] = tag;
  writeVarint(w, length);
  const buf = w.buf;
  const pos = w.pos;
  if (length === text.length) {
    // ASCII: one byte per character.
    for (let i = 0; i < length; i++) buf[pos + i] = text.charCodeAt(i);
  } else encoder.encodeInto(text, buf.subarray(pos, pos + length));
  w.pos = pos + length;
}

/** The last type URL of an Any written, encoded: a response's resources all carry the same one. */
let lastTypeUrl = "";
let lastTypeUrlBytes = new Uint8Array(0);

function typeUrlLength(typeUrl: string): number {
  if (typeUrl === lastTypeUrl) return lastTypeUrlBytes.byteLength;
  lastTypeUrlBytes = encoder.encode(typeUrl);
  lastTypeUrl = typeUrl;
  return lastTypeUrlBytes.byteLength;
}

function writeTypeUrl(w: Writer, typeUrl: string, length: number): void {
  if (length === 0) return;
  if (typeUrl !== lastTypeUrl) {
    writeString(w, tags.TAG_ANY_TYPE_URL, typeUrl, length);
    return;
  }
  const buf = w.buf;
  buf[w.pos++] = tags.TAG_ANY_TYPE_URL;
  writeVarint(w, length);
  const bytes = lastTypeUrlBytes;
  const pos = w.pos;
  for (let i = 0; i < length; i++) buf[pos + i] = bytes[i] as number;
  w.pos = pos + length;
}

function writeFrame(w: Writer, frame: Frame): void {
  const value = frame.value;
  if (value.case === "deltaResponse") {
    w.buf[w.pos++] = tags.TAG_FRAME_DELTA_RESPONSE;
    writeResponse(w, value.value);
    return;
  }
  if (value.case === "deltaRequest") {
    w.buf[w.pos++] = tags.TAG_FRAME_DELTA_REQUEST;
    writeAck(w, value.value);
    return;
  }
  if (value.case !== "batch") throw new Error("frame-encode: a frame the plan did not measure");
  w.buf[w.pos++] = tags.TAG_FRAME_BATCH;
  writeVarint(w, w.sizes[w.at++] as number);
  for (const inner of value.value.frames) {
    const size = w.sizes[w.at++] as number;
    w.buf[w.pos++] = tags.TAG_BATCH_FRAMES;
    writeVarint(w, size);
    if (w.sizes[w.at] === -1) {
      w.at++;
      const other = w.others[w.other++] as Frame;
      const end = w.pos + size;
      if (writeMessageBackwards(FrameSchema, other, w.sink, end) !== w.pos)
        throw new Error("frame-encode: a batched frame's bytes differ from its measured size");
      w.pos = end;
    } else writeFrame(w, inner);
  }
}

/** A plain ACK (see `plainAckSize`): its type URL and response nonce, in field order. */
function writeAck(w: Writer, request: DeltaDiscoveryRequest): void {
  const sizes = w.sizes;
  const at = w.at;
  w.at += 3;
  writeVarint(w, sizes[at] as number);
  writeString(w, tags.TAG_REQUEST_TYPE_URL, request.typeUrl, sizes[at + 1] as number);
  writeString(w, tags.TAG_REQUEST_NONCE, request.responseNonce, sizes[at + 2] as number);
}

function writeResponse(w: Writer, response: DeltaDiscoveryResponse): void {
  const sizes = w.sizes;
  const at = w.at;
  w.at += 4;
  writeVarint(w, sizes[at] as number);
  writeString(w, tags.TAG_RESPONSE_VERSION, response.systemVersionInfo, sizes[at + 1] as number);
  for (const resource of response.resources) writeResource(w, resource);
  writeString(w, tags.TAG_RESPONSE_TYPE_URL, response.typeUrl, sizes[at + 2] as number);
  writeString(w, tags.TAG_RESPONSE_NONCE, response.nonce, sizes[at + 3] as number);
  for (const key of response.removedResources) {
    const length = sizes[w.at++] as number;
    if (length > 0) writeString(w, tags.TAG_RESPONSE_REMOVED, key, length);
    else {
      // An element of a repeated field is written even when empty.
      w.buf[w.pos++] = tags.TAG_RESPONSE_REMOVED;
      w.buf[w.pos++] = 0;
    }
  }
}

function writeResource(w: Writer, resource: Resource): void {
  const sizes = w.sizes;
  const at = w.at;
  w.at += 5;
  w.buf[w.pos++] = tags.TAG_RESPONSE_RESOURCES;
  writeVarint(w, sizes[at] as number);
  writeString(w, tags.TAG_RESOURCE_VERSION, resource.version, sizes[at + 1] as number);
  const anyBody = sizes[at + 2] as number;
  const any = resource.resource;
  if (any !== undefined && anyBody >= 0) {
    w.buf[w.pos++] = tags.TAG_RESOURCE_ANY;
    writeVarint(w, anyBody);
    writeTypeUrl(w, any.typeUrl, sizes[at + 3] as number);
    const value = any.value;
    if (value.byteLength > 0) {
      w.buf[w.pos++] = tags.TAG_ANY_VALUE;
      writeVarint(w, value.byteLength);
      w.buf.set(value, w.pos);
      w.pos += value.byteLength;
    }
  }
  writeString(w, tags.TAG_RESOURCE_NAME, resource.name, sizes[at + 4] as number);
}
