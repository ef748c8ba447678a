/**
 * Stored resources to and from their wire form: an Any holding a
 * kds.v1.KdsResource (meta plus the spec as an Any of the kind's message).
 * Decoding validates everything a peer could get wrong.
 *
 * @module
 */
import {
  ScalarType,
  create,
  fromBinary,
  mergeFromBinary,
  toBinary,
  type DescMessage,
  type Message,
} from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence, type Any } from "@bufbuild/protobuf/wkt";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { KdsError } from "../errors.ts";
import type { Resource } from "../gen/kds/v1/discovery_pb.ts";
import { KdsResourceSchema } from "../gen/kds/v1/resource_pb.ts";
import type { WireResource } from "../discovery/types.ts";
import { utf8Text } from "../util/utf8.ts";
import {
  RESOURCE_NAME_PATTERN,
  TYPE_URL_PREFIX,
  resourceKey,
  type ResourceType,
  type StoredResource,
} from "../kinds/resource-types.ts";

/** Type URL of the envelope every synced resource travels in. */
export const KDS_RESOURCE_TYPE_URL = TYPE_URL_PREFIX + KdsResourceSchema.typeName;

/**
 * Encodes a stored resource for the wire, with `labels` (what the receiver
 * should see). The envelope is written field by field (it is on the hot path
 * of every sync: a reflective encode costs several times more); the result
 * decodes as a kds.v1.KdsResource.
 */
export function toWire(
  type: ResourceType,
  resource: StoredResource,
  labels: Readonly<Record<string, string>> = resource.meta.labels,
): WireResource {
  const meta = resource.meta;
  const w = envelopeWriter;
  w.tag(1, WireType.LengthDelimited).fork();
  if (meta.name !== "") w.tag(1, WireType.LengthDelimited).string(meta.name);
  if (meta.mesh !== "") w.tag(2, WireType.LengthDelimited).string(meta.mesh);
  for (const [k, v] of Object.entries(labels)) {
    w.tag(3, WireType.LengthDelimited)
      .fork()
      .tag(1, WireType.LengthDelimited)
      .string(k)
      .tag(2, WireType.LengthDelimited)
      .string(v)
      .join();
  }
  if (meta.version !== "") w.tag(4, WireType.LengthDelimited).string(meta.version);
  writeTimestamp(w, 5, meta.creationTime);
  writeTimestamp(w, 6, meta.modificationTime);
  w.join();
  w.tag(2, WireType.LengthDelimited)
    .fork()
    .tag(1, WireType.LengthDelimited)
    .string(type.typeUrl)
    .tag(2, WireType.LengthDelimited)
    .bytes(toBinary(type.schema, resource.spec))
    .join();
  const value = w.finish();
  // Plain message objects, as create() would make them (proto3, no defaults to fill): create() walks the schema every time.
  const any: Any = { $typeName: "google.protobuf.Any", typeUrl: KDS_RESOURCE_TYPE_URL, value };
  const key = resourceKey(meta.mesh, meta.name);
  const wrapped: Resource = {
    $typeName: "kds.v1.Resource",
    name: key,
    version: meta.version,
    resource: any,
    aliases: [],
  };
  const anyBytes = fieldBytes(utf8Length(KDS_RESOURCE_TYPE_URL)) + fieldBytes(value.byteLength);
  const resourceBytes =
    fieldBytes(utf8Length(meta.version)) + fieldBytes(anyBytes) + fieldBytes(utf8Length(key));
  return { key, version: meta.version, any, resource: wrapped, anyBytes, resourceBytes };
}

/**
 * One writer for every envelope: finish() copies the bytes out and keeps the
 * buffer, so encoding a resource does not grow a fresh buffer each time
 * (toWire never yields, so the writer is never shared by two encodes).
 */
const envelopeWriter = new BinaryWriter();

