/**
 * The rules the conformance kit checks, each named and tied to the section
 * of docs/protocol.md it comes from.
 *
 * @module
 */

/** The anchor of a section of docs/protocol.md. */
export type Section =
  | "headers"
  | "admission"
  | "handshake"
  | "flow-control-windows-per-lane-in-frames-and-bytes"
  | "heartbeats"
  | "how-a-session-ends"
  | "the-status-a-stream-ends-with"
  | "resources-on-the-wire"
  | "rules"
  | "sync-on-top";

/** One rule: its name (stable, what tests and users grep for), its section and what it demands. */
export interface Rule {
  readonly name: string;
  readonly section: Section;
  readonly text: string;
}

const FLOW: Section = "flow-control-windows-per-lane-in-frames-and-bytes";

/** Every rule, by name. */
export const RULES = {
  "headers.client-id": {
    section: "headers",
    text: "a zone names itself in client-id: 1 to 63 lower-case letters, digits and -",
  },
  "admission.missing-client-id": {
    section: "admission",
    text: "a call without client-id is refused: InvalidArgument, kds-error-code missing_client_id",
  },
  "admission.invalid-client-id": {
    section: "admission",
    text: "a client-id that is not a zone name is refused: InvalidArgument, kds-error-code invalid_argument",
  },
  "admission.unauthenticated": {
    section: "admission",
    text: "a call without a token is refused: Unauthenticated, kds-error-code unauthenticated",
  },
  "admission.permission-denied": {
    section: "admission",
    text: "a token of another zone is refused: PermissionDenied, kds-error-code permission_denied",
  },
  "admission.not-registered": {
    section: "admission",
    text: "an unregistered zone is refused: FailedPrecondition, kds-error-code zone_not_registered",
  },
  "hello.first-frame": { section: "handshake", text: "each side's first frame is a hello" },
  "hello.version": {
    section: "handshake",
    text: "protocol_version is 2, or a range (protocol_version to max_protocol_version) that holds 2",
  },
  "hello.windows": {
    section: "handshake",
    text: "request_window and response_window are each 1 to 65,536",
  },
  "hello.byte-windows": {
    section: "handshake",
    text: "request_window_bytes and response_window_bytes MUST each be 1,024 to 2^30",
  },
  "hello.max-message-bytes": { section: "handshake", text: "max_message_bytes is at least 1,024" },
  "hello.peer-id": {
    section: "handshake",
    text: "peer_id names the sender; a zone's equals its client-id",
  },
  "hello.no-data-before-peer-hello": {
    section: "handshake",
    text: "a side sends no data frame before it has received the peer's hello",
  },
  "refuse.version": {
    section: "handshake",
    text: "a hello of another protocol_version is a protocol error naming both versions",
  },
  "refuse.byte-windows": {
    section: "handshake",
    text: "a hello without byte windows is a protocol error",
  },
  "refuse.peer-id": {
    section: "handshake",
    text: "a zone hello whose peer_id is not the client-id is a protocol error",
  },
  "refuse.first-frame": {
    section: "handshake",
    text: "a first frame other than a hello is a protocol error",
  },
  "refuse.second-hello": { section: "handshake", text: "a second hello is a protocol error" },
  "ping.pong": { section: "heartbeats", text: "a ping is answered at once by a pong with its id" },
  "flow.within-window": {
    section: FLOW,
    text: "a sender MUST NOT send past the credit granted, in frames or in bytes (each frame's encoded length)",
  },
  "flow.returns-credit": {
    section: FLOW,
    text: "a receiver returns the credit of what it consumed with window updates",
  },
  "overrun.frame": {
    section: FLOW,
    text: "a frame past the frame credit granted is a PROTOCOL_ERROR naming the window",
  },
  "overrun.byte": {
    section: FLOW,
    text: "a frame one byte past the byte credit granted is a PROTOCOL_ERROR naming the window",
  },
  "size.max-message-bytes": {
    section: "handshake",
    text: "a frame larger than the receiver's max_message_bytes is a protocol error",
  },
  "size.elements": {
    section: FLOW,
    text: "a frame MUST NOT hold more than 2^19 elements; one that does is a protocol error",
  },
  "unknown-type": {
    section: "rules",
    text: "a request for a type the side does not serve ends the session with goaway PROTOCOL_ERROR (the global: InvalidArgument, kds-error-code unknown_type)",
  },
  "catalog.response": {
    section: "sync-on-top",
    text: "the global answers the catalog request with one resource named kinds, a version and a nonce",
  },
  "nonce.unique": {
    section: "rules",
    text: "every response of a type carries a nonce not used before on the stream",
  },
  "ack.echo": {
    section: "rules",
    text: "an ACK echoes the response's nonce (and, in SotW, its version_info)",
  },
  "nack.error-detail": {
    section: "rules",
    text: "a NACK carries the nonce and error_detail with code 3 (INVALID_ARGUMENT) and the reason",
  },
  "nack.catalog-ends-session": {
    section: "sync-on-top",
    text: "a zone's NACK of the catalog makes the global end the session with a goaway carrying the reason",
  },
  "resume.initial-versions": {
    section: "rules",
    text: "a delta server sends only what differs from initial_resource_versions",
  },
  "status.in-trailers": {
    section: "the-status-a-stream-ends-with",
    text: "a stream's status comes in trailers: a refused stream is answered Trailers-Only (one HEADERS frame with END_STREAM holding grpc-status, grpc-message and kds-error-code), never in response headers that leave the stream open",
  },
  "window.zero": {
    section: FLOW,
    text: "a window update granting nothing is legal: the session goes on",
  },
  "refuse.window-cap": {
    section: FLOW,
    text: "a window update that brings a lane's unused credit over 2^31 frames or 2^40 bytes is a protocol error",
  },
  "nonce.first-request": {
    section: "rules",
    text: "the first request of a type on a stream is answered whatever its response_nonce (a nonce of an earlier stream)",
  },
  "nonce.stale": {
    section: "rules",
    text: "an answer whose response_nonce names no response of the type in flight is stale: no response, no NACK, and the session goes on",
  },
  "goaway.graceful": {
    section: "the-status-a-stream-ends-with",
    text: "a session the zone ends with goaway SHUTDOWN ends the call OK, without kds-error-code",
  },
  "goaway.protocol-error-status": {
    section: "the-status-a-stream-ends-with",
    text: "a session ended for a protocol error ends with goaway PROTOCOL_ERROR, then InvalidArgument and kds-error-code protocol_error",
  },
} as const satisfies Record<string, Omit<Rule, "name">>;

/** The name of a rule the kit checks. */
export type RuleName = keyof typeof RULES;

/** The rule named `name`. */
export function rule(name: RuleName): Rule {
  return { name, ...RULES[name] };
}
