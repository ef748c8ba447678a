/**
 * The payloads the two views of a session carry, and how frames are built and
 * classified. A request always goes to the receiver's server view, a response
 * always to the receiver's client view: the frame's kind alone routes it.
 *
 * @module
 */
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import {
  GoAwayReason,
  MessageSchema,
  type Call,
  type Message,
} from "../gen/kds/mux/v1/mux_pb.ts";
import type {
  DeltaDiscoveryRequest,
  DeltaDiscoveryResponse,
  DiscoveryRequest,
  DiscoveryResponse,
} from "../gen/kds/v1/discovery_pb.ts";

/** What a client view sends and a server view receives: a SotW or delta request. */
export type MuxRequest = DiscoveryRequest | DeltaDiscoveryRequest;

/** What a server view sends and a client view receives: a SotW or delta response. */
export type MuxResponse = DiscoveryResponse | DeltaDiscoveryResponse;

/** The two data lanes of a session, named after the payload they carry. */
export type Lane = "requests" | "responses";

/** Wraps a request in a mux frame. */
export function requestFrame(request: MuxRequest): Message {
  return request.$typeName === "kds.v1.DiscoveryRequest"
    ? create(MessageSchema, { value: { case: "request", value: request } })
    : create(MessageSchema, { value: { case: "deltaRequest", value: request } });
}

/** Wraps a response in a mux frame. */
export function responseFrame(response: MuxResponse): Message {
  return response.$typeName === "kds.v1.DiscoveryResponse"
    ? create(MessageSchema, { value: { case: "response", value: response } })
    : create(MessageSchema, { value: { case: "deltaResponse", value: response } });
}

/** The oneof of a frame in its init form (plain objects accepted for nested messages). */
export type FrameValueInit = NonNullable<MessageInitShape<typeof MessageSchema>["value"]>;

/** Builds a control frame from its oneof case and value. */
export function controlFrame(value: FrameValueInit): Message {
  return create(MessageSchema, { value });
}

/** Human-readable name of a frame's kind, for error messages. */
export function frameKind(frame: Message): string {
  return frame.value.case ?? "empty frame";
}

/** The end codes a goaway carries, mapped to and from the wire enum. */
export const goAwayReasons = {
  shutdown: GoAwayReason.SHUTDOWN,
  replaced: GoAwayReason.REPLACED,
  protocol_error: GoAwayReason.PROTOCOL_ERROR,
  heartbeat_timeout: GoAwayReason.HEARTBEAT_TIMEOUT,
  send_timeout: GoAwayReason.SEND_TIMEOUT,
  zone_revoked: GoAwayReason.ZONE_REVOKED,
  resource_exhausted: GoAwayReason.RESOURCE_EXHAUSTED,
} as const;

/** A safe upper bound of a string's encoded field size (UTF-8 takes at most 3 bytes per UTF-16 unit). */
function stringBound(text: string): number {
  return text.length * 3 + 6;
}

/**
 * An upper bound of the encoded size of a data frame, computed without
 * encoding it, or undefined when the frame kind has no cheap bound. The
 * outbox encodes a frame to measure it only when this bound exceeds the
 * peer's limit, so large responses are not encoded twice.
 */
export function frameSizeBound(frame: Message): number | undefined {
  const v = frame.value;
  switch (v.case) {
    case "response": {
      let bytes = 16 + stringBound(v.value.versionInfo) + stringBound(v.value.typeUrl) + stringBound(v.value.nonce);
      for (const r of v.value.resources) bytes += 12 + stringBound(r.typeUrl) + r.value.byteLength;
      return bytes;
    }
    case "deltaResponse": {
      let bytes = 16 + stringBound(v.value.systemVersionInfo) + stringBound(v.value.typeUrl) + stringBound(v.value.nonce);
      for (const r of v.value.resources) {
        bytes += 48 + stringBound(r.name) + stringBound(r.version);
        for (const alias of r.aliases) bytes += stringBound(alias);
        if (r.resource !== undefined) bytes += stringBound(r.resource.typeUrl) + r.resource.value.byteLength;
      }
      for (const name of v.value.removedResources) bytes += stringBound(name);
      return bytes;
    }
    case "request": {
      const r = v.value;
      const extra = nodeAndErrorBound(r.node, r.errorDetail);
      if (extra === undefined) return undefined;
      let bytes = 16 + extra + stringBound(r.versionInfo) + stringBound(r.typeUrl) + stringBound(r.responseNonce);
      for (const name of r.resourceNames) bytes += stringBound(name);
      return bytes;
    }
    case "deltaRequest": {
      const r = v.value;
      const extra = nodeAndErrorBound(r.node, r.errorDetail);
      if (extra === undefined) return undefined;
      let bytes = 16 + extra + stringBound(r.typeUrl) + stringBound(r.responseNonce);
      for (const name of r.resourceNamesSubscribe) bytes += stringBound(name);
      for (const name of r.resourceNamesUnsubscribe) bytes += stringBound(name);
      // Keys, not entries: a resuming client's map holds every resource it has, and a pair per entry is an allocation each.
      const versions = r.initialResourceVersions;
      for (const k of Object.keys(versions)) bytes += 12 + stringBound(k) + stringBound(versions[k] as string);
      return bytes;
    }
    default:
      return undefined;
  }
}

