/**
 * Deciding on a request before its body is read: a {@link RequestGate}
 * proves the caller's credentials on the request headers (a refusal is
 * written at once in the caller's protocol, and the body is never read),
 * and a deadline bounds how long a request may take to send its body
 * ({@link guardRequestBody}), so that no caller holds a stream by sending
 * slowly.
 *
 * @module
 */
import {
  codeToHttpStatus,
  codeToString,
  endStreamFlag,
  errorToJson,
} from "@connectrpc/connect/protocol-connect";
import type * as http from "node:http";
import type * as http2 from "node:http2";
import { constants as http2constants } from "node:http2";
import type { PeerInfo } from "../../auth/peer.ts";
import { toConnectError } from "../../connect-errors.ts";
import type { ConnectionGuard, GuardedConnection } from "./connection-guard.ts";

/** What a gate sees of a request: never its body. */
export interface GateRequest {
  /** The request's path (without the query). */
  readonly path: string;
  /** Its headers. */
  readonly headers: Headers;
  /** What the connection tells about the client (its certificate on TLS). */
  readonly peer: PeerInfo;
}

/**
 * What a gate decided for a request it lets through: `authenticated` when
 * it proved the caller's credentials (as `identity`, or trusted without one
 * when undefined), so the request's connection counts as authenticated; not
 * authenticated when the handler proves the caller itself before reading
 * the body (a zone's mux stream).
 */
export type GateDecision =
  | { readonly authenticated: true; readonly identity?: string }
  | { readonly authenticated: false };

/**
 * Decides on a request's headers whether it may go on; throws (a
 * `KdsError`, `unauthenticated` or `permission_denied`) to refuse it.
 * `signal` aborts when the request goes away.
 */
export type RequestGate = (request: GateRequest, signal: AbortSignal) => Promise<GateDecision>;

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/** The headers of a node request as fetch `Headers` (pseudo-headers left out). */
export function requestHeaders(request: NodeRequest): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(request.headers)) {
    if (name.startsWith(":") || value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v);
  }
  return headers;
}

/**
 * Answers `request` with `error` in its protocol, without reading its body:
 * gRPC and gRPC-web get a Trailers-Only response (`grpc-status`,
 * `grpc-message` and the metadata in one HEADERS frame that ends the stream
 * on HTTP/2), Connect
 * streaming an end-stream message, Connect unary calls a JSON error with
 * the matching HTTP status, and anything else (a page, /metrics) the HTTP
 * status and the message as text. The `kds-error-code` header carries the
 * `KdsError` code. An HTTP/1.1 connection is closed after it (its unread
 * body would otherwise have to be read to reuse it).
 */
export function refuseRequest(request: NodeRequest, response: NodeResponse, error: unknown): void {
  if (response.headersSent || response.writableEnded) return;
  const connectError = toConnectError(error);
  const extra: Record<string, string> = {};
  connectError.metadata.forEach((value, name) => {
    extra[name] = value;
  });
  if (request.httpVersionMajor === 1) extra.connection = "close";
  const type = String(request.headers["content-type"] ?? "");
  const message = connectError.rawMessage;
  if (/^application\/grpc(-web)?(\+|;|$)/.test(type)) {
    const headers = {
      ...extra,
      "content-type": type,
      "grpc-status": String(connectError.code),
      "grpc-message": encodeURIComponent(message),
    };
    if (request.httpVersionMajor === 2) {
      // Trailers-Only: ONE HEADERS frame with END_STREAM holding the status, as gRPC clients read it. writeHead() then
      // end() would send the headers without END_STREAM (read as initial metadata, no status) and then reset the
      // stream, which grpcio and grpc-js report as INTERNAL.
      const stream = (response as http2.Http2ServerResponse).stream;
      if (stream.destroyed || stream.closed || stream.headersSent) return; // the caller went away: nothing to answer
      stream.respond({ ":status": 200, ...headers }, { endStream: true });
      return;
    }
    response.writeHead(200, headers);
    response.end();
    return;
  }
  if (/^application\/connect\+/.test(type)) {
    const json = new TextEncoder().encode(
      JSON.stringify({
        error: errorToJson(connectError, undefined),
        metadata: Object.fromEntries(Object.entries(extra).map(([k, v]) => [k, [v]])),
      }),
    );
    const envelope = new Uint8Array(5 + json.byteLength);
    envelope[0] = endStreamFlag;
    new DataView(envelope.buffer).setUint32(1, json.byteLength);
    envelope.set(json, 5);
    response.writeHead(200, { ...extra, "content-type": type });
    response.end(envelope);
    return;
  }
  const status = codeToHttpStatus(connectError.code);
  const authenticate = connectError.code === 16 ? { "www-authenticate": "Bearer" } : {};
  if (
    /^application\/(proto|json)(;|$)/.test(type) ||
    request.headers["connect-protocol-version"] !== undefined
  ) {
    response.writeHead(status, { ...extra, ...authenticate, "content-type": "application/json" });
    response.end(JSON.stringify({ code: codeToString(connectError.code), message }));
    return;
  }
  response.writeHead(status, {
    ...extra,
    ...authenticate,
    "content-type": "text/plain; charset=utf-8",
  });
  response.end(`${message}\n`);
}

/** How fast a slow body must still arrive, beyond the request timeout: 64 KiB/s. */
export const MIN_BODY_BYTES_PER_SECOND = 64 * 1024;
/** However fast it arrives, a body never gets more than this many request timeouts. */
const MAX_TIMEOUTS_PER_BODY = 10;

