/**
 * Stored resources to and from their wire form: an Any holding a
 * kds.v1.KdsResource (meta plus the spec as an Any of the kind's message).
 * Decoding validates everything a peer could get wrong.
 *
 * @module
 */
import { fromBinary, toBinary, type Message } from "@bufbuild/protobuf";
import type { Any } from "@bufbuild/protobuf/wkt";
import { BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { KdsError } from "../errors.ts";
import type { Resource } from "../gen/kds/v1/discovery_pb.ts";
import { KdsResourceSchema } from "../gen/kds/v1/resource_pb.ts";
import type { WireResource } from "../discovery/types.ts";
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
  /** The bytes `spec` was decoded from: a copy of just these, which `spec` may hold views into (bytes and unknown fields). */
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
  let envelope: Envelope;
  try {
    envelope = readEnvelope(any.value);
  } catch (error) {
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, expectedKey)}: malformed resource envelope (${String(error)})`,
      { cause: error },
    );
  }
  const meta = envelope.meta;
  if (meta === undefined || envelope.specTypeUrl === undefined)
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, expectedKey)}: the envelope lacks meta or spec`,
    );
  const built = resourceKey(meta.mesh, meta.name);
  // The response's own key when it matches: one string per resource kept, not two.
  const key = built === expectedKey ? expectedKey : built;
  if (!RESOURCE_NAME_PATTERN.test(meta.name))
    throw new KdsError("invalid_resource", `${named(type.kind, key)}: invalid name`);
  if (type.scope === "mesh" && !RESOURCE_NAME_PATTERN.test(meta.mesh))
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, key)}: ${type.kind} is mesh-scoped but has no valid mesh`,
    );
  if (type.scope === "cluster" && meta.mesh !== "")
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, key)}: ${type.kind} is cluster-scoped but names a mesh`,
    );
  if (expectedKey !== undefined && key !== expectedKey)
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, key)}: sent under the name "${expectedKey}"`,
    );
  if (envelope.specTypeUrl !== type.typeUrl)
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, key)}: the spec is a ${envelope.specTypeUrl}, expected ${type.typeUrl}`,
    );
  // A copy of just the spec's bytes: the decoded spec keeps views into what it was decoded from (its bytes and
  // unknown fields), and the received bytes belong to a whole response, which a stored spec must not pin.
  const specBytes = new Uint8Array(envelope.specValue); // a copy: on Node the bytes are a Buffer, whose slice() is a view
  let decoded: Message;
  try {
    decoded = fromBinary(type.schema, specBytes);
  } catch (error) {
    throw new KdsError(
      "invalid_resource",
      `${named(type.kind, key)}: malformed spec (${String(error)})`,
      {
        cause: error,
      },
    );
  }
  return new Decoded(
    key,
    meta.name,
    meta.mesh,
    meta.labels,
    meta.version,
    meta.creationTime,
    meta.modificationTime,
    decoded,
    specBytes,
  );
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
  readonly #created: Timestamp | undefined;
  readonly #modified: Timestamp | undefined;

  constructor(
    key: string,
    name: string,
    mesh: string,
    labels: Readonly<Record<string, string>>,
    version: string,
    created: Timestamp | undefined,
    modified: Timestamp | undefined,
    spec: Message,
    specBytes: Uint8Array,
  ) {
    this.key = key;
    this.name = name;
    this.mesh = mesh;
    this.labels = labels;
    this.version = version;
    this.#created = created;
    this.#modified = modified;
    this.spec = spec;
    this.specBytes = specBytes;
  }

  get creationTime(): Date | undefined {
    return this.#created === undefined ? undefined : new Date(timestampMs(this.#created));
  }

  get modificationTime(): Date | undefined {
    return this.#modified === undefined ? undefined : new Date(timestampMs(this.#modified));
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
 */

interface Timestamp {
  seconds: number;
  nanos: number;
}

interface Meta {
  name: string;
  mesh: string;
  labels: Record<string, string>;
  version: string;
  creationTime: Timestamp | undefined;
  modificationTime: Timestamp | undefined;
}

interface Envelope {
  meta: Meta | undefined;
  specTypeUrl: string | undefined;
  specValue: Uint8Array;
}

const EMPTY_BYTES = new Uint8Array(0);

function readEnvelope(bytes: Uint8Array): Envelope {
  const reader = new BinaryReader(bytes);
  const envelope: Envelope = { meta: undefined, specTypeUrl: undefined, specValue: EMPTY_BYTES };
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === 1 && wireType === WireType.LengthDelimited) {
      envelope.meta ??= {
        name: "",
        mesh: "",
        labels: {},
        version: "",
        creationTime: undefined,
        modificationTime: undefined,
      };
      readMeta(reader, nestedEnd(reader), envelope.meta);
    } else if (field === 2 && wireType === WireType.LengthDelimited) {
      envelope.specTypeUrl ??= "";
      readAny(reader, nestedEnd(reader), envelope);
    } else reader.skip(wireType, field);
  }
  return envelope;
}

