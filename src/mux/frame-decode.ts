/**
 * Decodes a frame read from the wire, after weighing its bytes
 * (`scanFrame`). A delta response is the bulk of a sync: one in the form a
 * protobuf encoder writes (each singular field once and not empty, minimal
 * lengths, no unknown fields, aliases or TTL) is read by hand, into the
 * same objects protobuf-es's `fromBinary` makes (a property test checks
 * it: test/mux/frame-decode.test.ts), and so is a batch of nothing but such
 * responses (a global sends queued responses batched), and so is a plain
 * delta ACK (a request of nothing but its type URL and nonce: what every
 * zone sends the global for every change), and so is a delta subscription
 * (what a discovery client sends first, naming every resource it holds
 * when it resumes). The reflective
 * decoder made a message, an unknown-field array and a [field, wire type]
 * pair per tag for each resource, and a Node Buffer view per payload; a
 * zone receiving a 100k-resource sync spent a tenth of its CPU time there.
 * Anything else is decoded by `fromBinary`.
 *
 * A frame read by hand is the exact encoding of what was decoded, so the
 * scan's weight is what `weighFrame` would find walking the decoded frame
 * (test/mux/frame-size.test.ts checks the two agree on such bytes): it is
 * kept for `weighFrame`, which then does not walk the frame again. Each
 * response in a batch read by hand is scanned on its own for its weight
 * (the session weighs a batch's frames one by one).
 *
 * @module
 */