function writeTimestamp(w: BinaryWriter, field: number, date: Date): void {
  const ms = date.getTime();
  const seconds = Math.floor(ms / 1000);
  const nanos = (ms - seconds * 1000) * 1_000_000;
  w.tag(field, WireType.LengthDelimited).fork();
  if (seconds !== 0) w.tag(1, WireType.Varint).int64(seconds);
  if (nanos !== 0) w.tag(2, WireType.Varint).int32(nanos);
  w.join();
}

/** Bytes of a length-delimited field of `length` bytes with a one-byte tag. */
function fieldBytes(length: number): number {
  return 1 + varintLength(length) + length;
}

function varintLength(n: number): number {
  let bytes = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 0x80);
    bytes++;
  }
  return bytes;
}

function utf8Length(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff) {
      bytes += 4;
      i++;
    } else bytes += 3;
  }
  return bytes;
}

/** A resource decoded and validated from the wire. */
export interface DecodedResource {
  /** Discovery key ("mesh/name" or "name"). */
  readonly key: string;
  /** Name in the sender's store. */
  readonly name: string;
  /** Mesh ("" for cluster-scoped). */
  readonly mesh: string;
  /** Labels as sent. */
  readonly labels: Readonly<Record<string, string>>;
  /** Version in the sender's store. */
  readonly version: string;
  /** Times from the sender's store. */
  readonly creationTime: Date | undefined;
  /** Times from the sender's store. */
  readonly modificationTime: Date | undefined;
  /** The typed spec. */
  readonly spec: Message;
  /**
   * The bytes `spec` was decoded from. When `spec` holds views into them
   * (its kind's message has bytes or message fields, or unknown fields
   * came), a copy of just these bytes; otherwise a view into the received
   * bytes: keep it no longer than the write it is passed to
   * (`WriteOp.specBytes`), or it keeps the whole received message alive.
   */
  readonly specBytes: Uint8Array;
}

/**
 * Decodes and validates one received resource of `type`. Throws
 * `invalid_resource` with a message naming the resource and the problem.
 */
export function fromWire(type: ResourceType, any: Any, expectedKey?: string): DecodedResource {
  // Messages name the resource only when it is refused (named()): this runs for every resource received.
  if (any.typeUrl !== KDS_RESOURCE_TYPE_URL) {
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, expectedKey)}: expected a ${KDS_RESOURCE_TYPE_URL}, got ${any.typeUrl || "an empty type URL"}`,
    );
  }
  const r = envelopeReader;
  let specBytes: Uint8Array;
  try {
    r.read(any.value);
  } catch (error) {
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, expectedKey)}: malformed resource envelope (${String(error)})`,
      { cause: error },
    );
  } finally {
    specBytes = r.specBytes;
    r.specBytes = EMPTY_BYTES; // the reader must not keep the received bytes alive
  }
  if (!r.hasMeta || r.specTypeUrl === undefined)
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, expectedKey)}: the envelope lacks meta or spec`,
    );
  const { name, mesh } = r;
  const built = resourceKey(mesh, name);
  // The response's own key when it matches: one string per resource kept, not two.
  const key = built === expectedKey ? expectedKey : built;
  if (!RESOURCE_NAME_PATTERN.test(name))
    throw new KdsError("invalid_resource", `${named(type.kind, key)}: invalid name`);
  if (type.scope === "mesh" && !RESOURCE_NAME_PATTERN.test(mesh))
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, key)}: ${type.kind} is mesh-scoped but has no valid mesh`,
    );
  if (type.scope === "cluster" && mesh !== "")
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, key)}: ${type.kind} is cluster-scoped but names a mesh`,
    );
  if (expectedKey !== undefined && key !== expectedKey)
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, key)}: sent under the name "${expectedKey}"`,
    );
  if (r.specTypeUrl !== type.typeUrl)
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, key)}: the spec is a ${r.specTypeUrl}, expected ${type.typeUrl}`,
    );
  const labels = r.labels;
  const version = r.version;
  const created = r.created ? timestampMs(r.createdSeconds, r.createdNanos) : undefined;
  const modified = r.modified ? timestampMs(r.modifiedSeconds, r.modifiedNanos) : undefined;
  let decoded: Message;
  try {
    // A decoded spec keeps views into what it was decoded from (its bytes fields and unknown fields), and the
    // received bytes belong to a whole response, which a stored spec must not pin: such a spec is decoded from a
    // copy of just its bytes. A message of scalars and enums only holds none unless unknown fields came, so it is
    // decoded from the received bytes themselves (a copy of each spec's few bytes, and the DataView protobuf-es
    // makes over it, cost more than the decoding), and again from a copy when it holds unknown fields.
    if (holdsNoViews(type.schema)) {
      // Specs of strings, bools, 32-bit integers and open enums are read by hand (simpleReaderOf); whatever that
      // reader does not read exactly as protobuf-es would goes to protobuf-es, into a fresh zero message.
      const message = zeroMessage(type.schema); // first: the simple reader is made from its zero message
      const simple = simpleReaderOf(type.schema);
      if (simple?.(message as unknown as Record<string, unknown>, specBytes) === true)
        decoded = message;
      else {
        const into = simple === null ? message : zeroMessage(type.schema);
        decoded = mergeFromBinary(type.schema, into, specBytes);
      }
      if (decoded.$unknown !== undefined) {
        specBytes = copyOf(specBytes);
        decoded = fromBinary(type.schema, specBytes);
      } else trimLists(type.schema, decoded);
    } else {
      specBytes = copyOf(specBytes);
      decoded = fromBinary(type.schema, specBytes);
    }
  } catch (error) {
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, key)}: malformed spec (${String(error)})`,
      {
        cause: error,
      },
    );
  }
  return new Decoded(key, name, mesh, labels, version, created, modified, decoded, specBytes);
}

