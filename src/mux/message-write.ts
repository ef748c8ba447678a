/**
 * Writes any protobuf-es message into a buffer it was measured for, back to
 * front, in one pass: a message's fields are written last field first, so
 * when a nested message is done its length is known and goes in front of
 * it. The bytes are exactly protobuf-es's `toBinary` (a property test
 * checks it: test/mux/frame-encode.test.ts), with nothing measured twice
 * and nothing copied after it is written.
 *
 * Why: `toBinary` writes into a buffer it grows by doubling (each growth a
 * fresh zero-filled buffer and a copy), moves a nested message's bytes
 * whenever its length needs more than one byte, and copies the result out
 * once more; a 64 KiB payload in a request's `Any` was copied about six
 * times before the transport copied it behind its prefix.
 *
 * The caller measures the message first (the sizers of frame-size.ts, which
 * follow the same presence rules) and hands over a buffer with room for it.
 *
 * @module
 */
import {
  fromJson,
  toBinary,
  type DescField,
  type DescMessage,
  type JsonObject,
} from "@bufbuild/protobuf";
import { ScalarType } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import {
  fieldRuns,
  holdsJsonStruct,
  oneofPicker,
  mapKeyOf,
  presence,
  read,
  utf8Length,
  varintSize,
  wireTypeOf,
  type FieldRun,
} from "./frame-size.ts";

/** Where a writer writes: the buffer, and a view of it for fixed-width numbers (made on first use). */
export interface Sink {
  readonly buf: Uint8Array;
  view: DataView | undefined;
}

/** Writes a message's fields so that they end at `end`; returns where they start. */
type MessageWriter = (message: Record<string, unknown>, sink: Sink, end: number) => number;
/** Writes one value (no tag) ending at `end`; returns where it starts. */
type ValueWriter = (value: unknown, sink: Sink, end: number) => number;

const writers = new WeakMap<DescMessage, MessageWriter>();

const WIRE_DELIMITED = 2;

/**
 * Writes `message` (of type `desc`) so that its encoding ends at `end` of
 * `sink.buf`, and returns where it starts. There must be room in front of
 * `end` for its whole encoded length.
 */
export function writeMessageBackwards(
  desc: DescMessage,
  message: object,
  sink: Sink,
  end: number,
): number {
  return writerOf(desc)(message as Record<string, unknown>, sink, end);
}

function writerOf(desc: DescMessage): MessageWriter {
  const known = writers.get(desc);
  if (known !== undefined) return known;
  const fields: MessageWriter[] = [];
  const writer: MessageWriter = (message, sink, end) => {
    let pos = end;
    // Unknown fields go last (as toBinary writes them), so they are written first.
    const unknown = message.$unknown as
      | { no: number; wireType: number; data: Uint8Array }[]
      | undefined;
    if (unknown !== undefined) {
      for (let i = unknown.length - 1; i >= 0; i--) {
        const { no, wireType, data } = unknown[i] as (typeof unknown)[number];
        pos -= data.byteLength;
        sink.buf.set(data, pos);
        pos = putVarint(sink.buf, pos, ((no << 3) | wireType) >>> 0);
      }
    }
    for (let i = fields.length - 1; i >= 0; i--)
      pos = (fields[i] as MessageWriter)(message, sink, pos);
    return pos;
  };
  // Registered before the fields compile, so a recursive type finds itself.
  writers.set(desc, writer);
  // In field-number order, as toBinary writes them (the writer walks this list backwards).
  for (const run of fieldRuns(desc))
    fields.push(run.kind === "field" ? fieldWriter(run.field) : oneofWriter(run));
  return writer;
}

/** The writer of a run of a oneof's members: only the set member's is called. */
function oneofWriter(run: FieldRun & { kind: "oneof" }): MessageWriter {
  const pick = oneofPicker(run, fieldWriter);
  return (message, sink, end) => {
    const member = pick(message);
    return member === undefined ? end : member(message, sink, end);
  };
}