import { create, fromBinary } from "@bufbuild/protobuf";
import type { Any } from "@bufbuild/protobuf/wkt";
import { FrameSchema, type Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import {
  NodeSchema,
  type DeltaDiscoveryRequest,
  type Node,
  type DeltaDiscoveryResponse,
  type Resource,
} from "../gen/kds/v1/discovery_pb.ts";
import { frameRefusal } from "./frame-limits.ts";
import { plainAck as plainAckRequest } from "./frames.ts";
import { scanFrame } from "./frame-scan.ts";
import { rememberWeight } from "./frame-size.ts";
import * as tags from "./frame-tags.ts";
import { utf8Text } from "../util/utf8.ts";

/**
 * Weighs and decodes the encoded frame `bytes`: throws what `unreadable`
 * builds when the weight is refused (`frameRefusal`) or the bytes do not
 * decode as a `kds.mux.v1.Frame`.
 */
export function readFrame(
  bytes: Uint8Array,
  unreadable: (reason: string, cause?: unknown) => Error,
): Frame {
  const weight = scanFrame(bytes);
  if (typeof weight === "string")
    throw unreadable(`it is not a well-formed kds.mux.v1.Frame: ${weight}`);
  const refused = frameRefusal(weight);
  if (refused !== undefined) throw unreadable(refused);
  const plain = plainFrame(bytes);
  if (plain !== undefined) {
    rememberWeight(plain, weight);
    return plain;
  }
  try {
    return fromBinary(FrameSchema, bytes);
  } catch (error) {
    throw unreadable(
      `parse binary: ${error instanceof Error ? error.message : String(error)}`,
      error,
    );
  }
}

/** A value this reader leaves to `fromBinary`. */
class NotPlain extends Error {}
const notPlain = new NotPlain();

/**
 * The delta response frame, batch of delta response frames, or plain delta
 * ACK `bytes` hold, read by hand, or undefined when they hold anything else
 * or anything this reader leaves to `fromBinary`.
 */
function plainFrame(bytes: Uint8Array): Frame | undefined {
  const tag = bytes[0];
  if (tag === tags.TAG_FRAME_DELTA_REQUEST) return plainAck(bytes) ?? plainSubscription(bytes);
  if (tag !== tags.TAG_FRAME_DELTA_RESPONSE && tag !== tags.TAG_FRAME_BATCH) return undefined;
  try {
    const r = fieldReader(bytes);
    const view = r.bytes;
    const end = view.length;
    if (tag === tags.TAG_FRAME_DELTA_RESPONSE) return deltaResponseFrame(r.response(end));
    const frames: Frame[] = [];
    while (r.pos < end) {
      if (view[r.pos++] !== tags.TAG_BATCH_FRAMES) throw notPlain;
      const frameEnd = r.length();
      const start = r.pos;
      if (view[r.pos++] !== tags.TAG_FRAME_DELTA_RESPONSE) throw notPlain;
      if (r.length() !== frameEnd) throw notPlain;
      const response = r.response(frameEnd);
      // A field running past its frame's end (but not past the batch's) would shift every frame after it.
      if (r.pos !== frameEnd) throw notPlain;
      const inner = deltaResponseFrame(response);
      // Within a frame the scan accepted, so this weighs, and is what weighFrame would find for `inner`.
      const weight = scanFrame(view.subarray(start, frameEnd));
      if (typeof weight === "string") throw notPlain;
      rememberWeight(inner, weight);
      frames.push(inner);
    }
    return {
      $typeName: "kds.mux.v1.Frame",
      value: { case: "batch", value: { $typeName: "kds.mux.v1.Batch", frames } },
    };
  } catch (error) {
    if (error === notPlain) return undefined;
    throw error;
  }
}

/** The type URL of the last ACK read by hand: a session's ACKs name one or two types. */
let lastAckTypeUrl = "";

/**
 * A delta request frame holding nothing but a type URL and a response nonce
 * (each once, neither empty), read by hand, or undefined for any other
 * request (a subscription, a NACK, an ACK with per-resource errors), which
 * `fromBinary` reads. The object is the one `fromBinary` makes, its fields
 * in the same order.
 */
function plainAck(bytes: Uint8Array): Frame | undefined {
  try {
    const r = fieldReader(bytes);
    const view = r.bytes;
    const end = view.length;
    let typeUrl: string | undefined;
    let responseNonce: string | undefined;
    while (r.pos < end) {
      const tag = view[r.pos++];
      if (tag === tags.TAG_REQUEST_TYPE_URL && typeUrl === undefined) {
        const urlEnd = r.length();
        typeUrl = r.sameText(urlEnd, lastAckTypeUrl) ? lastAckTypeUrl : r.nonEmpty(urlEnd);
        r.pos = urlEnd;
      } else if (tag === tags.TAG_REQUEST_NONCE && responseNonce === undefined)
        responseNonce = r.nonEmpty(r.length());
      else return undefined;
    }
    if (typeUrl === undefined || responseNonce === undefined) return undefined;
    // Only an ASCII one is kept, as for the Any type URLs (see Reader.typeUrl).
    if (typeUrl !== lastAckTypeUrl && isAscii(typeUrl)) lastAckTypeUrl = typeUrl;
    return {
      $typeName: "kds.mux.v1.Frame",
      value: { case: "deltaRequest", value: plainAckRequest(typeUrl, responseNonce) },
    };
  } catch (error) {
    if (error === notPlain) return undefined;
    throw error;
  }
}

/**
 * A delta request frame as a discovery client subscribes (src/discovery/client.ts): a node, a type URL,
 * the names subscribed to, the versions it holds (`initial_resource_versions`, one per resource of the type when
 * it resumes: 100,000 entries for a zone holding 100,000 resources) and, on a stream that ACKs too, a response
 * nonce; read by hand, or undefined for any other request, which `fromBinary` reads. Each singular field at most
 * once and not empty, each map entry a key then a value with no key twice: then the bytes are the exact encoding
 * of the request, as the scan's weight requires. `fromBinary` put a 100,000-entry map through protobuf-es's
 * reflective setter, and the session then walked the decoded map again to weigh it.
 */
function plainSubscription(bytes: Uint8Array): Frame | undefined {
  try {
    const r = fieldReader(bytes);
    const view = r.bytes;
    const end = view.length;
    let node: Node | undefined;
    let typeUrl: string | undefined;
    let responseNonce: string | undefined;
    const subscribe: string[] = [];
    const versions: Record<string, string> = {};
    while (r.pos < end) {
      const tag = view[r.pos++];
      if (tag === tags.TAG_REQUEST_INITIAL_VERSIONS) r.mapEntry(r.length(), versions);
      else if (tag === tags.TAG_REQUEST_SUBSCRIBE) subscribe.push(r.string(r.length()));
      else if (tag === tags.TAG_REQUEST_TYPE_URL && typeUrl === undefined)
        typeUrl = r.nonEmpty(r.length());
      else if (tag === tags.TAG_REQUEST_NONCE && responseNonce === undefined)
        responseNonce = r.nonEmpty(r.length());
      else if (tag === tags.TAG_REQUEST_NODE && node === undefined) node = r.node(r.length());
      else return undefined;
    }
    // The object fromBinary makes: create's fields first, a message field added where it was read (last).
    const request: DeltaDiscoveryRequest = {
      $typeName: "kds.v1.DeltaDiscoveryRequest",
      typeUrl: typeUrl ?? "",
      resourceNamesSubscribe: subscribe,
      resourceNamesUnsubscribe: [],
      initialResourceVersions: versions,
      responseNonce: responseNonce ?? "",
    };
    if (node !== undefined) request.node = node;
    return { $typeName: "kds.mux.v1.Frame", value: { case: "deltaRequest", value: request } };
  } catch (error) {
    if (error === notPlain) return undefined;
    throw error;
  }
}

/** `bytes` as a plain Uint8Array view: views of a Node Buffer are Buffers, whose every subarray costs a species lookup. */
function plainView(bytes: Uint8Array): Uint8Array {
  return bytes.constructor === Uint8Array
    ? bytes
    : new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * A reader of `bytes` placed after the frame's one-byte field tag and its length; throws `notPlain` unless that
 * field runs to the end of the bytes (a frame of one field, as an encoder writes a data frame).
 */
function fieldReader(bytes: Uint8Array): Reader {
  const r = new Reader(plainView(bytes));
  r.pos = 1;
  if (r.length() !== r.bytes.length) throw notPlain;
  return r;
}

function isAscii(text: string): boolean {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) > 0x7f) return false;
  return true;
}

