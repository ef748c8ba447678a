/**
 * A Connect `Transport` whose calls travel as reverse calls inside a mux
 * session (see {@link CallEndpoint}). It speaks the Connect protocol in
 * binary, uncompressed (the session's transport already compresses).
 *
 * @module
 */
import type { Transport } from "@connectrpc/connect";
import type { UniversalClientFn } from "@connectrpc/connect/protocol";
import { createTransport } from "@connectrpc/connect/protocol-connect";

/** Options of {@link reverseCallTransport}. */
export interface ReverseCallTransportOptions {
  /** Largest message read or written, in bytes. Default 4 MiB. */
  readonly maxMessageBytes?: number;
  /** Deadline of every call without its own `timeoutMs`. Default none. */
  readonly defaultTimeoutMs?: number;
}

/**
 * A Connect transport over `httpClient`: usually a session's
 * `callEndpoint(session).httpClient`, or one that finds the session at each
 * call (`GlobalServer.zoneTransport`).
 */
export function reverseCallTransport(
  httpClient: UniversalClientFn,
  options: ReverseCallTransportOptions = {},
): Transport {
  const maxBytes = options.maxMessageBytes ?? 4 * 1024 * 1024;
  return createTransport({
    httpClient,
    // Never dialed: the path alone travels, inside the session.
    baseUrl: "http://kds-mux.invalid",
    useBinaryFormat: true,
    interceptors: [],
    acceptCompression: [],
    sendCompression: null,
    compressMinBytes: Number.MAX_SAFE_INTEGER,
    readMaxBytes: maxBytes,
    writeMaxBytes: maxBytes,
    defaultTimeoutMs: options.defaultTimeoutMs,
  });
}
