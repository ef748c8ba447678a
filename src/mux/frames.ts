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
      for (const [k, version] of Object.entries(r.initialResourceVersions)) bytes += 12 + stringBound(k) + stringBound(version);
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