function deltaResponseFrame(response: DeltaDiscoveryResponse): Frame {
  return { $typeName: "kds.mux.v1.Frame", value: { case: "deltaResponse", value: response } };
}

/**
 * The type URL of the last delta response read by hand, and the last Any
 * type URL: the same string again when the bytes match (only an ASCII one is
 * kept), so a session's responses, and the resources in them, share one
 * string, not a new one per frame, whose hash every map keyed by type URL
 * on the way (subscriptions, types, versions, status) computed again.
 */
let lastResponseTypeUrl = "";
let lastAnyTypeUrl = "";

class Reader {
  readonly bytes: Uint8Array;
  pos = 0;

  constructor(bytes: Uint8Array) {
    this.bytes = bytes;
  }

  response(end: number): DeltaDiscoveryResponse {
    let systemVersionInfo: string | undefined;
    let typeUrl: string | undefined;
    let nonce: string | undefined;
    const resources: Resource[] = [];
    const removedResources: string[] = [];
    while (this.pos < end) {
      const tag = this.bytes[this.pos++];
      if (tag === tags.TAG_RESPONSE_RESOURCES) resources.push(this.resource(this.length()));
      else if (tag === tags.TAG_RESPONSE_REMOVED) removedResources.push(this.string(this.length()));
      else if (tag === tags.TAG_RESPONSE_VERSION && systemVersionInfo === undefined)
        systemVersionInfo = this.nonEmpty(this.length());
      else if (tag === tags.TAG_RESPONSE_TYPE_URL && typeUrl === undefined) {
        const urlEnd = this.length();
        if (this.sameText(urlEnd, lastResponseTypeUrl)) {
          typeUrl = lastResponseTypeUrl;
          this.pos = urlEnd;
        } else {
          const start = this.pos;
          typeUrl = this.nonEmpty(urlEnd);
          if (typeUrl.length === urlEnd - start) lastResponseTypeUrl = typeUrl;
        }
      } else if (tag === tags.TAG_RESPONSE_NONCE && nonce === undefined)
        nonce = this.nonEmpty(this.length());
      else throw notPlain;
    }
    return {
      $typeName: "kds.v1.DeltaDiscoveryResponse",
      systemVersionInfo: systemVersionInfo ?? "",
      resources,
      typeUrl: typeUrl ?? "",
      nonce: nonce ?? "",
      removedResources,
    };
  }

  resource(end: number): Resource {
    let version: string | undefined;
    let name: string | undefined;
    let resource: Any | undefined;
    while (this.pos < end) {
      const tag = this.bytes[this.pos++];
      if (tag === tags.TAG_RESOURCE_VERSION && version === undefined)
        version = this.nonEmpty(this.length());
      else if (tag === tags.TAG_RESOURCE_NAME && name === undefined)
        name = this.nonEmpty(this.length());
      else if (tag === tags.TAG_RESOURCE_ANY && resource === undefined)
        resource = this.any(this.length());
      else throw notPlain;
    }
    if (this.pos !== end || resource === undefined) throw notPlain;
    // The fields in the order protobuf-es's decoder sets them (scalars and lists when it creates the message).
    return {
      $typeName: "kds.v1.Resource",
      version: version ?? "",
      name: name ?? "",
      aliases: [],
      resource,
    };
  }

