/**
 * The payloads the two views of a session carry, and how frames are built and
 * classified. A request always goes to the receiver's server view, a response
 * always to the receiver's client view: the frame's kind alone routes it.
 *
 * @module
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { GoAwayReason, FrameSchema, type Call, type Frame } from "../gen/kds/mux/v1/mux_pb.ts";
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

/**
 * Wraps a request in a mux frame. The frame is the object `create` would
 * make around a message, written out: every ACK of every zone is wrapped,
 * and the reflective `create` cost more than the rest of the wrapping.
 */
export function requestFrame(request: MuxRequest): Frame {
  return request.$typeName === "kds.v1.DiscoveryRequest"
    ? { $typeName: "kds.mux.v1.Frame", value: { case: "request", value: request } }
    : { $typeName: "kds.mux.v1.Frame", value: { case: "deltaRequest", value: request } };
}

/** Wraps a response in a mux frame (written out, as {@link requestFrame}: every response to every zone is wrapped). */
export function responseFrame(response: MuxResponse): Frame {
  return response.$typeName === "kds.v1.DiscoveryResponse"
    ? { $typeName: "kds.mux.v1.Frame", value: { case: "response", value: response } }
    : { $typeName: "kds.mux.v1.Frame", value: { case: "deltaResponse", value: response } };
}

/** The oneof of a frame in its init form (plain objects accepted for nested messages). */
export type FrameValueInit = NonNullable<MessageInitShape<typeof FrameSchema>["value"]>;

/** Builds a control frame from its oneof case and value. */
export function controlFrame(value: FrameValueInit): Frame {
  return create(FrameSchema, { value });
}

/** Human-readable name of a frame's kind, for error messages. */
export function frameKind(frame: Frame): string {
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
  reconnect: GoAwayReason.RECONNECT,
  token_expired: GoAwayReason.TOKEN_EXPIRED,
} as const;

/**
 * How many resources (and removals) a frame carries, looking inside batches,
 * leaving out responses of type `except`; for metrics and tests.
 */
export function resourcesIn(frame: Frame, except?: string): number {
  const v = frame.value;
  if (v.case === "deltaResponse")
    return v.value.typeUrl === except
      ? 0
      : v.value.resources.length + v.value.removedResources.length;
  if (v.case === "response") return v.value.typeUrl === except ? 0 : v.value.resources.length;
  if (v.case === "batch")
    return v.value.frames.reduce((sum, inner) => sum + resourcesIn(inner, except), 0);
  return 0;
}

/** The lane a frame travels on, as metrics count it (a batch is counted by its frames). */
export function laneOf(frame: Frame): Lane | "control" {
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
 * A delta ACK naming nothing rejected: the message `create` makes from a
 * type URL and a response nonce, written out (every zone sends one for every
 * response it applies, and `create` walks the schema each time; the frame
 * reader makes the same from a received plain ACK).
 */
export function plainAck(typeUrl: string, responseNonce: string): DeltaDiscoveryRequest {
  return {
    $typeName: "kds.v1.DeltaDiscoveryRequest",
    typeUrl,
    resourceNamesSubscribe: [],
    resourceNamesUnsubscribe: [],
    initialResourceVersions: {},
    responseNonce,
  };
}