/** Per message type: whether a decoded message holds no views into its bytes but through its own unknown fields. */
const viewless = new WeakMap<DescMessage, boolean>();

/** Whether `schema` has only scalar (not bytes) and enum fields, singular, repeated or in maps. */
function holdsNoViews(schema: DescMessage): boolean {
  let known = viewless.get(schema);
  if (known === undefined) {
    known = schema.fields.every((f) => {
      switch (f.fieldKind) {
        case "enum":
          return true;
        case "scalar":
          return f.scalar !== ScalarType.BYTES;
        case "list":
          return (
            f.listKind === "enum" || (f.listKind === "scalar" && f.scalar !== ScalarType.BYTES)
          );
        case "map":
          return f.mapKind === "enum" || (f.mapKind === "scalar" && f.scalar !== ScalarType.BYTES);
        default:
          return false;
      }
    });
    viewless.set(schema, known);
  }
  return known;
}

/**
 * A message of scalar and enum fields (see {@link holdsNoViews}) as
 * `create(schema)` makes it, copied from one made once: `create` walks the
 * schema's fields and sets each by name, about a tenth of the zone's main
 * thread in a 100k-resource sync; a spread of a plain object copies its
 * shape at once. Lists and maps get fresh arrays and objects. A schema
 * whose zero message is not a plain object of such fields (a oneof's
 * fresh `{ case: undefined }`, or proto2 defaults on a prototype) goes to
 * `create`.
 */
function zeroMessage(schema: DescMessage): Message {
  let zero = zeroMessages.get(schema);
  if (zero === undefined) {
    zero = zeroMessageOf(schema);
    zeroMessages.set(schema, zero);
  }
  if (zero === null) return create(schema);
  const message: Record<string, unknown> = { ...zero.message };
  for (const name of zero.fresh) message[name] = Array.isArray(zero.message[name]) ? [] : {};
  return message as unknown as Message;
}

/**
 * Replaces each non-empty list field of `message` (a {@link zeroMessage}
 * copy, decoded into) with an exact copy: V8 grows an empty array's store
 * to 17 slots at its first push, so a list of one string held 152 bytes
 * of store for 8 used, a quarter of what a stored 100k-sync resource held.
 */
