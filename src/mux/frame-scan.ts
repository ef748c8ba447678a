/**
 * Weighs an encoded frame before it is decoded: one pass over its protobuf
 * wire format, guided by the schema, counting its elements and estimating
 * the memory its decoded form would hold, as `weighFrame` does for a
 * decoded frame. A transport that holds a frame's bytes (the node adapter's
 * gRPC reader) refuses a frame that {@link frameRefusal} refuses without
 * decoding it, so a frame of two million empty messages costs its 4 MiB of
 * bytes, never the hundreds of MiB its objects would take.
 *
 * The scan stops as soon as the frame is over a limit. It is stricter than
 * the decoder, which reads a known field whatever its wire type and nests
 * deeper: a known field with another wire type than its own, nesting deeper
 * than {@link MAX_DEPTH}, or bytes that are not protobuf are refused, so
 * nothing the scan could not weigh reaches the decoder.
 *
 * @module
 */
import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { FrameSchema } from "../gen/kds/mux/v1/mux_pb.ts";
import {
  BYTES_HEAP,
  DENSE_FRAME_ALLOWANCE_BYTES,
  MAX_DECODED_EXPANSION,
  MAX_FRAME_ELEMENTS,
  SLOT_HEAP,
  UNKNOWN_HEAP,
  frameRefusal,
  objectHeap,
  stringHeap,
  type FrameWeight,
} from "./frame-limits.ts";

/** How a field's values are counted. */
type FieldPlan =
  | { readonly kind: "message"; readonly repeated: boolean; readonly child: () => MessagePlan }
  | { readonly kind: "string" | "bytes"; readonly repeated: boolean }
  | { readonly kind: "scalar"; readonly repeated: boolean; readonly fixedBytes: number }
  | { readonly kind: "map"; readonly value: "string" | "bytes" | "scalar" | (() => MessagePlan) };

interface MessagePlan {
  readonly heap: number;
  /** Fields by number: an array index for numbers up to {@link DIRECT_FIELDS}, the map for larger ones. */
  readonly direct: readonly (FieldPlan | undefined)[];
  readonly fields: ReadonlyMap<number, FieldPlan>;
}

/** Field numbers below this are looked up by index. */
const DIRECT_FIELDS = 64;

const plans = new WeakMap<DescMessage, MessagePlan>();

/** Frames nest this deep at most: a frame's own messages go 5 levels deep, a batch adds 2, free-form node metadata a few per level of its JSON. */
export const MAX_DEPTH = 32;

/**
 * Why the encoded frame `bytes` (one `kds.mux.v1.Frame`) is refused before
 * decoding, or undefined when the scan finds nothing wrong.
 */
export function scanRefusal(bytes: Uint8Array): string | undefined {
  const weight = scanFrame(bytes);
  if (typeof weight === "string") return `it is not a well-formed kds.mux.v1.Frame: ${weight}`;
  return frameRefusal(weight);
}

/**
 * The weight of the encoded frame `bytes`, as far as the scan went (it stops
 * once a limit of {@link frameRefusal} is passed), or why the bytes cannot
 * be weighed (they are not protobuf, a known field has another wire type
 * than its own, or they nest deeper than {@link MAX_DEPTH}).
 */
export function scanFrame(bytes: Uint8Array): FrameWeight | string {
  const scan = new Scan(bytes);
  const root = planOf(FrameSchema);
  scan.heap += root.heap;
  return scan.message(root, 0, bytes.length, 0)
    ? { wireBytes: bytes.length, heapBytes: scan.heap, elements: scan.elements }
    : scan.why;
}

class Scan {
  heap = 0;
  elements = 0;
  pos = 0;
  /** Why the bytes could not be weighed, once `message` returned false. */
  why = "the bytes end inside a field";
  readonly #bytes: Uint8Array;
  readonly #heapLimit: number;

  constructor(bytes: Uint8Array) {
    this.#bytes = bytes;
    this.#heapLimit = MAX_DECODED_EXPANSION * bytes.length + DENSE_FRAME_ALLOWANCE_BYTES;
  }

  /** Whether the scan can stop: a limit is passed already. */
  get over(): boolean {
    return this.elements > MAX_FRAME_ELEMENTS || this.heap > this.#heapLimit;
  }