  any(end: number): Any {
    let typeUrl: string | undefined;
    let value: Uint8Array | undefined;
    while (this.pos < end) {
      const tag = this.bytes[this.pos++];
      if (tag === tags.TAG_ANY_TYPE_URL && typeUrl === undefined)
        typeUrl = this.typeUrl(this.length());
      else if (tag === tags.TAG_ANY_VALUE && value === undefined) {
        const valueEnd = this.length();
        if (valueEnd === this.pos) throw notPlain;
        value = this.bytes.subarray(this.pos, valueEnd);
        this.pos = valueEnd;
      } else throw notPlain;
    }
    if (this.pos !== end) throw notPlain;
    return {
      $typeName: "google.protobuf.Any",
      typeUrl: typeUrl ?? "",
      value: value ?? new Uint8Array(0),
    };
  }

  /** Reads a minimal length prefix of up to 4 bytes (a frame is at most a few MiB); returns where its value ends. */
  length(): number {
    const bytes = this.bytes;
    let value = 0;
    for (let shift = 0; shift < 28; shift += 7) {
      const b = bytes[this.pos++];
      if (b === undefined) throw notPlain;
      value |= (b & 0x7f) << shift;
      if (b < 0x80) {
        // A longer encoding than needed (a last byte of 0) would make the bytes longer than the frame's encoding.
        if (b === 0 && shift > 0) throw notPlain;
        const end = this.pos + value;
        if (end > bytes.length) throw notPlain;
        return end;
      }
    }
    throw notPlain;
  }

  /**
   * A node of strings up to `end` (its id, cluster, user agent and features, as a discovery client sends it);
   * one with metadata is left to fromBinary.
   */
  node(end: number): Node {
    const node = create(NodeSchema);
    while (this.pos < end) {
      const tag = this.bytes[this.pos++];
      // A singular field is read once: a second would find it no longer empty.
      if (tag === tags.TAG_NODE_ID && node.id === "") node.id = this.nonEmpty(this.length());
      else if (tag === tags.TAG_NODE_CLUSTER && node.cluster === "")
        node.cluster = this.nonEmpty(this.length());
      else if (tag === tags.TAG_NODE_USER_AGENT_NAME && node.userAgentName === "")
        node.userAgentName = this.nonEmpty(this.length());
      else if (tag === tags.TAG_NODE_USER_AGENT_VERSION && node.userAgentVersion === "")
        node.userAgentVersion = this.nonEmpty(this.length());
      else if (tag === tags.TAG_NODE_CLIENT_FEATURES)
        node.clientFeatures.push(this.string(this.length()));
      else throw notPlain;
    }
    if (this.pos !== end) throw notPlain;
    return node;
  }

  /**
   * A map<string, string> entry up to `end` into `into`: a key, then a value (as encoders write them, each once,
   * either maybe empty). A key already in `into` (or any that is not a plain own property: `__proto__`,
   * `constructor`) is left to fromBinary, whose last value wins.
   */
  mapEntry(end: number, into: Record<string, string>): void {
    const bytes = this.bytes;
    if (bytes[this.pos++] !== tags.TAG_MAP_KEY) throw notPlain;
    const key = this.string(this.length());
    if (bytes[this.pos++] !== tags.TAG_MAP_VALUE) throw notPlain;
    const value = this.string(this.length());
    if (this.pos !== end || into[key] !== undefined || key === "__proto__") throw notPlain;
    into[key] = value;
  }

  /** A string that is not empty (an empty one is not written by an encoder). */
  nonEmpty(end: number): string {
    if (end === this.pos) throw notPlain;
    return this.string(end);
  }

  /** Whether the bytes from here to `end` are the ASCII string `text` (not empty); does not move. */
  sameText(end: number, text: string): boolean {
    const start = this.pos;
    if (text.length !== end - start || text === "") return false;
    for (let i = 0; i < text.length; i++)
      if (text.charCodeAt(i) !== this.bytes[start + i]) return false;
    return true;
  }

  /** An Any's type URL: the same string as the last one when the bytes match. */
  typeUrl(end: number): string {
    const last = lastAnyTypeUrl;
    const start = this.pos;
    if (this.sameText(end, last)) {
      this.pos = end;
      return last;
    }
    const text = this.nonEmpty(end);
    // Only an ASCII one is kept (as many characters as bytes), so a match is byte for byte.
    if (text.length === end - start) lastAnyTypeUrl = text;
    return text;
  }

  /** The UTF-8 string up to `end`; invalid UTF-8 is left to `fromBinary` (which refuses it). */
  string(end: number): string {
    const start = this.pos;
    this.pos = end;
    try {
      return utf8Text(this.bytes, start, end);
    } catch {
      throw notPlain; // fromBinary decodes the frame again and reports the invalid UTF-8: nothing is lost
    }
  }
}