function trimLists(schema: DescMessage, message: Message): void {
  const zero = zeroMessages.get(schema);
  if (zero === undefined || zero === null) return;
  const fields = message as unknown as Record<string, unknown>;
  for (const name of zero.fresh) {
    const value = fields[name];
    if (Array.isArray(value) && value.length > 0) fields[name] = value.slice();
  }
}

/** Per message type: its zero message and the fields each copy needs fresh, or null where {@link zeroMessage} uses `create`. */
const zeroMessages = new WeakMap<DescMessage, ZeroMessage | null>();

/** A zero message to copy, and its list and map fields (each copy gets fresh ones). */
interface ZeroMessage {
  readonly message: Readonly<Record<string, unknown>>;
  readonly fresh: readonly string[];
}

function zeroMessageOf(schema: DescMessage): {
  readonly message: Readonly<Record<string, unknown>>;
  readonly fresh: readonly string[];
} | null {
  const message = create(schema) as unknown as Record<string, unknown>;
  if (schema.oneofs.length > 0 || Object.getPrototypeOf(message) !== Object.prototype) return null;
  const fresh: string[] = [];
  for (const field of schema.fields) {
    const value = message[field.localName];
    if (field.fieldKind === "list" || field.fieldKind === "map") {
      if (typeof value !== "object" || value === null) return null;
      fresh.push(field.localName);
    } else if (typeof value === "object" && value !== null) return null;
  }
  // The same fields copied into a `{}`: `create` adds them to a one-field literal, so they lived in a property
  // array of their own, and so did each spread copy's (an object and 40 bytes more per stored spec of 3 fields);
  // a `{}` holds its first four fields in itself, and a spread copies that layout.
  const plain: Record<string, unknown> = {};
  for (const name of Object.keys(message)) plain[name] = message[name];
  return { message: plain, fresh };
}

/**
 * Reads a spec's bytes into a {@link zeroMessage} copy; false when it met
 * anything it does not read exactly as protobuf-es would (then the caller
 * decodes a fresh copy with protobuf-es, which also reports what is wrong).
 */
type SimpleReader = (message: Record<string, unknown>, bytes: Uint8Array) => boolean;

/** What a {@link SimpleReader} reads a field as. */
const STRING = 0;
const BOOL = 1;
const VARINT = 2;
const STRINGS = 3;

/** Per message type: its {@link SimpleReader}, or null when protobuf-es decodes it. */
const simpleReaders = new WeakMap<DescMessage, SimpleReader | null>();

/** Field numbers a {@link SimpleReader} handles (a table indexed by number). */
const SIMPLE_MAX_FIELD = 64;

/**
 * The {@link SimpleReader} of `schema` when every field is, without a
 * oneof, an implicit-presence string (UTF-8 checked), bool, int32, uint32
 * or open enum, or a list of such strings; otherwise null. protobuf-es's
 * `mergeFromBinary` makes a reader, a DataView, a read context, an
 * unknown-field array and an array per tag for each spec: about a tenth of
 * the zone's main thread in a 100k-resource sync went to decoding specs of
 * three fields (about 1 µs each).
 */
function simpleReaderOf(schema: DescMessage): SimpleReader | null {
  let reader = simpleReaders.get(schema);
  if (reader === undefined) {
    reader = compileSimpleReader(schema);
    simpleReaders.set(schema, reader);
  }
  return reader;
}

