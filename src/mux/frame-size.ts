/**
 * What a frame weighs, computed from the decoded frame without encoding it:
 * its exact protobuf-encoded length (the byte credit it takes, and what the
 * wire carries), and an estimate of the memory its decoded form holds (what
 * the process's memory budget is charged for it).
 *
 * The encoded length is what any protobuf library's size function returns
 * for the same message (`ByteSize()`, `encodedLength`, the length of
 * `SerializeToString()`): fields in number order, implicit-presence fields
 * at their zero value left out, repeated scalars packed, map entries with
 * both key and value, unknown fields as they were read. A property test
 * checks it against protobuf-es's `toBinary` (test/mux/frame-size.test.ts).
 *
 * The memory estimate is this implementation's own (a peer never computes
 * it): a decoded message costs far more than its encoding when it holds
 * many tiny elements (an empty string costs 2 bytes on the wire and a slot
 * in an array; an empty message 2 bytes and an object with every field), so
 * the budget counts what the receiver really holds, not only the bytes.
 *
 * Sizers are compiled once per message type, as protobuf-es compiles its
 * encoders, so a 4 MiB response is measured in one pass over its fields.
 *
 * @module
 */
import {
  fromJson,
  toBinary,
  type DescField,
  type DescMessage,
  type DescOneof,
  type JsonObject,
} from "@bufbuild/protobuf";
import { ScalarType } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { FrameSchema, type Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import type {
  DeltaDiscoveryRequest,
  DeltaDiscoveryResponse,
  Resource,
} from "../gen/kds/v1/discovery_pb.ts";
import {
  BYTES_HEAP,
  SLOT_HEAP,
  UNKNOWN_HEAP,
  objectHeap,
  stringHeap,
  type FrameWeight,
} from "./frame-limits.ts";

/** Running totals a sizer adds to while it walks a message. */
interface Tally {
  heapBytes: number;
  elements: number;
}

type Sizer = (message: Record<string, unknown>, tally: Tally) => number;

const sizers = new WeakMap<DescMessage, Sizer>();

/**
 * Measures `frame`: its exact encoded length as a `kds.mux.v1.Frame` and
 * the estimated memory its decoded form holds. For a batch, measure each
 * inner frame (the credit of a batch is the sum of its frames').
 */
export function weighFrame(frame: Frame): FrameWeight {
  if (frame === lastScanned) {
    const weight = lastWeight as FrameWeight;
    lastScanned = undefined;
    lastWeight = undefined;
    return weight;
  }
  const known = scanned.get(frame);
  if (known !== undefined) return known;
  const tally: Tally = { heapBytes: 0, elements: 0 };
  const wireBytes = sizerOf(FrameSchema)(frame as unknown as Record<string, unknown>, tally);
  return { wireBytes, heapBytes: tally.heapBytes, elements: tally.elements };
}

/**
 * The frame remembered last and its weight, until {@link weighFrame} takes
 * them: nearly every frame is weighed before the next is decoded (a
 * transport decodes one, the session weighs it), and a weak map entry for
 * each (a zone's every ACK on the global, every response on a zone) grew
 * the map's table and lived until a collection cleared it.
 */
let lastScanned: Frame | undefined;
let lastWeight: FrameWeight | undefined;

/** Weights of frames remembered while another waited to be weighed (the frames of a batch, say). */
const scanned = new WeakMap<Frame, FrameWeight>();

/**
 * Records the weight `scanFrame` found in the bytes `frame` was decoded
 * from, for {@link weighFrame} to return instead of walking the frame: only
 * for bytes that are exactly the frame's encoding (frame-decode.ts), where
 * the two agree (a property test checks it). Holds at most one frame
 * strongly (the last, until it is weighed).
 */
export function rememberWeight(frame: Frame, weight: FrameWeight): void {
  if (lastScanned !== undefined) scanned.set(lastScanned, lastWeight as FrameWeight);
  lastScanned = frame;
  lastWeight = weight;
}

/**
 * The credit size of a data frame: its exact protobuf-encoded length as a
 * `kds.mux.v1.Frame`, what it takes from its lane's byte window (see
 * docs/protocol.md, "Flow control"). A frame inside a batch counts alone.
 * A delta response (the bulk of a sync) and a plain ACK are measured by
 * walks written for them, several times quicker than the compiled sizer;
 * anything else, and a
 * delta response holding what that walk does not count (unknown fields,
 * aliases, a TTL, a trace context), by the sizer.
 */
export function creditSize(frame: Frame): number {
  const value = frame.value;
  // A frame carrying a trace context is measured by the sizer, which counts it.
  const plain = frame.$unknown === undefined && frame.traceContext === undefined;
  if (value.case === "deltaResponse" && plain) {
    const body = deltaResponseSize(value.value);
    if (body !== undefined) return fieldBytes(body);
  } else if (value.case === "deltaRequest" && plain) {
    const request = value.value;
    const body = plainAckSize(
      request,
      utf8Length(request.typeUrl),
      utf8Length(request.responseNonce),
    );
    if (body !== undefined) return fieldBytes(body);
  }
  return sizerOf(FrameSchema)(frame as unknown as Record<string, unknown>, {
    heapBytes: 0,
    elements: 0,
  });
}

/**
 * The encoded length of a plain ACK's fields: a delta request holding
 * nothing but its type URL and response nonce (of `typeUrl` and `nonce`
 * UTF-8 bytes), what a zone sends for every response it applies; undefined
 * for any other request (a node, subscriptions, initial versions, an error
 * detail, unknown fields), which the compiled sizer measures.
 */
export function plainAckSize(
  request: DeltaDiscoveryRequest,
  typeUrl: number,
  nonce: number,
): number | undefined {
  if (
    (request.$unknown !== undefined && request.$unknown.length > 0) ||
    request.node !== undefined ||
    request.errorDetail !== undefined ||
    request.resourceNamesSubscribe.length > 0 ||
    request.resourceNamesUnsubscribe.length > 0
  )
    return undefined;
  for (const _ in request.initialResourceVersions) return undefined;
  let body = 0;
  if (typeUrl > 0) body += fieldBytes(typeUrl);
  if (nonce > 0) body += fieldBytes(nonce);
  return body;
}

/** Bytes of a length-delimited field with a one-byte tag holding `length` bytes. */
function fieldBytes(length: number): number {
  return 1 + varintSize(length) + length;
}

/** The last Any type URL measured and its UTF-8 length: a response's resources share one string. */
let lastTypeUrl = "";
let lastTypeUrlBytes = 0;

/** The encoded length of a delta response's fields, or undefined when it holds unknown fields, aliases or a TTL. */
function deltaResponseSize(response: DeltaDiscoveryResponse): number | undefined {
  if (response.$unknown !== undefined && response.$unknown.length > 0) return undefined;
  let body = 0;
  const version = utf8Length(response.systemVersionInfo);
  const typeUrl = utf8Length(response.typeUrl);
  const nonce = utf8Length(response.nonce);
  if (version > 0) body += fieldBytes(version);
  if (typeUrl > 0) body += fieldBytes(typeUrl);
  if (nonce > 0) body += fieldBytes(nonce);
  const resources = response.resources;
  for (let i = 0; i < resources.length; i++) {
    const resource = resources[i] as Resource;
    if (
      (resource.$unknown !== undefined && resource.$unknown.length > 0) ||
      resource.aliases.length > 0 ||
      resource.ttl !== undefined
    )
      return undefined;
    let size = 0;
    const resourceVersion = utf8Length(resource.version);
    const name = utf8Length(resource.name);
    if (resourceVersion > 0) size += fieldBytes(resourceVersion);
    if (name > 0) size += fieldBytes(name);
    const any = resource.resource;
    if (any !== undefined) {
      if (any.$unknown !== undefined && any.$unknown.length > 0) return undefined;
      if (any.typeUrl !== lastTypeUrl) {
        lastTypeUrl = any.typeUrl;
        lastTypeUrlBytes = utf8Length(any.typeUrl);
      }
      let anyBody = 0;
      if (lastTypeUrlBytes > 0) anyBody += fieldBytes(lastTypeUrlBytes);
      if (any.value.byteLength > 0) anyBody += fieldBytes(any.value.byteLength);
      size += fieldBytes(anyBody);
    }
    body += fieldBytes(size);
  }
  for (const key of response.removedResources) body += fieldBytes(utf8Length(key));
  return body;
}

function sizerOf(desc: DescMessage): Sizer {
  const known = sizers.get(desc);
  if (known !== undefined) return known;
  const fields: Sizer[] = [];
  const heap = objectHeap(desc);
  const sizer: Sizer = (message, tally) => {
    tally.heapBytes += heap;
    let bytes = 0;
    for (let i = 0; i < fields.length; i++) bytes += (fields[i] as Sizer)(message, tally);
    const unknown = message.$unknown as
      | { no: number; wireType: number; data: Uint8Array }[]
      | undefined;
    if (unknown !== undefined) {
      for (const field of unknown) {
        bytes += varintSize(((field.no << 3) | field.wireType) >>> 0) + field.data.byteLength;
        tally.heapBytes += UNKNOWN_HEAP;
        tally.elements++;
      }
    }
    return bytes;
  };
  // Registered before the fields compile, so a recursive type finds itself.
  sizers.set(desc, sizer);
  for (const run of fieldRuns(desc))
    fields.push(run.kind === "field" ? fieldSizer(run.field) : oneofSizer(run));
  return sizer;
}

/** The sizer of a run of a oneof's members: only the set member's is called. */
function oneofSizer(run: FieldRun & { kind: "oneof" }): Sizer {
  const pick = oneofPicker(run, fieldSizer);
  return (message, tally) => {
    const member = pick(message);
    return member === undefined ? 0 : member(message, tally);
  };
}

/** One field, or the members of one oneof that follow each other in field-number order. */
export type FieldRun =
  | { readonly kind: "field"; readonly field: DescField }
  | { readonly kind: "oneof"; readonly oneof: DescOneof; readonly members: readonly DescField[] };

/**
 * The fields of `desc` in field-number order, each oneof's members that
 * follow each other (no other field between them) as one run: a frame's
 * eleven kinds are looked up by the case set, not tried one by one.
 */
export function fieldRuns(desc: DescMessage): FieldRun[] {
  const runs: FieldRun[] = [];
  for (const field of [...desc.fields].sort((a, b) => a.number - b.number)) {
    const last = runs.at(-1);
    if (field.oneof === undefined) runs.push({ kind: "field", field });
    else if (last?.kind === "oneof" && last.oneof === field.oneof)
      (last.members as DescField[]).push(field);
    else runs.push({ kind: "oneof", oneof: field.oneof, members: [field] });
  }
  return runs;
}

/**
 * Picks, for a run of a oneof's members, the function (built once per member
 * by `each`) of the member the message's oneof case names; undefined when
 * the case is unset or names a member outside the run.
 */
export function oneofPicker<F>(
  run: { readonly oneof: DescOneof; readonly members: readonly DescField[] },
  each: (field: DescField) => F,
): (message: Record<string, unknown>) => F | undefined {
  const byCase = new Map(run.members.map((field) => [field.localName, each(field)] as const));
  const name = run.oneof.localName;
  return (message) => {
    const selected = (message[name] as { case: string | undefined }).case;
    return selected === undefined ? undefined : byCase.get(selected);
  };
}

const IMPLICIT_PRESENCE = 2;
const WIRE_VARINT = 0;
const WIRE_FIXED64 = 1;
const WIRE_DELIMITED = 2;
const WIRE_FIXED32 = 5;

function fieldSizer(field: DescField): Sizer {
  const name = field.localName;
  switch (field.fieldKind) {
    case "scalar":
    case "enum": {
      const type = field.fieldKind === "enum" ? ScalarType.INT32 : field.scalar;
      const tag = tagSize(field.number, wireTypeOf(type));
      const value = scalarSizer(type);
      const zero = field.fieldKind === "enum" ? (field.enum.values[0]?.number ?? 0) : undefined;
      const present = presence(field, type, zero);
      if (
        field.oneof === undefined &&
        type === ScalarType.STRING &&
        field.presence === IMPLICIT_PRESENCE
      ) {
        // The most common field of all (names, versions, type URLs): read and measured inline.
        return (message, tally) => {
          const v = message[name] as string;
          if (v === "") return 0;
          tally.elements++;
          const bytes = utf8Length(v);
          tally.heapBytes += stringHeap(bytes);
          return tag + varintSize(bytes) + bytes;
        };
      }
      if (
        field.oneof === undefined &&
        type === ScalarType.BYTES &&
        field.presence === IMPLICIT_PRESENCE
      ) {
        return (message, tally) => {
          const bytes = (message[name] as Uint8Array).byteLength;
          if (bytes === 0) return 0;
          tally.elements++;
          tally.heapBytes += BYTES_HEAP;
          return tag + varintSize(bytes) + bytes;
        };
      }
      const counts = type === ScalarType.STRING || type === ScalarType.BYTES ? 1 : 0;
      return (message, tally) => {
        const v = read(message, field, name);
        if (!present(v)) return 0;
        tally.elements += counts;
        return tag + value(v, tally);
      };
    }
    case "message": {
      const tag = tagSize(field.number, WIRE_DELIMITED);
      const child = childSizer(field);
      return (message, tally) => {
        const v = field.oneof === undefined ? message[name] : read(message, field, name);
        if (v === undefined) return 0;
        tally.elements++;
        const inner = child(v, tally);
        return tag + varintSize(inner) + inner;
      };
    }
    case "list": {
      if (field.listKind === "message") {
        const tag = tagSize(field.number, WIRE_DELIMITED);
        const child = childSizer(field);
        return (message, tally) => {
          const items = message[name] as unknown[];
          tally.heapBytes += SLOT_HEAP * items.length;
          tally.elements += items.length;
          let bytes = 0;
          for (let i = 0; i < items.length; i++) {
            const inner = child(items[i], tally);
            bytes += tag + varintSize(inner) + inner;
          }
          return bytes;
        };
      }
      const type = field.listKind === "enum" ? ScalarType.INT32 : field.scalar;
      const value = scalarSizer(type);
      if (field.packed) {
        const tag = tagSize(field.number, WIRE_DELIMITED);
        return (message, tally) => {
          const items = message[name] as unknown[];
          tally.heapBytes += SLOT_HEAP * items.length;
          tally.elements += items.length;
          if (items.length === 0) return 0;
          let inner = 0;
          for (let i = 0; i < items.length; i++) inner += value(items[i], tally);
          return tag + varintSize(inner) + inner;
        };
      }
      const tag = tagSize(field.number, wireTypeOf(type));
      return (message, tally) => {
        const items = message[name] as unknown[];
        tally.heapBytes += SLOT_HEAP * items.length;
        tally.elements += items.length;
        let bytes = 0;
        for (let i = 0; i < items.length; i++) bytes += tag + value(items[i], tally);
        return bytes;
      };
    }
    case "map": {
      const tag = tagSize(field.number, WIRE_DELIMITED);
      const keyType = field.mapKey;
      const keyTag = tagSize(1, wireTypeOf(keyType));
      const key = scalarSizer(keyType);
      const toKey = mapKeyOf(keyType);
      let entryValue: (v: unknown, tally: Tally) => number;
      if (field.mapKind === "message") {
        const child = sizerOf(field.message);
        const valueTag = tagSize(2, WIRE_DELIMITED);
        entryValue = (v, tally) => {
          const inner = child(v as Record<string, unknown>, tally);
          return valueTag + varintSize(inner) + inner;
        };
      } else {
        const type = field.mapKind === "enum" ? ScalarType.INT32 : field.scalar;
        const valueTag = tagSize(2, wireTypeOf(type));
        const value = scalarSizer(type);
        entryValue = (v, tally) => valueTag + value(v, tally);
      }
      return (message, tally) => {
        const record = message[name] as Record<string, unknown>;
        let bytes = 0;
        for (const k of Object.keys(record)) {
          const inner = keyTag + key(toKey(k), tally) + entryValue(record[k], tally);
          bytes += tag + varintSize(inner) + inner;
          tally.heapBytes += SLOT_HEAP;
          tally.elements++;
        }
        return bytes;
      };
    }
  }
}

/** The value of a singular field, looking inside its oneof. */
export function read(message: Record<string, unknown>, field: DescField, name: string): unknown {
  if (field.oneof === undefined) return message[name];
  const oneof = message[field.oneof.localName] as { case: string | undefined; value?: unknown };
  return oneof.case === name ? oneof.value : undefined;
}

/** Whether a singular scalar is written, as protobuf's presence rules say. */
export function presence(
  field: DescField,
  type: ScalarType,
  enumZero: number | undefined,
): (v: unknown) => boolean {
  if (field.oneof !== undefined || field.presence !== IMPLICIT_PRESENCE)
    return (v) => v !== undefined;
  if (enumZero !== undefined) return (v) => v !== enumZero;
  switch (type) {
    case ScalarType.BOOL:
      return (v) => v !== false;
    case ScalarType.STRING:
      return (v) => v !== "";
    case ScalarType.BYTES:
      return (v) => (v as Uint8Array).byteLength > 0;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return (v) => !Object.is(v, 0);
    default:
      // A 64-bit integer is a bigint, or a string under the jstype option.
      return (v) => v !== 0 && v !== 0n && v !== "0";
  }
}

/** The sizer of a message-typed field's value; google.protobuf.Struct fields hold a JSON object locally. */
function childSizer(
  field: DescField & { message: DescMessage },
): (v: unknown, tally: Tally) => number {
  if (holdsJsonStruct(field)) {
    // Free-form metadata: rare and small; measured by encoding it.
    return (v, tally) => {
      const bytes = toBinary(StructSchema, fromJson(StructSchema, v as JsonObject)).byteLength;
      tally.heapBytes += 4 * bytes;
      return bytes;
    };
  }
  const sizer = sizerOf(field.message);
  return (v, tally) => sizer(v as Record<string, unknown>, tally);
}

/** Whether a message-typed field holds a google.protobuf.Struct, which protobuf-es keeps as a JSON object. */
export function holdsJsonStruct(field: DescField & { message: DescMessage }): boolean {
  return (
    field.message.typeName === "google.protobuf.Struct" &&
    field.parent.typeName !== "google.protobuf.Value"
  );
}

/** A map's key as its scalar type (the decoded map's keys are strings). */
export function mapKeyOf(type: ScalarType): (key: string) => unknown {
  switch (type) {
    case ScalarType.STRING:
      return (key) => key;
    case ScalarType.BOOL:
      return (key) => key === "true";
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return (key) => BigInt(key);
    default:
      return (key) => Number.parseInt(key, 10);
  }
}

/** The wire type a scalar of `type` is written with. */
export function wireTypeOf(type: ScalarType): number {
  switch (type) {
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return WIRE_DELIMITED;
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return WIRE_FIXED64;
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return WIRE_FIXED32;
    default:
      return WIRE_VARINT;
  }
}

function scalarSizer(type: ScalarType): (v: unknown, tally: Tally) => number {
  switch (type) {
    case ScalarType.STRING:
      return (v, tally) => {
        const text = v as string;
        const bytes = utf8Length(text);
        tally.heapBytes += stringHeap(bytes);
        return varintSize(bytes) + bytes;
      };
    case ScalarType.BYTES:
      return (v, tally) => {
        const bytes = (v as Uint8Array).byteLength;
        tally.heapBytes += BYTES_HEAP;
        return varintSize(bytes) + bytes;
      };
    case ScalarType.BOOL:
      return () => 1;
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return () => 8;
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return () => 4;
    case ScalarType.INT32:
      return (v) => ((v as number) < 0 ? 10 : varintSize(v as number));
    case ScalarType.UINT32:
      return (v) => varintSize((v as number) >>> 0);
    case ScalarType.SINT32:
      return (v) => varintSize((((v as number) << 1) ^ ((v as number) >> 31)) >>> 0);
    case ScalarType.INT64:
    case ScalarType.UINT64:
      return (v) => varint64Size(BigInt.asUintN(64, BigInt(v as bigint | string | number)));
    case ScalarType.SINT64:
      return (v) => {
        const n = BigInt.asIntN(64, BigInt(v as bigint | string | number));
        return varint64Size(BigInt.asUintN(64, (n << 1n) ^ (n >> 63n)));
      };
  }
}

function tagSize(fieldNo: number, wireType: number): number {
  return varintSize(((fieldNo << 3) | wireType) >>> 0);
}

/** Bytes of an unsigned 32-bit varint. */
export function varintSize(n: number): number {
  if (n < 0x80) return 1;
  if (n < 0x4000) return 2;
  if (n < 0x200000) return 3;
  if (n < 0x10000000) return 4;
  return 5;
}

function varint64Size(n: bigint): number {
  let bytes = 1;
  while (n >= 0x80n) {
    n >>= 7n;
    bytes++;
  }
  return bytes;
}

/** UTF-8 length of `text` as a protobuf encoder writes it (a lone surrogate becomes U+FFFD, 3 bytes). */
export function utf8Length(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) {
      bytes += 1;
    } else if (
      c >= 0xd800 &&
      c <= 0xdbff &&
      i + 1 < text.length &&
      (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00
    ) {
      bytes += 2; // a surrogate pair: 2 units, 4 bytes
      i++;
    } else {
      bytes += 2;
    }
  }
  return bytes;
}
