/**
 * The one error class of kds-mux: every error a caller can see is a
 * {@link KdsError} with a stable {@link KdsErrorCode}, a message that says what
 * happened and what to do next, and the underlying cause when there is one.
 *
 * @module
 */

/** Stable, machine-readable error codes. */
export type KdsErrorCode =
  /** A caller passed a bad option or argument. */
  | "invalid_argument"
  /** The peer broke the mux protocol (bad frame order, window overrun, ...). */
  | "protocol_error"
  /** The peer sent nothing for longer than the heartbeat timeout. */
  | "heartbeat_timeout"
  /** A frame could not be handed to the transport in time. */
  | "send_timeout"
  /** A message is larger than the peer accepts. */
  | "message_too_large"
  /** Too many sends are already waiting on one view. */
  | "send_queue_full"
  /** The session has ended; see the cause for why. */
  | "session_closed"
  /** The operation was cancelled through its AbortSignal. */
  | "aborted"
  /** A view already has a pending receive (one reader per view). */
  | "busy"
  /** The transport failed (connection refused, reset, ...). */
  | "transport"
  /** The zone did not name itself in the `client-id` header. */
  | "missing_client_id"
  /** The global does not know the zone. */
  | "zone_not_registered"
  /** The zone is registered but disabled. */
  | "zone_disabled"
  /** A resource type is not registered. */
  | "unknown_type"
  /** A resource or its spec is invalid. */
  | "invalid_resource"
  /** A write expected another version of the resource (optimistic concurrency). */
  | "conflict"
  /** The resource does not exist. */
  | "not_found";

/** Options of {@link KdsError}. */
export interface KdsErrorOptions {
  /** The underlying error, kept for diagnosis. */
  cause?: unknown;
}

/** The error class of kds-mux. */
export class KdsError extends Error {
  /** Machine-readable code; stable across releases. */
  readonly code: KdsErrorCode;

  /**
   * @param code - stable error code
   * @param message - what happened and what to do next
   * @param options - the underlying cause, if any
   */
  constructor(code: KdsErrorCode, message: string, options?: KdsErrorOptions) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "KdsError";
    this.code = code;
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
  return new KdsError("aborted", `${what} was cancelled through its AbortSignal`, { cause: reason });
}