function compileSimpleReader(schema: DescMessage): SimpleReader | null {
  const zero = zeroMessages.get(schema);
  if (zero === undefined || zero === null) return null;
  const names: string[] = [];
  const kinds: number[] = [];
  for (const f of schema.fields) {
    if (f.number > SIMPLE_MAX_FIELD || f.oneof !== undefined) return null;
    let kind: number;
    if (f.fieldKind === "list") {
      if (f.listKind !== "scalar" || f.scalar !== ScalarType.STRING || !f.utf8Validation)
        return null;
      kind = STRINGS;
    } else if (f.presence !== FeatureSet_FieldPresence.IMPLICIT) return null;
    else if (f.fieldKind === "enum") {
      if (!f.enum.open) return null;
      kind = VARINT;
    } else if (f.fieldKind === "scalar") {
      if (f.scalar === ScalarType.STRING && f.utf8Validation) kind = STRING;
      else if (f.scalar === ScalarType.BOOL) kind = BOOL;
      else if (f.scalar === ScalarType.INT32 || f.scalar === ScalarType.UINT32) kind = VARINT;
      else return null;
    } else return null;
    names[f.number] = f.localName;
    kinds[f.number] = kind;
  }
  return (message, bytes) => readSimple(names, kinds, message, bytes);
}

/** Where {@link readSimple} is in its bytes (it never yields, so one position serves every call). */
let simpleAt = 0;

/**
 * A varint of at most 4 bytes (under 2^28) at `simpleAt`, or -1: longer
 * ones (a negative int32 takes 10) are left to protobuf-es. For such
 * values protobuf-es's int32, uint32 and enum reads give the value itself.
 */
function shortVarint(bytes: Uint8Array, end: number): number {
  let value = 0;
  for (let shift = 0; shift < 28; shift += 7) {
    if (simpleAt >= end) return -1;
    const b = bytes[simpleAt++] as number;
    value |= (b & 0x7f) << shift;
    if (b < 0x80) return value;
  }
  return -1;
}

function readSimple(
  names: readonly string[],
  kinds: readonly number[],
  message: Record<string, unknown>,
  bytes: Uint8Array,
): boolean {
  const end = bytes.length;
  simpleAt = 0;
  while (simpleAt < end) {
    const tag = shortVarint(bytes, end);
    if (tag < 0) return false;
    const field = tag >>> 3;
    const wireType = tag & 7;
    const kind = kinds[field];
    const name = names[field];
    if (kind === undefined || name === undefined) return false; // unknown field (or 0)
    if (kind === BOOL || kind === VARINT) {
      if (wireType !== WIRE_VARINT) return false;
      if (kind === BOOL) {
        if (simpleAt >= end) return false;
        const b = bytes[simpleAt++] as number;
        if (b >= 0x80) return false;
        message[name] = b !== 0;
      } else {
        const value = shortVarint(bytes, end);
        if (value < 0) return false;
        message[name] = value;
      }
    } else {
      if (wireType !== WIRE_DELIMITED) return false;
      const length = shortVarint(bytes, end);
      if (length < 0 || length > end - simpleAt) return false;
      let text: string;
      try {
        text = utf8Text(bytes, simpleAt, simpleAt + length);
      } catch {
        return false; // not UTF-8: protobuf-es decodes it again and says so
      }
      simpleAt += length;
      if (kind === STRING) message[name] = text;
      else (message[name] as string[]).push(text);
    }
  }
  return true;
}

/** A copy of `bytes` in a buffer of its own. */
function copyOf(bytes: Uint8Array): Uint8Array {
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  return copy;
}

/**
 * A {@link DecodedResource} whose times become Dates only when read: sync
 * stores none of them (the local store sets its own), and two Dates per
 * received resource were a tenth of the zone's garbage in a 100k sync.
 */
class Decoded implements DecodedResource {
  readonly key: string;
  readonly name: string;
  readonly mesh: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly version: string;
  readonly spec: Message;
  readonly specBytes: Uint8Array;
  readonly #createdMs: number | undefined;
  readonly #modifiedMs: number | undefined;

  constructor(
    key: string,
    name: string,
    mesh: string,
    labels: Readonly<Record<string, string>>,
    version: string,
    createdMs: number | undefined,
    modifiedMs: number | undefined,
    spec: Message,
    specBytes: Uint8Array,
  ) {
    this.key = key;
    this.name = name;
    this.mesh = mesh;
    this.labels = labels;
    this.version = version;
    this.#createdMs = createdMs;
    this.#modifiedMs = modifiedMs;
    this.spec = spec;
    this.specBytes = specBytes;
  }

