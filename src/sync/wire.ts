/**
 * Stored resources to and from their wire form: an Any holding a
 * kds.v1.KdsResource (meta plus the spec as an Any of the kind's message).
 * Decoding validates everything a peer could get wrong.
 *
 * @module
 */
import { create, fromBinary, toBinary, type Message } from "@bufbuild/protobuf";
import { AnySchema, timestampDate, type Any } from "@bufbuild/protobuf/wkt";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { KdsError } from "../errors.ts";
import { ResourceSchema } from "../gen/kds/v1/discovery_pb.ts";
import { KdsResourceSchema } from "../gen/kds/v1/resource_pb.ts";
import type { WireResource } from "../discovery/types.ts";
import { RESOURCE_NAME_PATTERN, TYPE_URL_PREFIX, resourceKey, type ResourceType, type StoredResource } from "./resource-types.ts";

/** Type URL of the envelope every synced resource travels in. */
export const KDS_RESOURCE_TYPE_URL = TYPE_URL_PREFIX + KdsResourceSchema.typeName;

/**
 * Encodes a stored resource for the wire, with `labels` (what the receiver
 * should see). The envelope is written field by field (it is on the hot path
 * of every sync: a reflective encode costs several times more); the result
 * decodes as a kds.v1.KdsResource.
 */
export function toWire(type: ResourceType, resource: StoredResource, labels: Readonly<Record<string, string>> = resource.meta.labels): WireResource {
  const meta = resource.meta;
  const w = new BinaryWriter();
  w.tag(1, WireType.LengthDelimited).fork();
  if (meta.name !== "") w.tag(1, WireType.LengthDelimited).string(meta.name);
  if (meta.mesh !== "") w.tag(2, WireType.LengthDelimited).string(meta.mesh);
  for (const [k, v] of Object.entries(labels)) {
    w.tag(3, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).string(k).tag(2, WireType.LengthDelimited).string(v).join();
  }
  if (meta.version !== "") w.tag(4, WireType.LengthDelimited).string(meta.version);
  writeTimestamp(w, 5, meta.creationTime);
  writeTimestamp(w, 6, meta.modificationTime);
  w.join();
  w.tag(2, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).string(type.typeUrl).tag(2, WireType.LengthDelimited).bytes(toBinary(type.schema, resource.spec)).join();
  const value = w.finish();
  const any = create(AnySchema, { typeUrl: KDS_RESOURCE_TYPE_URL, value });
  const key = resourceKey(meta.mesh, meta.name);
  const wrapped = create(ResourceSchema, { name: key, version: meta.version, resource: any });
  const anyBytes = fieldBytes(utf8Length(KDS_RESOURCE_TYPE_URL)) + fieldBytes(value.byteLength);
  const resourceBytes = fieldBytes(utf8Length(meta.version)) + fieldBytes(anyBytes) + fieldBytes(utf8Length(key));
  return { key, version: meta.version, any, resource: wrapped, anyBytes, resourceBytes };
}

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
}

/**
 * Decodes and validates one received resource of `type`. Throws
 * `invalid_resource` with a message naming the resource and the problem.
 */
export function fromWire(type: ResourceType, any: Any, expectedKey?: string): DecodedResource {
  const where = expectedKey === undefined ? type.kind : `${type.kind} "${expectedKey}"`;
  if (any.typeUrl !== KDS_RESOURCE_TYPE_URL) {
    throw new KdsError("invalid_resource", `${where}: expected a ${KDS_RESOURCE_TYPE_URL}, got ${any.typeUrl || "an empty type URL"}`);
  }
  let envelope;
  try {
    envelope = fromBinary(KdsResourceSchema, any.value);
  } catch (error) {
    throw new KdsError("invalid_resource", `${where}: malformed resource envelope (${String(error)})`, { cause: error });
  }
  const meta = envelope.meta;
  const spec = envelope.spec;
  if (meta === undefined || spec === undefined) throw new KdsError("invalid_resource", `${where}: the envelope lacks meta or spec`);
  const label = `${type.kind} "${resourceKey(meta.mesh, meta.name)}"`;
  if (!RESOURCE_NAME_PATTERN.test(meta.name)) throw new KdsError("invalid_resource", `${label}: invalid name`);
  if (type.scope === "mesh" && !RESOURCE_NAME_PATTERN.test(meta.mesh)) throw new KdsError("invalid_resource", `${label}: ${type.kind} is mesh-scoped but has no valid mesh`);
  if (type.scope === "cluster" && meta.mesh !== "") throw new KdsError("invalid_resource", `${label}: ${type.kind} is cluster-scoped but names a mesh`);
  const key = resourceKey(meta.mesh, meta.name);
  if (expectedKey !== undefined && key !== expectedKey) throw new KdsError("invalid_resource", `${label}: sent under the name "${expectedKey}"`);
  if (spec.typeUrl !== type.typeUrl) throw new KdsError("invalid_resource", `${label}: the spec is a ${spec.typeUrl}, expected ${type.typeUrl}`);
  let decoded: Message;
  try {
    decoded = fromBinary(type.schema, spec.value);
  } catch (error) {
    throw new KdsError("invalid_resource", `${label}: malformed spec (${String(error)})`, { cause: error });
  }
  return {
    key,
    name: meta.name,
    mesh: meta.mesh,
    labels: meta.labels,
    version: meta.version,
    creationTime: meta.creationTime === undefined ? undefined : timestampDate(meta.creationTime),
    modificationTime: meta.modificationTime === undefined ? undefined : timestampDate(meta.modificationTime),
    spec: decoded,
  };
}