/** Bound of a request's node and error detail; undefined when the node carries free-form metadata. */
function nodeAndErrorBound(node: DiscoveryRequest["node"], error: DiscoveryRequest["errorDetail"]): number | undefined {
  let bytes = 0;
  if (node !== undefined) {
    if (node.metadata !== undefined) return undefined;
    bytes += 12 + stringBound(node.id) + stringBound(node.cluster) + stringBound(node.userAgentName) + stringBound(node.userAgentVersion);
    for (const feature of node.clientFeatures) bytes += stringBound(feature);
  }
  if (error !== undefined) {
    bytes += 24 + stringBound(error.message);
    for (const d of error.details) bytes += 12 + stringBound(d.typeUrl) + d.value.byteLength;
  }
  return bytes;
}

/**
 * How many resources (and removals) a frame carries, looking inside batches,
 * leaving out responses of type `except`; for metrics and tests.
 */
export function resourcesIn(frame: Message, except?: string): number {
  const v = frame.value;
  if (v.case === "deltaResponse") return v.value.typeUrl === except ? 0 : v.value.resources.length + v.value.removedResources.length;
  if (v.case === "response") return v.value.typeUrl === except ? 0 : v.value.resources.length;
  if (v.case === "batch") return v.value.frames.reduce((sum, inner) => sum + resourcesIn(inner, except), 0);
  return 0;
}

/** The lane a frame travels on, as metrics count it (a batch is counted by its frames). */
export function laneOf(frame: Message): Lane | "control" {
  switch (frame.value.case) {
    case "request":
    case "deltaRequest":
      return "requests";
    case "response":
    case "deltaResponse":
      return "responses";
    case "call":
      return callLane(frame.value.value);
    default:
      return "control";
  }
}

/** The lane a call frame travels on: the caller's frames with requests, the callee's with responses. */
export function callLane(call: Call): Lane {
  const kind = call.kind.case;
  return kind === "open" || kind === "cancel" || kind === "credit" ? "requests" : "responses";
}

/**
 * Reports `frame` to `count` as metrics see it: a batch as each frame it
 * holds, every frame with its size as the mux accounts it (the cheap upper
 * bound of {@link frameSizeBound} where there is one, else the encoded size).
 */
export function countFrame(frame: Message, count: (lane: Lane | "control", bytes: number) => void): void {
  if (frame.value.case === "batch") {
    for (const inner of frame.value.value.frames) countFrame(inner, count);
    return;
  }
  count(laneOf(frame), frameSizeBound(frame) ?? toBinary(MessageSchema, frame).byteLength);
}

/** What every message inside a data frame and every map entry adds to its credit size. */
const MESSAGE_CREDIT_BYTES = 8;

/**
 * The credit size of a frame: what it takes from its lane's byte window.
 * Both sides compute it from the frame's fields alone, without encoding it
 * (encoding a 4 MiB frame again costs milliseconds): 8 bytes for every
 * message it holds (itself and every nested message, repeated elements
 * included) and every map entry, plus the length of every string (in UTF-16
 * code units, map keys included), every `bytes` field and every unknown
 * field's data. Numbers and booleans add nothing (the per-message bytes
 * cover them). It counts everything a peer can make large, so a receiver's
 * buffered bytes follow the memory its buffers hold; it is not the encoded
 * size (see docs/protocol.md, "Flow control").
 */
export function creditSize(frame: Message): number {
  return creditOf(frame);
}

function creditOf(value: unknown): number {
  if (typeof value === "string") return value.length;
  if (typeof value !== "object" || value === null) return 0;
  if (value instanceof Uint8Array) return value.byteLength;
  if (Array.isArray(value)) {
    let bytes = 0;
    for (const item of value) bytes += creditOf(item);
    return bytes;
  }
  const record = value as Record<string, unknown>;
  if (typeof record.$typeName === "string") {
    let bytes = MESSAGE_CREDIT_BYTES;
    for (const key of Object.keys(record)) {
      if (key === "$typeName") continue;
      if (key === "$unknown") bytes += unknownBytes(record[key]);
      else bytes += creditOf(record[key]);
    }
    return bytes;
  }
  // A oneof: only its value counts.
  if ("case" in record && Object.keys(record).length <= 2 && ("value" in record || record.case === undefined)) return creditOf(record.value);
  // A map: every entry counts.
  let bytes = 0;
  for (const key of Object.keys(record)) bytes += MESSAGE_CREDIT_BYTES + key.length + creditOf(record[key]);
  return bytes;
}

function unknownBytes(fields: unknown): number {
  if (!Array.isArray(fields)) return 0;
  let bytes = 0;
  for (const field of fields as { data?: unknown }[]) if (field.data instanceof Uint8Array) bytes += MESSAGE_CREDIT_BYTES + field.data.byteLength;
  return bytes;
}