  get creationTime(): Date | undefined {
    return this.#createdMs === undefined ? undefined : new Date(this.#createdMs);
  }

  get modificationTime(): Date | undefined {
    return this.#modifiedMs === undefined ? undefined : new Date(this.#modifiedMs);
  }
}

/*
 * The envelope decoded field by field, like toWire encodes it: on the zone
 * this runs for every received resource, and the reflective decoder (a
 * message object for the envelope, the meta, each timestamp and the Any)
 * costs several times more. It keeps protobuf's rules: unknown fields are
 * skipped, a repeated scalar field's last value wins, a repeated message
 * field is merged, map entries default missing keys and values to "", and
 * strings must be valid UTF-8 (proto3).
 *
 * One reader serves every envelope (decoding never yields) and reads its
 * fields into itself: no BinaryReader (whose DataView cost more than the
 * fields it read), no object per nested message, no [field, wire type]
 * pair per tag. Label keys and values, meshes and type URLs repeat across
 * a response: each is looked up among the last few read before a new
 * string is made.
 */

const EMPTY_BYTES = new Uint8Array(0);
const WIRE_VARINT = 0;
const WIRE_DELIMITED = 2;

/** How deep skipped groups may nest, as protobuf-es's decoder allows. */
const SKIP_DEPTH = 100;

/** Strings up to this many bytes are looked up among the recent ones. */
const RECENT_MAX_BYTES = 64;
/** How many recent strings are kept. */
const RECENT_STRINGS = 8;

class EnvelopeReader {
  bytes: Uint8Array = EMPTY_BYTES;
  pos = 0;
  hasMeta = false;
  name = "";
  mesh = "";
  version = "";
  labels: Record<string, string> = {};
  created = false;
  createdSeconds = 0;
  createdNanos = 0;
  modified = false;
  modifiedSeconds = 0;
  modifiedNanos = 0;
  specTypeUrl: string | undefined = undefined;
  /** A view of the spec's bytes in the envelope's (fromWire copies them when the decoded spec would keep a view). */
  specBytes: Uint8Array = EMPTY_BYTES;
  #specStart = 0;
  #specEnd = 0;
  readonly #recent: string[] = new Array<string>(RECENT_STRINGS).fill("");
  #nextRecent = 0;

  /** Reads the envelope `bytes` into this reader's fields (a new `labels` object each time); keeps no reference to `bytes`. */
  read(bytes: Uint8Array): void {
    try {
      this.#read(bytes);
    } finally {
      this.bytes = EMPTY_BYTES;
    }
  }

  #read(bytes: Uint8Array): void {
    this.bytes = bytes;
    this.pos = 0;
    this.hasMeta = false;
    this.name = "";
    this.mesh = "";
    this.version = "";
    this.labels = {};
    this.created = false;
    this.createdSeconds = 0;
    this.createdNanos = 0;
    this.modified = false;
    this.modifiedSeconds = 0;
    this.modifiedNanos = 0;
    this.specTypeUrl = undefined;
    this.#specStart = 0;
    this.#specEnd = 0;
    const end = bytes.length;
    while (this.pos < end) {
      const tag = this.#tag();
      const field = tag >>> 3;
      const wireType = tag & 7;
      if (field === 1 && wireType === WIRE_DELIMITED) {
        this.hasMeta = true;
        this.#meta(this.#nestedEnd());
      } else if (field === 2 && wireType === WIRE_DELIMITED) {
        this.specTypeUrl ??= "";
        this.#any(this.#nestedEnd());
      } else this.#skip(wireType, field, SKIP_DEPTH);
    }
    this.specBytes = bytes.subarray(this.#specStart, this.#specEnd);
  }