  /** Scans the fields in [start, end) as a message of `plan`; false when the bytes are not readable. */
  message(plan: MessagePlan, start: number, end: number, depth: number): boolean {
    if (depth > MAX_DEPTH) return this.#fail(`it nests deeper than ${MAX_DEPTH} messages`);
    this.pos = start;
    while (this.pos < end) {
      if (this.over) return true;
      const tag = this.#varint(end);
      if (tag === undefined) return false;
      const no = Math.floor(tag / 8);
      const wireType = tag % 8;
      const field = no < DIRECT_FIELDS ? plan.direct[no] : plan.fields.get(no);
      if (field !== undefined) {
        const known = this.#known(field, wireType, end, depth);
        if (known === "unreadable") return false;
        if (known === "mismatch")
          return this.#fail(`field ${no} arrives with wire type ${wireType}, not its own`);
      } else {
        if (!this.#skip(wireType, no, end, depth)) return false;
        this.elements++;
        this.heap += UNKNOWN_HEAP;
      }
    }
    return this.pos === end;
  }

  /** Scans one value of `field`: "mismatch" (nothing read) when its wire type is not the field's. */
  #known(
    field: FieldPlan,
    wireType: number,
    end: number,
    depth: number,
  ): "ok" | "mismatch" | "unreadable" {
    if (field.kind === "scalar") {
      if (field.repeated && wireType === 2) {
        const valueEnd = this.#delimited(end);
        if (valueEnd < 0) return "unreadable";
        const n =
          field.fixedBytes > 0
            ? Math.floor((valueEnd - this.pos) / field.fixedBytes)
            : this.#countVarints(this.pos, valueEnd);
        this.elements += n;
        this.heap += SLOT_HEAP * n;
        this.pos = valueEnd;
        return "ok";
      }
      if (wireType !== (field.fixedBytes === 8 ? 1 : field.fixedBytes === 4 ? 5 : 0))
        return "mismatch";
      if (!this.#skip(wireType, 0, end, depth)) return "unreadable";
      if (field.repeated) {
        this.elements++;
        this.heap += SLOT_HEAP;
      }
      return "ok";
    }
    if (wireType !== 2) return "mismatch";
    const valueEnd = this.#delimited(end);
    if (valueEnd < 0) return "unreadable";
    const valueStart = this.pos;
    this.elements++;
    switch (field.kind) {
      case "string":
        this.heap += stringHeap(valueEnd - valueStart) + (field.repeated ? SLOT_HEAP : 0);
        break;
      case "bytes":
        this.heap += BYTES_HEAP + (field.repeated ? SLOT_HEAP : 0);
        break;
      case "message": {
        const child = field.child();
        this.heap += child.heap + (field.repeated ? SLOT_HEAP : 0);
        if (!this.message(child, valueStart, valueEnd, depth + 1)) return "unreadable";
        break;
      }
      case "map":
        this.heap += SLOT_HEAP;
        if (!this.#mapEntry(field.value, valueStart, valueEnd, depth + 1)) return "unreadable";
        break;
    }
    this.pos = valueEnd;
    return "ok";
  }

  /** A map entry: key 1 (a string or a number), value 2. */
  #mapEntry(
    value: Extract<FieldPlan, { kind: "map" }>["value"],
    start: number,
    end: number,
    depth: number,
  ): boolean {
    this.pos = start;
    while (this.pos < end) {
      const tag = this.#varint(end);
      if (tag === undefined) return false;
      const no = Math.floor(tag / 8);
      const wireType = tag % 8;
      if (wireType === 2 && (no === 1 || no === 2)) {
        const valueEnd = this.#delimited(end);
        if (valueEnd < 0) return false;
        const valueStart = this.pos;
        if (no === 1 || value === "string") this.heap += stringHeap(valueEnd - valueStart);
        else if (value === "bytes") this.heap += BYTES_HEAP;
        else if (typeof value === "function") {
          const child = value();
          this.heap += child.heap;
          if (!this.message(child, valueStart, valueEnd, depth + 1)) return false;
        }
        this.pos = valueEnd;
      } else if (!this.#skip(wireType, no, end, depth)) {
        return false;
      }
    }
    return true;
  }

  /** Skips one value of `wireType` (a group up to its end tag). */
  #skip(wireType: number, no: number, end: number, depth: number): boolean {
    switch (wireType) {
      case 0:
        return this.#varint(end) !== undefined;
      case 1:
        this.pos += 8;
        return this.pos <= end;
      case 2: {
        const valueEnd = this.#delimited(end);
        if (valueEnd < 0) return false;
        this.pos = valueEnd;
        return true;
      }
      case 3: {
        if (depth > MAX_DEPTH) return this.#fail(`it nests deeper than ${MAX_DEPTH} groups`);
        while (this.pos < end) {
          const tag = this.#varint(end);
          if (tag === undefined) return false;
          if (tag % 8 === 4) return Math.floor(tag / 8) === no;
          if (!this.#skip(tag % 8, Math.floor(tag / 8), end, depth + 1)) return false;
        }
        return false;
      }
      case 5:
        this.pos += 4;
        return this.pos <= end;
      default:
        return this.#fail(`wire type ${wireType} of field ${no} is not one a field may have`);
    }
  }

  #fail(why: string): false {
    this.why = why;
    return false;
  }

