/**
 * The one error class of kds-mux: every error a caller can see is a
 * {@link KdsError} with a stable {@link KdsErrorCode}, a message that says what
 * happened and what to do next, and the underlying cause when there is one.
 *
 * @module
 */

/**
 * Every stable, machine-readable error code:
 * - `invalid_argument`: a caller passed a bad option or argument;
 * - `protocol_error`: the peer broke the mux protocol (bad frame order, window overrun, ...);
 * - `heartbeat_timeout`: the peer sent nothing for longer than the heartbeat timeout;
 * - `send_timeout`: a frame could not be handed to the transport in time;
 * - `message_too_large`: a message is larger than the peer accepts;
 * - `send_queue_full`: too many sends already wait on one view;
 * - `resource_exhausted`: a peer made this process buffer more than its memory budget allows;
 * - `session_closed`: the session has ended (the cause says why);
 * - `aborted`: the operation was cancelled through its AbortSignal;
 * - `busy`: a view already has a pending receive (one reader per view);
 * - `transport`: the transport failed (connection refused, reset, ...);
 * - `missing_client_id`: the zone did not name itself in the `client-id` header;
 * - `zone_not_registered`: the global does not know the zone;
 * - `zone_disabled`: the zone is registered but disabled;
 * - `unauthenticated`: no valid credential: a missing, malformed, forged, expired or revoked token, or an untrusted certificate;
 * - `permission_denied`: a valid credential that does not allow this (another zone's token, a read-only admin token writing);
 * - `unknown_type`: a resource type is not registered;
 * - `invalid_resource`: a resource or its spec is invalid;
 * - `conflict`: a write expected another version of the resource;
 * - `not_found`: the resource does not exist;
 * - `store_unavailable`: the store could not be reached or failed; retry later;
 * - `store_compacted`: a store's change feed no longer reaches back to the revision asked for; list again;
 * - `zone_offline`: a reverse call names a zone that has no session with the global;
 * - `kinds_mismatch`: a zone's kinds disagree with the global's (same kind, another message, direction or scope);
 * - `zone_revoked`: the global ended the zone's session because the zone was removed or disabled, or its credential was revoked;
 * - `token_expired`: the global ended the zone's session because the credential it was admitted with (zone token, client certificate) expired; renew it;
 * - `handshake_timeout`: the peer sent no hello within the handshake timeout;
 * - `overloaded`: the global already holds as many streams waiting for their hello as it allows; retry later;
 * - `not_leader`: this replica does not hold its zone's lease (a standby, or a leader whose term is over): the write was refused; send it to the leader.
 */
export const KDS_ERROR_CODES = [
  "invalid_argument",
  "protocol_error",
  "heartbeat_timeout",
  "send_timeout",
  "message_too_large",
  "send_queue_full",
  "resource_exhausted",
  "session_closed",
  "aborted",
  "busy",
  "transport",
  "missing_client_id",
  "zone_not_registered",
  "zone_disabled",
  "unauthenticated",
  "permission_denied",
  "unknown_type",
  "invalid_resource",
  "conflict",
  "not_found",
  "store_unavailable",
  "store_compacted",
  "zone_offline",
  "kinds_mismatch",
  "zone_revoked",
  "token_expired",
  "handshake_timeout",
  "overloaded",
  "not_leader",
] as const;

/** Stable, machine-readable error codes (see {@link KDS_ERROR_CODES}). */
export type KdsErrorCode = (typeof KDS_ERROR_CODES)[number];

/** Options of {@link KdsError}. */
export interface KdsErrorOptions {
  /** The underlying error, kept for diagnosis. */
  cause?: unknown;
  /** When the caller should try again, in milliseconds from now (see {@link KdsError.retryAfterMs}). */
  retryAfterMs?: number;
}

/** The error class of kds-mux. */
export class KdsError extends Error {
  /** Machine-readable code; stable across releases. */
  readonly code: KdsErrorCode;
  /**
   * When the caller should try again, in whole milliseconds from when the
   * error was raised; undefined when the error says nothing about it. The
   * global sets it on an `overloaded` refusal (the `kds-retry-after-ms`
   * header of docs/protocol.md), and the zone waits that long instead of
   * growing its backoff.
   */
  readonly retryAfterMs: number | undefined;

  /**
   * @param code - stable error code
   * @param message - what happened and what to do next
   * @param options - the underlying cause, and when to retry, if any
   */
  constructor(code: KdsErrorCode, message: string, options?: KdsErrorOptions) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "KdsError";
    this.code = code;
    const retry = options?.retryAfterMs;
    this.retryAfterMs =
      retry === undefined || !Number.isFinite(retry) ? undefined : Math.max(0, Math.round(retry));
  }

  /** True when `value` is a {@link KdsError}, optionally with the given code. */
  static is(value: unknown, code?: KdsErrorCode): value is KdsError {
    return value instanceof KdsError && (code === undefined || value.code === code);
  }
}

/**
 * The error an aborted operation rejects with: the signal's reason when it is
 * already a {@link KdsError}, otherwise an `aborted` error wrapping it.
 */
export function abortError(signal: AbortSignal, what: string): KdsError {
  const reason: unknown = signal.reason;
  if (reason instanceof KdsError) return reason;
  return new KdsError("aborted", `${what} was cancelled through its AbortSignal`, {
    cause: reason,
  });
}