  #meta(end: number): void {
    while (this.pos < end) {
      const tag = this.#tag();
      const field = tag >>> 3;
      const wireType = tag & 7;
      if (wireType !== WIRE_DELIMITED) this.#skip(wireType, field, SKIP_DEPTH);
      else if (field === 1) this.name = this.#string();
      else if (field === 2) this.mesh = this.#recentString();
      else if (field === 3) this.#label(this.#nestedEnd());
      else if (field === 4) this.version = this.#string();
      else if (field === 5) {
        this.created = true;
        this.#timestamp(this.#nestedEnd(), true);
      } else if (field === 6) {
        this.modified = true;
        this.#timestamp(this.#nestedEnd(), false);
      } else this.#skip(wireType, field, SKIP_DEPTH);
    }
    this.#ended(end);
  }

  #label(end: number): void {
    let key = "";
    let value = "";
    while (this.pos < end) {
      const tag = this.#tag();
      const field = tag >>> 3;
      const wireType = tag & 7;
      if (field === 1 && wireType === WIRE_DELIMITED) key = this.#recentString();
      else if (field === 2 && wireType === WIRE_DELIMITED) value = this.#recentString();
      else this.#skip(wireType, field, SKIP_DEPTH);
    }
    this.#ended(end);
    // A plain record, as the reflective decoder gives; "__proto__" stays an ordinary key.
    if (key === "__proto__")
      Object.defineProperty(this.labels, key, {
        value,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    else this.labels[key] = value;
  }

  #timestamp(end: number, created: boolean): void {
    while (this.pos < end) {
      const tag = this.#tag();
      const field = tag >>> 3;
      const wireType = tag & 7;
      if (field === 1 && wireType === WIRE_VARINT) {
        if (created) this.createdSeconds = this.#int64();
        else this.modifiedSeconds = this.#int64();
      } else if (field === 2 && wireType === WIRE_VARINT) {
        if (created) this.createdNanos = this.#varint32() | 0;
        else this.modifiedNanos = this.#varint32() | 0;
      } else this.#skip(wireType, field, SKIP_DEPTH);
    }
    this.#ended(end);
  }

  #any(end: number): void {
    while (this.pos < end) {
      const tag = this.#tag();
      const field = tag >>> 3;
      const wireType = tag & 7;
      if (field === 1 && wireType === WIRE_DELIMITED) this.specTypeUrl = this.#recentString();
      else if (field === 2 && wireType === WIRE_DELIMITED) {
        this.#specEnd = this.#nestedEnd();
        this.#specStart = this.pos;
        this.pos = this.#specEnd;
      } else this.#skip(wireType, field, SKIP_DEPTH);
    }
    this.#ended(end);
  }

  /** Reads a length prefix; returns where the value after it ends. */
  #nestedEnd(): number {
    const end = this.#varint32() + this.pos;
    if (end > this.bytes.length) throw new RangeError("premature EOF");
    return end;
  }

  /** Checks that a nested message's fields ended exactly at its end. */
  #ended(end: number): void {
    if (this.pos !== end) throw new RangeError("a field runs past the end of its message");
  }

  /** A tag (field number << 3 | wire type), checked as protobuf-es's BinaryReader.tag() checks it. */
  #tag(): number {
    const start = this.pos;
    const tag = this.#varint32();
    const read = this.pos - start;
    if (read > 5 || (read === 5 && (this.bytes[this.pos - 1] as number) > 0x0f))
      throw new Error("illegal tag: varint overflows uint32");
    const field = tag >>> 3;
    const wireType = tag & 7;
    if (field <= 0 || wireType > 5)
      throw new Error(`illegal tag: field no ${field} wire type ${wireType}`);
    return tag;
  }

  /** An unsigned 32-bit varint (up to 10 bytes, the high ones dropped), as protobuf-es reads it. */
  #varint32(): number {
    const bytes = this.bytes;
    let result = 0;
    for (let shift = 0; shift < 28; shift += 7) {
      const b = this.#byte(bytes);
      result |= (b & 0x7f) << shift;
      if (b < 0x80) return result;
    }
    let b = this.#byte(bytes);
    result |= (b & 0x0f) << 28;
    for (let read = 5; b >= 0x80 && read < 10; read++) b = this.#byte(bytes);
    if (b >= 0x80) throw new Error("invalid varint");
    return result >>> 0;
  }

  /** A signed 64-bit varint as a number, as `Number()` of protobuf-es's int64 gives it. */
  #int64(): number {
    const bytes = this.bytes;
    const start = this.pos;
    let value = 0;
    let scale = 1;
    for (let read = 1; read <= 10; read++) {
      const b = this.#byte(bytes);
      if (read <= 7) value += (b & 0x7f) * scale;
      scale *= 128;
      if (b < 0x80) return read <= 7 ? value : wideInt64(bytes, start, read);
    }
    throw new Error("invalid varint");
  }

  #byte(bytes: Uint8Array): number {
    if (this.pos >= bytes.length) throw new RangeError("premature EOF");
    return bytes[this.pos++] as number;
  }

  /** A length-delimited string (strictly UTF-8). */
  #string(): string {
    const end = this.#nestedEnd();
    const start = this.pos;
    this.pos = end;
    return utf8Text(this.bytes, start, end);
  }

  /** A string that likely repeats (a label, a mesh, a type URL): the same string as a recent one with these bytes. */
  #recentString(): string {
    const end = this.#nestedEnd();
    const start = this.pos;
    this.pos = end;
    const length = end - start;
    if (length > RECENT_MAX_BYTES) return utf8Text(this.bytes, start, end);
    const recent = this.#recent;
    for (let i = 0; i < recent.length; i++) {
      const known = recent[i] as string;
      if (known.length === length && sameAscii(known, this.bytes, start)) return known;
    }
    const text = utf8Text(this.bytes, start, end);
    // Only ASCII strings are kept (as many characters as bytes), so a match is byte for byte.
    if (text.length === length && length > 0) {
      recent[this.#nextRecent] = text;
      this.#nextRecent = (this.#nextRecent + 1) % recent.length;
    }
    return text;
  }

  /** Skips one value of `wireType` (a group up to its end tag), as protobuf-es's BinaryReader.skip() does. */
  #skip(wireType: number, field: number, depth: number): void {
    switch (wireType) {
      case 0:
        while (this.#byte(this.bytes) >= 0x80);
        break;
      case 1:
        this.pos += 8;
        break;
      case 2:
        this.pos = this.#nestedEnd();
        break;
      case 3:
        if (depth <= 0) throw new Error("maximum recursion depth reached");
        for (;;) {
          const tag = this.#tag();
          if ((tag & 7) === 4) {
            if (tag >>> 3 !== field) throw new Error("invalid end group tag");
            break;
          }
          this.#skip(tag & 7, tag >>> 3, depth - 1);
        }
        break;
      case 5:
        this.pos += 4;
        break;
      default:
        throw new Error(`cant skip wire type ${wireType}`);
    }
    if (this.pos > this.bytes.length) throw new RangeError("premature EOF");
  }
}

const envelopeReader = new EnvelopeReader();

/** Whether the ASCII string `text` is what `bytes` hold from `start` on. */
function sameAscii(text: string, bytes: Uint8Array, start: number): boolean {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) !== bytes[start + i]) return false;
  return true;
}

/** A 64-bit varint of more than 49 bits read exactly (BigInt), as a signed number. */
function wideInt64(bytes: Uint8Array, start: number, length: number): number {
  let value = 0n;
  for (let i = 0; i < length; i++)
    value |= BigInt((bytes[start + i] as number) & 0x7f) << BigInt(7 * i);
  return Number(BigInt.asIntN(64, value));
}

/** A resource in a message: its kind and, when known, its key. */
function named(kind: string, key: string | undefined): string {
  return key === undefined ? kind : `${kind} "${key}"`;
}

/** Milliseconds of a timestamp, as protobuf-es's timestampDate computes them. */
function timestampMs(seconds: number, nanos: number): number {
  return seconds * 1000 + Math.round(nanos / 1000000);
}