function fieldWriter(field: DescField): MessageWriter {
  const name = field.localName;
  switch (field.fieldKind) {
    case "scalar":
    case "enum": {
      const type = field.fieldKind === "enum" ? ScalarType.INT32 : field.scalar;
      const tag = tagOf(field.number, wireTypeOf(type));
      const value = scalarWriter(type);
      const zero = field.fieldKind === "enum" ? (field.enum.values[0]?.number ?? 0) : undefined;
      const present = presence(field, type, zero);
      return (message, sink, end) => {
        const v = read(message, field, name);
        if (!present(v)) return end;
        return putVarint(sink.buf, value(v, sink, end), tag);
      };
    }
    case "message": {
      const tag = tagOf(field.number, WIRE_DELIMITED);
      const child = childWriter(field);
      return (message, sink, end) => {
        const v = field.oneof === undefined ? message[name] : read(message, field, name);
        if (v === undefined) return end;
        const start = child(v, sink, end);
        return putVarint(sink.buf, putVarint(sink.buf, start, end - start), tag);
      };
    }
    case "list": {
      if (field.listKind === "message") {
        const tag = tagOf(field.number, WIRE_DELIMITED);
        const child = childWriter(field);
        return (message, sink, end) => {
          const items = message[name] as unknown[];
          let pos = end;
          for (let i = items.length - 1; i >= 0; i--) {
            const start = child(items[i], sink, pos);
            pos = putVarint(sink.buf, putVarint(sink.buf, start, pos - start), tag);
          }
          return pos;
        };
      }
      const type = field.listKind === "enum" ? ScalarType.INT32 : field.scalar;
      const value = scalarWriter(type);
      if (field.packed) {
        const tag = tagOf(field.number, WIRE_DELIMITED);
        return (message, sink, end) => {
          const items = message[name] as unknown[];
          if (items.length === 0) return end;
          let pos = end;
          for (let i = items.length - 1; i >= 0; i--) pos = value(items[i], sink, pos);
          return putVarint(sink.buf, putVarint(sink.buf, pos, end - pos), tag);
        };
      }
      const tag = tagOf(field.number, wireTypeOf(type));
      return (message, sink, end) => {
        const items = message[name] as unknown[];
        let pos = end;
        for (let i = items.length - 1; i >= 0; i--)
          pos = putVarint(sink.buf, value(items[i], sink, pos), tag);
        return pos;
      };
    }
    case "map": {
      const tag = tagOf(field.number, WIRE_DELIMITED);
      const keyType = field.mapKey;
      const keyTag = tagOf(1, wireTypeOf(keyType));
      const key = scalarWriter(keyType);
      const toKey = mapKeyOf(keyType);
      let entryValue: ValueWriter;
      if (field.mapKind === "message") {
        const child = writerOf(field.message);
        const valueTag = tagOf(2, WIRE_DELIMITED);
        entryValue = (v, sink, end) => {
          const start = child(v as Record<string, unknown>, sink, end);
          return putVarint(sink.buf, putVarint(sink.buf, start, end - start), valueTag);
        };
      } else {
        const type = field.mapKind === "enum" ? ScalarType.INT32 : field.scalar;
        const valueTag = tagOf(2, wireTypeOf(type));
        const value = scalarWriter(type);
        entryValue = (v, sink, end) => putVarint(sink.buf, value(v, sink, end), valueTag);
      }
      return (message, sink, end) => {
        const record = message[name] as Record<string, unknown>;
        const keys = Object.keys(record);
        let pos = end;
        for (let i = keys.length - 1; i >= 0; i--) {
          const k = keys[i] as string;
          const entryEnd = pos;
          pos = entryValue(record[k], sink, pos);
          pos = putVarint(sink.buf, key(toKey(k), sink, pos), keyTag);
          pos = putVarint(sink.buf, putVarint(sink.buf, pos, entryEnd - pos), tag);
        }
        return pos;
      };
    }
  }
}

/** The writer of a message-typed field's value; google.protobuf.Struct fields hold a JSON object locally. */
function childWriter(field: DescField & { message: DescMessage }): ValueWriter {
  if (holdsJsonStruct(field)) {
    // Free-form metadata: rare and small; encoded as the sizer measured it.
    return (v, sink, end) => {
      const bytes = toBinary(StructSchema, fromJson(StructSchema, v as JsonObject));
      sink.buf.set(bytes, end - bytes.byteLength);
      return end - bytes.byteLength;
    };
  }
  const writer = writerOf(field.message);
  return (v, sink, end) => writer(v as Record<string, unknown>, sink, end);
}

const encoder = new TextEncoder();

