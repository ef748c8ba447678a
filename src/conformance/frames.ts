/**
 * The frames the kit writes, built from the schema (no session logic, so
 * the kit can write what a conforming side never would).
 *
 * @module
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  type GoAwayReason,
  HelloSchema,
  FrameSchema,
  type Frame,
} from "../gen/kds/mux/v1/mux_pb.ts";
import {
  DeltaDiscoveryRequestSchema,
  DeltaDiscoveryResponseSchema,
  DiscoveryRequestSchema,
  type DeltaDiscoveryRequest,
  type DiscoveryRequest,
} from "../gen/kds/v1/discovery_pb.ts";
import { KdsError } from "../errors.ts";
import { KIND_CATALOG_TYPE_URL } from "../sync/kind-catalog.ts";
import { encodedLength } from "./conversation.ts";

/** The protocol version the kit speaks and expects (docs/protocol.md, Changelog). */
export const KIT_PROTOCOL_VERSION = 2;

/** The catalog's type URL. */
export const CATALOG_TYPE = KIND_CATALOG_TYPE_URL;

/** A type URL no side serves. */
export const UNKNOWN_TYPE = "type.googleapis.com/kds.conformance.v1.NoSuchKind";

/** The kit's hello: generous defaults, overridden by `init`. */
export function hello(peerId: string, init: MessageInitShape<typeof HelloSchema> = {}): Frame {
  const value = create(HelloSchema, {
    protocolVersion: KIT_PROTOCOL_VERSION,
    peerId,
    requestWindow: 64,
    responseWindow: 64,
    requestWindowBytes: 8 << 20,
    responseWindowBytes: 8 << 20,
    maxMessageBytes: 8 << 20,
    heartbeatIntervalMs: 600_000,
    heartbeatTimeoutMs: 1_200_000,
    ...init,
  });
  return create(FrameSchema, { value: { case: "hello", value } });
}

/** A ping with `id`. */
export function ping(id: bigint): Frame {
  return create(FrameSchema, { value: { case: "ping", value: { id } } });
}

/** A pong answering `id`. */
export function pong(id: bigint): Frame {
  return create(FrameSchema, { value: { case: "pong", value: { id } } });
}

/** A window update granting `requests`/`responses` frames and bytes. */
export function windowUpdate(
  requests: number,
  responses: number,
  requestBytes: number,
  responseBytes: number,
): Frame {
  return create(FrameSchema, {
    value: { case: "windowUpdate", value: { requests, responses, requestBytes, responseBytes } },
  });
}

/** A goaway. */
export function goaway(reason: GoAwayReason, message: string): Frame {
  return create(FrameSchema, { value: { case: "goaway", value: { reason, message } } });
}

/** A SotW request frame. */
export function sotwRequest(init: MessageInitShape<typeof DiscoveryRequestSchema>): Frame {
  return create(FrameSchema, {
    value: { case: "request", value: create(DiscoveryRequestSchema, init) },
  });
}

/** A delta request frame. */
export function deltaRequest(init: MessageInitShape<typeof DeltaDiscoveryRequestSchema>): Frame {
  return create(FrameSchema, {
    value: { case: "deltaRequest", value: create(DeltaDiscoveryRequestSchema, init) },
  });
}

/** The SotW request for the catalog a zone sends first. */
export function catalogRequest(zone: string, nonce = "", version = ""): Frame {
  return sotwRequest({
    typeUrl: CATALOG_TYPE,
    responseNonce: nonce,
    versionInfo: version,
    node: { id: zone, cluster: "zone", userAgentName: "kds-mux-conformance" },
  });
}

/**
 * A catalog request (an ACK of a nonce that is stale, which a server
 * ignores) whose encoded length is exactly `bytes`; its node's
 * user_agent_name carries the padding. Throws when no such frame exists
 * (below about 60 bytes).
 */
export function paddedRequest(bytes: number, tag: string): Frame {
  const base = (pad: number): Frame =>
    sotwRequest({
      typeUrl: CATALOG_TYPE,
      responseNonce: `stale-${tag}`,
      node: { id: "conformance", userAgentName: "p".repeat(pad) },
    });
  const empty = encodedLength(base(0));
  // Each step of the varint length prefixes adds a byte or two: search the few candidates around the estimate.
  for (let pad = Math.max(0, bytes - empty - 12); pad <= bytes - empty; pad++) {
    const frame = base(pad);
    if (encodedLength(frame) === bytes) return frame;
  }
  throw new KdsError(
    "invalid_argument",
    `no padded request of exactly ${bytes} bytes: ask for at least ${empty} bytes`,
  );
}

/**
 * A delta response of `typeUrl` whose encoded length is exactly `bytes`:
 * it removes one resource the receiver does not hold (work for its store,
 * nothing changed), and its system_version_info carries the padding.
 */
export function paddedResponse(typeUrl: string, bytes: number, tag: string): Frame {
  const base = (pad: number): Frame =>
    create(FrameSchema, {
      value: {
        case: "deltaResponse",
        value: create(DeltaDiscoveryResponseSchema, {
          typeUrl,
          nonce: `conformance-${tag}`,
          systemVersionInfo: "p".repeat(pad),
          removedResources: [`conformance-absent-${tag}`],
        }),
      },
    });
  const empty = encodedLength(base(0));
  for (let pad = Math.max(0, bytes - empty - 12); pad <= bytes - empty; pad++) {
    const frame = base(pad);
    if (encodedLength(frame) === bytes) return frame;
  }
  throw new KdsError(
    "invalid_argument",
    `no padded response of exactly ${bytes} bytes: ask for at least ${empty} bytes`,
  );
}

/** The request inside a request frame, SotW or delta. */
export function requestOf(frame: Frame): DiscoveryRequest | DeltaDiscoveryRequest | undefined {
  return frame.value.case === "request" || frame.value.case === "deltaRequest"
    ? frame.value.value
    : undefined;
}