/*
 * Nested messages are read in place, up to their end: one reader per
 * envelope (a BinaryReader builds a DataView, which costs more than the
 * fields it would read).
 */

/** Reads a length prefix; returns where the nested message ends. */
function nestedEnd(reader: BinaryReader): number {
  const end = reader.uint32() + reader.pos;
  if (end > reader.len) throw new RangeError("premature EOF");
  return end;
}

/** Checks that a nested message's fields ended exactly at its end. */
function ended(reader: BinaryReader, end: number): void {
  if (reader.pos !== end) throw new RangeError("a field runs past the end of its message");
}

function readMeta(reader: BinaryReader, end: number, meta: Meta): void {
  while (reader.pos < end) {
    const [field, wireType] = reader.tag();
    if (wireType !== WireType.LengthDelimited) reader.skip(wireType, field);
    else if (field === 1) meta.name = reader.string(true);
    else if (field === 2) meta.mesh = internMesh(reader.string(true));
    else if (field === 3) readLabel(reader, nestedEnd(reader), meta.labels);
    else if (field === 4) meta.version = reader.string(true);
    else if (field === 5) {
      meta.creationTime ??= { seconds: 0, nanos: 0 };
      readTimestamp(reader, nestedEnd(reader), meta.creationTime);
    } else if (field === 6) {
      meta.modificationTime ??= { seconds: 0, nanos: 0 };
      readTimestamp(reader, nestedEnd(reader), meta.modificationTime);
    } else reader.skip(wireType, field);
  }
  ended(reader, end);
}

/** The mesh read last: a sync's resources name few meshes, and every stored copy then shares one string, not one each. */
let lastMesh = "";

function internMesh(mesh: string): string {
  if (mesh === lastMesh) return lastMesh;
  lastMesh = mesh;
  return mesh;
}

function readLabel(reader: BinaryReader, end: number, labels: Record<string, string>): void {
  let key = "";
  let value = "";
  while (reader.pos < end) {
    const [field, wireType] = reader.tag();
    if (field === 1 && wireType === WireType.LengthDelimited) key = reader.string(true);
    else if (field === 2 && wireType === WireType.LengthDelimited) value = reader.string(true);
    else reader.skip(wireType, field);
  }
  ended(reader, end);
  // A plain record, as the reflective decoder gives; "__proto__" stays an ordinary key.
  if (key === "__proto__")
    Object.defineProperty(labels, key, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  else labels[key] = value;
}

function readTimestamp(reader: BinaryReader, end: number, timestamp: Timestamp): void {
  while (reader.pos < end) {
    const [field, wireType] = reader.tag();
    if (field === 1 && wireType === WireType.Varint) timestamp.seconds = Number(reader.int64());
    else if (field === 2 && wireType === WireType.Varint) timestamp.nanos = reader.int32();
    else reader.skip(wireType, field);
  }
  ended(reader, end);
}

function readAny(reader: BinaryReader, end: number, envelope: Envelope): void {
  while (reader.pos < end) {
    const [field, wireType] = reader.tag();
    if (field === 1 && wireType === WireType.LengthDelimited)
      envelope.specTypeUrl = reader.string(true);
    else if (field === 2 && wireType === WireType.LengthDelimited)
      envelope.specValue = reader.bytes();
    else reader.skip(wireType, field);
  }
  ended(reader, end);
}

/** A resource in a message: its kind and, when known, its key. */
function named(kind: string, key: string | undefined): string {
  return key === undefined ? kind : `${kind} "${key}"`;
}

/** Milliseconds of a timestamp, as protobuf-es's timestampDate computes them. */
function timestampMs(timestamp: Timestamp): number {
  return timestamp.seconds * 1000 + Math.round(timestamp.nanos / 1000000);
}
