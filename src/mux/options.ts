/**
 * Session options, their defaults, and their validation.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import { definedOnly } from "../util/defined.ts";
import {
  FEATURES,
  MAX_SOFTWARE_VERSION,
  MIN_PROTOCOL_VERSION,
  PROTOCOL_VERSION,
  SOFTWARE_VERSION,
  type Feature,
  type VersionRange,
} from "./negotiation.ts";
import { activeTracer } from "../observe/tracing.ts";

/** The features offered by default without a tracing SDK: every one but `trace-context`. */
const UNTRACED_FEATURES: readonly Feature[] = Object.freeze(
  FEATURES.filter((f) => f !== "trace-context"),
);

/** Tunables of a mux session. Every field has a documented default. */
export interface SessionOptions {
  /**
   * How many requests the peer may send before this side's server view has
   * consumed some (the request lane's window). Default 64.
   */
  requestWindow?: number;
  /**
   * How many responses the peer may send before this side's client view has
   * consumed some (the response lane's window). Default 64.
   */
  responseWindow?: number;
  /** The largest frame this side accepts, in bytes. Default 4 MiB. */
  maxMessageBytes?: number;
  /**
   * How many bytes of requests (by credit size, see `creditSize`) the peer
   * may send before this side's server view has consumed some: the request
   * lane's byte window, and the most this side buffers of it. At least
   * `maxMessageBytes`. Default 8 MiB, or `maxMessageBytes` when that is larger.
   */
  requestWindowBytes?: number;
  /**
   * How many bytes of responses the peer may send before this side's client
   * view has consumed some; as {@link SessionOptions.requestWindowBytes}.
   * Default 8 MiB, or `maxMessageBytes` when that is larger. The two byte
   * windows together are the session's ceiling on buffered inbound bytes
   * (16 MiB by default).
   */
  responseWindowBytes?: number;
  /**
   * How long the peer may stay silent before this side pings it: a side pings
   * when it has heard no frame from the peer for this long (the peer's own
   * pings count), and at least every four of these to refresh its round-trip
   * time; never more than once per interval. Default 15 s.
   */
  heartbeatIntervalMs?: number;
  /** End the session after hearing nothing from the peer for this long. Default 60 s. */
  heartbeatTimeoutMs?: number;
  /**
   * End the session when a frame waits longer than this to be handed to the
   * transport (the peer does not grant window, or the transport is stuck).
   * Default 60 s.
   */
  sendTimeoutMs?: number;
  /** How many sends may wait on one lane before `send` fails fast. Default 1024. */
  maxQueuedSends?: number;
  /** After this side ends the session, how long to wait for the peer to close before cutting the transport. Default 2 s. */
  closeGraceMs?: number;
  /**
   * How long to wait for the peer's hello before failing, counted from when
   * the transport opened the stream (the session's `attach`). Default 30 s.
   */
  handshakeTimeoutMs?: number;
  /**
   * How long the transport may take to open the stream, from the session's
   * creation until it hands over the peer's frames (`attach`), before the
   * session fails with `handshake_timeout`. A zone's transport opens the
   * stream once the global has accepted its connection and answered the
   * request (the gRPC response headers, which a kds-mux global sends as soon
   * as it admits the stream); while a global works through a reconnect storm
   * a connection may wait in its listen queue that long, and giving up sooner
   * only dials again at the back of the queue. Default 120 s. (A global's
   * session is opened as it is created.)
   */
  openTimeoutMs?: number;
  /**
   * The mux protocol versions this side offers in its hello: a part of
   * {@link MIN_PROTOCOL_VERSION} to {@link PROTOCOL_VERSION}. Default all
   * of it. Narrowing it to `{ min: 2, max: 2 }` makes this side speak as a
   * version 2 peer (for tests of version skew, or a fleet that must not use
   * version 3 yet).
   */
  protocolVersions?: VersionRange;
  /**
   * The features this side offers (and so may use): some of {@link FEATURES}.
   * Default all of them, but `trace-context` only while a tracing SDK is
   * registered (`@opentelemetry/api`'s global tracer provider) when the
   * session is created. A session uses only those both sides offer.
   */
  features?: readonly Feature[];
  /**
   * The software version this side names in its hello (version 3), at most
   * 128 characters. Default `kds-mux/<this release>` ({@link SOFTWARE_VERSION}).
   */
  softwareVersion?: string;
}

/** The options that are numbers, each with a range. */
type NumericOption = Exclude<
  keyof SessionOptions,
  "protocolVersions" | "features" | "softwareVersion"
>;

/** {@link SessionOptions} with every default filled in. */
export type ResolvedSessionOptions = Required<SessionOptions>;

