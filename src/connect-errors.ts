/**
 * Carrying a {@link KdsError} across Connect: the global throws a
 * `ConnectError` with the matching status code and the kds code in the
 * `kds-error-code` header; the zone turns it back into the same `KdsError`.
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { KDS_ERROR_CODES, KdsError, type KdsErrorCode } from "./errors.ts";

/** Response header that carries the {@link KdsErrorCode} of a rejected stream. */
export const KDS_ERROR_CODE_HEADER = "kds-error-code";

/**
 * Response header (error metadata, next to {@link KDS_ERROR_CODE_HEADER})
 * that tells a refused zone when to try again: a non-negative decimal
 * integer of milliseconds. The global sets it on `overloaded` refusals.
 */
export const KDS_RETRY_AFTER_MS_HEADER = "kds-retry-after-ms";

/** The longest retry hint read from a peer (a larger value is read as this): one hour. */
export const MAX_RETRY_AFTER_MS = 3_600_000;

const connectCodes: Partial<Record<KdsErrorCode, Code>> = {
  invalid_argument: Code.InvalidArgument,
  missing_client_id: Code.InvalidArgument,
  zone_not_registered: Code.FailedPrecondition,
  zone_disabled: Code.FailedPrecondition,
  unauthenticated: Code.Unauthenticated,
  permission_denied: Code.PermissionDenied,
  protocol_error: Code.InvalidArgument,
  heartbeat_timeout: Code.Unavailable,
  send_timeout: Code.Unavailable,
  handshake_timeout: Code.DeadlineExceeded,
  zone_revoked: Code.FailedPrecondition,
  token_expired: Code.Unauthenticated,
  message_too_large: Code.ResourceExhausted,
  resource_exhausted: Code.ResourceExhausted,
  aborted: Code.Canceled,
  unknown_type: Code.InvalidArgument,
  invalid_resource: Code.InvalidArgument,
  conflict: Code.Aborted,
  not_found: Code.NotFound,
  store_unavailable: Code.Unavailable,
  store_compacted: Code.Aborted,
  zone_offline: Code.Unavailable,
  kinds_mismatch: Code.FailedPrecondition,
  overloaded: Code.ResourceExhausted,
  not_leader: Code.FailedPrecondition,
};

const kdsCodes: ReadonlySet<string> = new Set<string>(KDS_ERROR_CODES);

/** Turns any error into a `ConnectError` a Connect handler can throw. */
export function toConnectError(error: unknown): ConnectError {
  if (error instanceof ConnectError) return error;
  if (error instanceof KdsError) {
    const metadata: Record<string, string> = { [KDS_ERROR_CODE_HEADER]: error.code };
    if (error.retryAfterMs !== undefined)
      metadata[KDS_RETRY_AFTER_MS_HEADER] = String(error.retryAfterMs);
    return new ConnectError(
      error.message,
      connectCodes[error.code] ?? Code.Internal,
      metadata,
      undefined,
      error,
    );
  }
  return ConnectError.from(error, Code.Internal);
}

/** Turns any error from a Connect call into a {@link KdsError}. */
export function fromConnectError(error: unknown, target: string): KdsError {
  if (error instanceof KdsError) return error;
  const connectError = ConnectError.from(error);
  const code = connectError.metadata.get(KDS_ERROR_CODE_HEADER);
  if (code !== null && kdsCodes.has(code))
    return new KdsError(code as KdsErrorCode, connectError.rawMessage, {
      cause: connectError,
      retryAfterMs: retryAfter(connectError.metadata.get(KDS_RETRY_AFTER_MS_HEADER)),
    });
  if (connectError.code === Code.Canceled)
    return new KdsError("aborted", `the stream to ${target} was cancelled`, {
      cause: connectError,
    });
  return new KdsError(
    "transport",
    `the stream to ${target} failed: ${connectError.message}; check that the global is running and reachable at that address, with a matching protocol (gRPC, gRPC-web or Connect over HTTP/2)`,
    { cause: connectError },
  );
}

/**
 * The milliseconds a {@link KDS_RETRY_AFTER_MS_HEADER} value asks for, or
 * undefined when it is absent or not a non-negative decimal integer (a
 * malformed hint is ignored: the zone falls back to its backoff). Values
 * above {@link MAX_RETRY_AFTER_MS} read as that.
 */
export function retryAfter(value: string | null | undefined): number | undefined {
  if (value === null || value === undefined) return undefined;
  const text = value.trim();
  if (!/^[0-9]{1,15}$/.test(text)) return undefined;
  return Math.min(Number(text), MAX_RETRY_AFTER_MS);
}
