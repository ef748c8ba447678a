/**
 * Why a call to an HTTP/2 server got no answer, told from the error Node's
 * `net`, `tls` and `http2` (through connect-node) raised: the client never
 * connected (refused, no such host, timed out), or it connected and the
 * server then broke the session (an HTTP/2 GOAWAY or RST_STREAM with an
 * error code, a TLS alert, a connection closed before any answer, an answer
 * in another protocol). The two call for different checks: the address in
 * the first case, what serves it (its runtime, a proxy in between) in the
 * second.
 *
 * @module
 */

/** How a call failed before the server answered it. */
export type ConnectionFailure =
  | {
      /** The client never had a connection: check the address and that the server runs. */
      readonly kind: "not_connected";
      /** The system's reason, for example "connect ECONNREFUSED 127.0.0.1:5681". */
      readonly reason: string;
    }
  | {
      /** Connected, then the server ended the session or the stream without answering. */
      readonly kind: "broken";
      /**
       * What the server did, worded to follow "the server", for example
       * "ended the HTTP/2 session with GOAWAY PROTOCOL_ERROR (0x1) before
       * answering" or
       * "sent the TLS alert \"certificate required\"".
       */
      readonly how: string;
      /** True when the server closed the connection without a word (no GOAWAY, no alert). */
      readonly silent?: boolean;
      /**
       * What the answer shows the server does not speak: HTTP/2 (an
       * HTTP/1.1-only server or proxy), or TLS (a plaintext listener dialed
       * over https://); undefined when it does not tell.
       */
      readonly notSpoken?: "http2" | "tls";
    }
  | {
      /** Connected over TLS, but the client could not verify the server's certificate. */
      readonly kind: "untrusted";
      /** The verification error, for example "self-signed certificate". */
      readonly reason: string;
    };

/** System error codes of a connection that never opened. */
const NOT_CONNECTED: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EAI_NONAME",
  "EAI_FAIL",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "EHOSTDOWN",
  "ENETUNREACH",
  "ENETDOWN",
  "EADDRNOTAVAIL",
  "ECONNABORTED",
]);

/** Node's codes of certificate verification failures (client side, after the TLS handshake began). */
const UNTRUSTED: ReadonlySet<string> = new Set([
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "UNABLE_TO_GET_ISSUER_CERT",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_UNTRUSTED",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

/** HTTP/2 error codes by number (RFC 9113 section 7). */
export const HTTP2_ERROR_NAMES: readonly string[] = [
  "NO_ERROR",
  "PROTOCOL_ERROR",
  "INTERNAL_ERROR",
  "FLOW_CONTROL_ERROR",
  "SETTINGS_TIMEOUT",
  "STREAM_CLOSED",
  "FRAME_SIZE_ERROR",
  "REFUSED_STREAM",
  "CANCEL",
  "COMPRESSION_ERROR",
  "CONNECT_ERROR",
  "ENHANCE_YOUR_CALM",
  "INADEQUATE_SECURITY",
  "HTTP_1_1_REQUIRED",
];

/** "NAME (0xN)" of an HTTP/2 error code number. */
function http2Code(code: number): string {
  return `${HTTP2_ERROR_NAMES[code] ?? "unknown error code"} (0x${code.toString(16)})`;
}

/** "NAME (0xN)" of nghttp2's name of an HTTP/2 error code ("NGHTTP2_REFUSED_STREAM"). */
function http2CodeNamed(name: string): string {
  const bare = name.replace(/^NGHTTP2_/, "");
  const code = HTTP2_ERROR_NAMES.indexOf(bare);
  return code < 0 ? bare : http2Code(code);
}

/** The errors of `error`'s cause chain, outermost first (at most 8). */
function causes(error: unknown): { code?: unknown; message?: unknown; rawMessage?: unknown }[] {
  const chain: { code?: unknown; message?: unknown; rawMessage?: unknown }[] = [];
  let current: unknown = error;
  while (typeof current === "object" && current !== null && chain.length < 8) {
    chain.push(current as { code?: unknown; message?: unknown; rawMessage?: unknown });
    current = (current as { cause?: unknown }).cause;
  }
  return chain;
}

/**
 * Why `error` (a failed call, its causes attached) got no answer, or
 * undefined when it is not a connection failure (the server answered, or
 * the error comes from elsewhere).
 */
export function connectionFailure(error: unknown): ConnectionFailure | undefined {
  for (const e of causes(error)) {
    const code = typeof e.code === "string" ? e.code : undefined;
    // A ConnectError's message starts with its code ("[internal] ..."); rawMessage is the text it wraps.
    const raw = typeof e.rawMessage === "string" ? e.rawMessage : e.message;
    const message = typeof raw === "string" ? raw : "";
    if (code !== undefined && NOT_CONNECTED.has(code))
      return { kind: "not_connected", reason: message };
    if (code !== undefined && UNTRUSTED.has(code)) return { kind: "untrusted", reason: message };
    if (code === "ERR_HTTP2_SESSION_ERROR" || code === "ERR_HTTP2_GOAWAY_SESSION") {
      const number = /error code (\d+)/.exec(message)?.[1];
      const how = `ended the HTTP/2 session with GOAWAY ${
        number === undefined ? `(${message})` : http2Code(Number(number))
      } before answering`;
      return { kind: "broken", how, notSpoken: Number(number) === 13 ? "http2" : undefined };
    }
    if (code === "ERR_HTTP2_STREAM_ERROR") {
      const name = /error code (\w+)/.exec(message)?.[1];
      const named = name === undefined ? message : http2CodeNamed(name);
      return {
        kind: "broken",
        how: `reset the HTTP/2 stream with RST_STREAM ${named} before answering`,
        notSpoken: named.startsWith("HTTP_1_1_REQUIRED") ? "http2" : undefined,
      };
    }
    if (code === "ERR_HTTP2_ERROR" && message === "Protocol error")
      // nghttp2 read something other than HTTP/2 frames: typically an HTTP/1.1 answer ("400 Bad Request") to the preface.
      return {
        kind: "broken",
        how: "answered in a protocol other than HTTP/2 (typically an HTTP/1.1 response to the HTTP/2 preface)",
        notSpoken: "http2",
      };
    if (code === "ERR_SSL_WRONG_VERSION_NUMBER")
      return { kind: "broken", how: "answered in a protocol other than TLS", notSpoken: "tls" };
    const alert = /^ERR_SSL_(?:TLSV1|TLSV13|SSLV3)_ALERT_(\w+)$/.exec(code ?? "");
    if (alert !== null) {
      const name = (alert[1] as string).toLowerCase().replace(/_/g, " ");
      return {
        kind: "broken",
        how: `sent the TLS alert "${name}"`,
        notSpoken: name === "no application protocol" ? "http2" : undefined,
      };
    }
    if (code === "ECONNRESET" || code === "EPIPE")
      return {
        kind: "broken",
        how: `reset the connection (${code}) before answering`,
        silent: true,
      };
    // connect-node's own words for a stream the connection's end closed (the server closed the socket before answering).
    const closed = /^http\/2 stream closed with error code (\w+) \(0x([0-9a-f]+)\)$/.exec(message);
    if (closed !== null)
      return {
        kind: "broken",
        how: `closed the connection before answering (the HTTP/2 stream ended with ${closed[1]} (0x${closed[2]}))`,
        silent: true,
      };
  }
  return undefined;
}