/** The defaults of {@link SessionOptions}. */
export const defaultSessionOptions: ResolvedSessionOptions = Object.freeze({
  requestWindow: 64,
  responseWindow: 64,
  maxMessageBytes: 4 * 1024 * 1024,
  requestWindowBytes: 8 * 1024 * 1024,
  responseWindowBytes: 8 * 1024 * 1024,
  heartbeatIntervalMs: 15_000,
  heartbeatTimeoutMs: 60_000,
  sendTimeoutMs: 60_000,
  maxQueuedSends: 1024,
  closeGraceMs: 2_000,
  handshakeTimeoutMs: 30_000,
  openTimeoutMs: 120_000,
  protocolVersions: Object.freeze({ min: MIN_PROTOCOL_VERSION, max: PROTOCOL_VERSION }),
  features: UNTRACED_FEATURES,
  softwareVersion: SOFTWARE_VERSION,
});

/** The largest window either side may grant per lane (in its options or its hello). */
export const MAX_WINDOW = 65_536;

/** The largest byte window either side may grant per lane (in its options or its hello): 1 GiB. */
export const MAX_WINDOW_BYTES = 2 ** 30;

const limits: Record<NumericOption, [min: number, max: number]> = {
  requestWindow: [1, MAX_WINDOW],
  responseWindow: [1, MAX_WINDOW],
  maxMessageBytes: [1024, 2 ** 31 - 1],
  requestWindowBytes: [1024, MAX_WINDOW_BYTES],
  responseWindowBytes: [1024, MAX_WINDOW_BYTES],
  heartbeatIntervalMs: [1, 2 ** 31 - 1],
  heartbeatTimeoutMs: [1, 2 ** 31 - 1],
  sendTimeoutMs: [1, 2 ** 31 - 1],
  maxQueuedSends: [1, 1_000_000],
  closeGraceMs: [0, 2 ** 31 - 1],
  handshakeTimeoutMs: [1, 2 ** 31 - 1],
  openTimeoutMs: [1, 2 ** 31 - 1],
};

/** Fills in defaults and checks ranges; throws `invalid_argument` naming the bad option. */
export function resolveSessionOptions(options: SessionOptions = {}): ResolvedSessionOptions {
  const given: SessionOptions = definedOnly(options);
  const resolved = { ...defaultSessionOptions, ...given };
  if (given.features === undefined && activeTracer() !== undefined) resolved.features = FEATURES;
  // A larger largest frame raises the default byte windows with it, so one such frame always fits.
  if (Number.isInteger(resolved.maxMessageBytes)) {
    if (given.requestWindowBytes === undefined)
      resolved.requestWindowBytes = Math.max(resolved.requestWindowBytes, resolved.maxMessageBytes);
    if (given.responseWindowBytes === undefined)
      resolved.responseWindowBytes = Math.max(
        resolved.responseWindowBytes,
        resolved.maxMessageBytes,
      );
  }
  for (const [key, [min, max]] of Object.entries(limits) as [NumericOption, [number, number]][]) {
    const value = resolved[key];
    if (!Number.isInteger(value) || value < min || value > max) {
      throw new KdsError(
        "invalid_argument",
        `session option ${key} must be an integer from ${min} to ${max}, got ${String(value)}`,
      );
    }
  }
  if (resolved.heartbeatTimeoutMs <= resolved.heartbeatIntervalMs) {
    throw new KdsError(
      "invalid_argument",
      `session option heartbeatTimeoutMs (${resolved.heartbeatTimeoutMs}) must be larger than heartbeatIntervalMs (${resolved.heartbeatIntervalMs}); three intervals or more is a good choice`,
    );
  }
  for (const key of ["requestWindowBytes", "responseWindowBytes"] as const) {
    if (resolved[key] < resolved.maxMessageBytes) {
      throw new KdsError(
        "invalid_argument",
        `session option ${key} (${resolved[key]}) must be at least maxMessageBytes (${resolved.maxMessageBytes}), so that the largest frame fits in the window; raise ${key} or lower maxMessageBytes`,
      );
    }
  }
  checkNegotiation(resolved);
  return resolved;
}

/** Checks the options that go into the hello's negotiation fields. */
function checkNegotiation(resolved: ResolvedSessionOptions): void {
  const { min, max } = resolved.protocolVersions;
  if (
    !Number.isInteger(min) ||
    !Number.isInteger(max) ||
    min < MIN_PROTOCOL_VERSION ||
    max > PROTOCOL_VERSION ||
    min > max
  ) {
    throw new KdsError(
      "invalid_argument",
      `session option protocolVersions must be a range within ${MIN_PROTOCOL_VERSION} to ${PROTOCOL_VERSION} (the versions this release speaks) with min <= max, got ${String(min)} to ${String(max)}`,
    );
  }
  const unknown = resolved.features.filter((f) => !(FEATURES as readonly string[]).includes(f));
  if (unknown.length > 0)
    throw new KdsError(
      "invalid_argument",
      `session option features may hold only ${FEATURES.join(", ")}; unknown: ${unknown.join(", ")}`,
    );
  const software = resolved.softwareVersion;
  if (typeof software !== "string" || software === "" || software.length > MAX_SOFTWARE_VERSION) {
    throw new KdsError(
      "invalid_argument",
      `session option softwareVersion must be 1 to ${MAX_SOFTWARE_VERSION} characters, got ${JSON.stringify(software)}`,
    );
  }
}