function scalarWriter(type: ScalarType): ValueWriter {
  switch (type) {
    case ScalarType.STRING:
      return (v, sink, end) => {
        const text = v as string;
        const length = utf8Length(text);
        const start = end - length;
        const buf = sink.buf;
        if (length === text.length) {
          // ASCII: one byte per character.
          for (let i = 0; i < length; i++) buf[start + i] = text.charCodeAt(i);
        } else encoder.encodeInto(text, buf.subarray(start, end));
        return putVarint(buf, start, length);
      };
    case ScalarType.BYTES:
      return (v, sink, end) => {
        const bytes = v as Uint8Array;
        const start = end - bytes.byteLength;
        sink.buf.set(bytes, start);
        return putVarint(sink.buf, start, bytes.byteLength);
      };
    case ScalarType.BOOL:
      return (v, sink, end) => {
        sink.buf[end - 1] = v === true ? 1 : 0;
        return end - 1;
      };
    case ScalarType.DOUBLE:
      return (v, sink, end) => {
        viewOf(sink).setFloat64(end - 8, v as number, true);
        return end - 8;
      };
    case ScalarType.FLOAT:
      return (v, sink, end) => {
        viewOf(sink).setFloat32(end - 4, v as number, true);
        return end - 4;
      };
    case ScalarType.FIXED32:
      return (v, sink, end) => {
        viewOf(sink).setUint32(end - 4, v as number, true);
        return end - 4;
      };
    case ScalarType.SFIXED32:
      return (v, sink, end) => {
        viewOf(sink).setInt32(end - 4, v as number, true);
        return end - 4;
      };
    case ScalarType.FIXED64:
      return (v, sink, end) => {
        viewOf(sink).setBigUint64(end - 8, BigInt.asUintN(64, BigInt(v as bigint)), true);
        return end - 8;
      };
    case ScalarType.SFIXED64:
      return (v, sink, end) => {
        viewOf(sink).setBigInt64(end - 8, BigInt.asIntN(64, BigInt(v as bigint)), true);
        return end - 8;
      };
    case ScalarType.INT32:
      return (v, sink, end) => {
        const n = v as number;
        if (n >= 0) return putVarint(sink.buf, end, n);
        // A negative int32 is sign-extended to 64 bits: ten bytes.
        return putVarint64(sink.buf, end, BigInt.asUintN(64, BigInt(n)));
      };
    case ScalarType.UINT32:
      return (v, sink, end) => putVarint(sink.buf, end, (v as number) >>> 0);
    case ScalarType.SINT32:
      return (v, sink, end) =>
        putVarint(sink.buf, end, (((v as number) << 1) ^ ((v as number) >> 31)) >>> 0);
    case ScalarType.INT64:
    case ScalarType.UINT64:
      return (v, sink, end) =>
        putVarint64(sink.buf, end, BigInt.asUintN(64, BigInt(v as bigint | string | number)));
    case ScalarType.SINT64:
      return (v, sink, end) => {
        const n = BigInt.asIntN(64, BigInt(v as bigint | string | number));
        return putVarint64(sink.buf, end, BigInt.asUintN(64, (n << 1n) ^ (n >> 63n)));
      };
  }
}

function viewOf(sink: Sink): DataView {
  sink.view ??= new DataView(sink.buf.buffer, sink.buf.byteOffset, sink.buf.byteLength);
  return sink.view;
}

function tagOf(fieldNo: number, wireType: number): number {
  return ((fieldNo << 3) | wireType) >>> 0;
}

/** Writes the unsigned 32-bit varint `n` so that it ends at `end`; returns where it starts. */
export function putVarint(buf: Uint8Array, end: number, n: number): number {
  const start = end - varintSize(n);
  let pos = start;
  while (n >= 0x80) {
    buf[pos++] = (n & 0x7f) | 0x80;
    n >>>= 7;
  }
  buf[pos] = n;
  return start;
}

/** Writes the unsigned 64-bit varint `n` so that it ends at `end`; returns where it starts. */
function putVarint64(buf: Uint8Array, end: number, n: bigint): number {
  let size = 1;
  for (let rest = n >> 7n; rest > 0n; rest >>= 7n) size++;
  const start = end - size;
  let pos = start;
  while (n >= 0x80n) {
    buf[pos++] = Number(n & 0x7fn) | 0x80;
    n >>= 7n;
  }
  buf[pos] = Number(n);
  return start;
}