  /** Reads a length prefix: the end of the value that starts at `pos`, or -1 when it does not fit before `end`. */
  #delimited(end: number): number {
    const length = this.#varint(end);
    if (length === undefined || this.pos + length > end) return -1;
    return this.pos + length;
  }

  /** A varint of up to 10 bytes, as a number (exact up to 2^53, which bounds every length and tag here). */
  #varint(end: number): number | undefined {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= end) return undefined;
      const b = this.#bytes[this.pos++] as number;
      value += (b & 0x7f) * scale;
      if (b < 0x80) return value;
      scale *= 128;
    }
    return undefined;
  }

  #countVarints(start: number, end: number): number {
    let n = 0;
    for (let i = start; i < end; i++) if ((this.#bytes[i] as number) < 0x80) n++;
    return n;
  }
}

function planOf(desc: DescMessage): MessagePlan {
  const known = plans.get(desc);
  if (known !== undefined) return known;
  const fields = new Map<number, FieldPlan>();
  const direct: (FieldPlan | undefined)[] = new Array(DIRECT_FIELDS).fill(undefined);
  const plan: MessagePlan = { heap: objectHeap(desc), direct, fields };
  // Registered before its fields, so a recursive type (a batch of frames) finds itself.
  plans.set(desc, plan);
  for (const field of desc.fields) {
    const planned = fieldPlan(field);
    fields.set(field.number, planned);
    if (field.number < DIRECT_FIELDS) direct[field.number] = planned;
  }
  return plan;
}

function fieldPlan(field: DescField): FieldPlan {
  switch (field.fieldKind) {
    case "message":
      return { kind: "message", repeated: false, child: childPlan(field.message) };
    case "list":
      if (field.listKind === "message")
        return { kind: "message", repeated: true, child: childPlan(field.message) };
      return valuePlan(field.listKind === "enum" ? ScalarType.INT32 : field.scalar, true);
    case "map": {
      const value =
        field.mapKind === "message"
          ? childPlan(field.message)
          : field.mapKind === "enum"
            ? "scalar"
            : scalarKind(field.scalar);
      return { kind: "map", value };
    }
    default:
      return valuePlan(field.fieldKind === "enum" ? ScalarType.INT32 : field.scalar, false);
  }
}

/** A message type's plan, looked up when first needed (google.protobuf.Struct fields are scanned as the message they are on the wire). */
function childPlan(desc: DescMessage): () => MessagePlan {
  const target = desc.typeName === StructSchema.typeName ? StructSchema : desc;
  return () => planOf(target);
}

function valuePlan(type: ScalarType, repeated: boolean): FieldPlan {
  const kind = scalarKind(type);
  return kind === "scalar"
    ? { kind, repeated, fixedBytes: fixedBytesOf(type) }
    : { kind, repeated };
}

function scalarKind(type: ScalarType): "string" | "bytes" | "scalar" {
  return type === ScalarType.STRING ? "string" : type === ScalarType.BYTES ? "bytes" : "scalar";
}

function fixedBytesOf(type: ScalarType): number {
  switch (type) {
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return 8;
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return 4;
    default:
      return 0;
  }
}