/**
 * Bounds how long `request` may take to send its body: `timeoutMs` from
 * now, plus one second per {@link MIN_BODY_BYTES_PER_SECOND} bytes its
 * connection received meanwhile (so a large body arriving at that rate or
 * faster is not cut; an upper bound on HTTP/2, where the connection also
 * carries other streams), at most ten times `timeoutMs`. When it passes
 * before the body ended and before the response finished, an HTTP/2
 * stream is reset (CANCEL) and an HTTP/1.1 connection closed, and
 * `onTimeout` is called. Ends with the request.
 */
export function guardRequestBody(
  request: NodeRequest,
  response: NodeResponse,
  timeoutMs: number,
  onTimeout: () => void,
): void {
  const started = performance.now();
  const socket = request.socket as { bytesRead?: number } | undefined;
  const bytesAtStart = socket?.bytesRead ?? 0;
  let timer: NodeJS.Timeout | undefined;
  let done = false;
  const finish = (): void => {
    done = true;
    clearTimeout(timer);
  };
  const check = (): void => {
    if (done) return;
    const received = Math.max(0, (socket?.bytesRead ?? 0) - bytesAtStart);
    const allowed = Math.min(
      timeoutMs * MAX_TIMEOUTS_PER_BODY,
      timeoutMs + (received / MIN_BODY_BYTES_PER_SECOND) * 1000,
    );
    const left = allowed - (performance.now() - started);
    if (left > 0) {
      timer = setTimeout(check, Math.ceil(left));
      timer.unref();
      return;
    }
    finish();
    onTimeout();
    if (request.httpVersionMajor === 2) {
      const stream = (request as http2.Http2ServerRequest).stream;
      if (!stream.closed && !stream.destroyed) stream.close(http2constants.NGHTTP2_CANCEL);
    } else {
      request.socket.destroy();
    }
  };
  // The body ended (read to its end by the handler), or the response is complete, or the request is gone.
  request.once("end", finish);
  request.once("close", finish);
  response.once("finish", finish);
  response.once("close", finish);
  if (isComplete(request)) {
    finish();
    return;
  }
  timer = setTimeout(check, timeoutMs);
  timer.unref();
}

/** True when the client already finished sending `request`'s body (END_STREAM seen, or HTTP/1.1 message complete). */
function isComplete(request: NodeRequest): boolean {
  if (request.httpVersionMajor === 2)
    return (request as http2.Http2ServerRequest).stream.state.remoteClose === 1;
  return (request as http.IncomingMessage).complete;
}

/** Options of {@link gatedHandler}. */
export interface GatedHandlerOptions {
  /** Serves a request that passed (connect-node's handler). */
  readonly serve: (request: NodeRequest, response: NodeResponse) => void;
  /** Takes a request before the gate (a handler that proves the caller itself before reading the body); true when it took it. */
  readonly claim?: (
    request: NodeRequest,
    response: NodeResponse,
    connection: GuardedConnection,
  ) => boolean;
  /** Decides on every request `claim` did not take; none lets everything through. */
  readonly gate?: RequestGate;
  /** Tells the listener's connection guard who authenticated (read at each request: the guard may come after the handler). */
  readonly guard?: ConnectionGuard;
  /** See {@link guardRequestBody}; undefined: no deadline. */
  readonly requestTimeoutMs?: number;
  /** Paths whose body is long-lived by design (a bidi stream), exempt from the deadline. */
  readonly unboundedBody?: (path: string) => boolean;
  /** Called when a request is cut for its slow body. */
  readonly onRequestTimeout?: () => void;
  /** What the connection of a request tells about the client. */
  readonly peer: (request: NodeRequest) => PeerInfo;
}

/**
 * The connection of a request without a guard: learns nothing. One for all
 * (made per request, its closures kept this handler's context, and with it
 * the request and response, as long as a zone's stream).
 */
export const UNGUARDED: GuardedConnection = {
  authenticated: () => undefined,
  authenticating: (work) => work,
};

/**
 * A request handler that bounds each request's body time, lets `claim`
 * take what it serves itself, and runs every other request through `gate`
 * on its headers before `serve` may read its body; a refusal is written
 * with {@link refuseRequest}. The guard learns which connections
 * authenticated.
 */
export function gatedHandler(
  options: GatedHandlerOptions,
): (request: NodeRequest, response: NodeResponse) => void {
  const { serve, claim, gate, requestTimeoutMs } = options;
  return (request, response) => {
    const path = (request.url ?? "/").split("?")[0] ?? "/";
    if (requestTimeoutMs !== undefined && options.unboundedBody?.(path) !== true) {
      guardRequestBody(request, response, requestTimeoutMs, () => options.onRequestTimeout?.());
    }
    const connection = options.guard?.connection(request.socket) ?? UNGUARDED;
    if (claim?.(request, response, connection) === true) return;
    if (gate === undefined) {
      serve(request, response);
      return;
    }
    const gone = new AbortController();
    response.once("close", () => gone.abort());
    connection
      .authenticating(
        gate({ path, headers: requestHeaders(request), peer: options.peer(request) }, gone.signal),
      )
      .then(
        (decision) => {
          if (decision.authenticated) connection.authenticated(decision.identity);
          if (!gone.signal.aborted) serve(request, response);
        },
        (error: unknown) => refuseRequest(request, response, error),
      );
  };
}
