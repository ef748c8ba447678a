/**
 * The zone's side of the mux as plain gRPC on node:http2, without
 * connect-node's client pipeline: one HTTP/2 stream per dial, frames
 * written as they are pulled from the zone and read as the zone pulls
 * them. Profiles of the fan-out bench showed a zone's per-change CPU spent
 * mostly in connect-node's async-iterable pipeline and its garbage; this
 * client is the counterpart of the global's direct mux stream
 * (mux-stream.ts) and shares its frame reader.
 *
 * It speaks only what the mux needs: binary, uncompressed
 * `kds.mux.v1.MultiplexService/StreamMessage`, no deadline. A refusal
 * carries the same gRPC status and `kds-error-code` as with connect-node,
 * and turns into the same `KdsError` (through `fromConnectError`).
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { findTrailerError, parseContentType } from "@connectrpc/connect/protocol-grpc";
import * as http2 from "node:http2";
import { KdsError } from "../../errors.ts";
import type { Frame } from "../../gen/kds/mux/v1/mux_pb.ts";
import { defaultSessionOptions } from "../../mux/index.ts";
import { fromConnectError } from "../../connect-errors.ts";
import type { MuxDialRequest, MuxTransport } from "../../transport/transport.ts";
import { drained, grpcFrame, readGrpcFrames } from "./grpc-frames.ts";
import { WRITE_FRAMES, writesFrames, type WrittenFrames } from "../../mux/frame-push.ts";
import { DEFAULT_HTTP2_WINDOW_BYTES, http2Window } from "./http2-windows.ts";
import { MUX_PATH } from "./mux-stream.ts";

/** Options of {@link grpcMuxTransport}. */
export interface GrpcMuxTransportOptions {
  /** Name for logs. Default "grpc". */
  name?: string;
  /** CA certificates (PEM) trusted for an `https:` URL; default Node's trust store. */
  ca?: string | Buffer | Array<string | Buffer>;
  /** A client certificate (PEM) for mutual TLS, with {@link GrpcMuxTransportOptions.key}. */
  cert?: string | Buffer;
  /** The client certificate's private key (PEM). */
  key?: string | Buffer;
  /**
   * The largest frame read from the global, in bytes; a larger one fails the
   * stream before its body is buffered. Default the mux's 4 MiB. Keep it at
   * least the zone session's `maxMessageBytes`.
   */
  maxMessageBytes?: number;
  /**
   * The HTTP/2 receive window of each stream and of the connection, in
   * bytes. Default `DEFAULT_HTTP2_WINDOW_BYTES`, the mux's response byte
   * window (8 MiB), as for the Connect transports (http2-windows.ts): HTTP/2
   * flow control then never stalls a burst the mux already allowed. Memory
   * stays bounded: the stream is paused while the zone does not pull, so at
   * most this many bytes wait in HTTP/2 plus one frame and one chunk in the
   * reader, and the global cannot send more than the mux's byte window
   * grants anyway.
   */
  initialWindowSize?: number;
  /** Aborting it closes the HTTP/2 connection for good, as {@link GrpcMuxTransport.close} does. */
  signal?: AbortSignal;
}

/** A {@link MuxTransport} that owns one HTTP/2 connection. */
export interface GrpcMuxTransport extends MuxTransport {
  /** Closes the HTTP/2 connection (streams still open are cancelled); later opens fail. */
  close(): void;
}

const REQUEST_CONTENT_TYPE = "application/grpc+proto";

/**
 * A {@link MuxTransport} speaking plain gRPC to the global at `baseUrl`
 * (`http:` for h2c, `https:` for TLS) on one HTTP/2 connection, opened on
 * the first dial and again after it closed or failed. `ca`, `cert` and
 * `key` are read from `options` each time a connection opens, so getters
 * there can hand out renewed files.
 */
export function grpcMuxTransport(
  baseUrl: string,
  options: GrpcMuxTransportOptions = {},
): GrpcMuxTransport {
  const url = new URL(baseUrl);
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new KdsError(
      "invalid_argument",
      `grpcMuxTransport needs an http: or https: URL, got "${baseUrl}"`,
    );
  const path = `${url.pathname.replace(/\/+$/, "")}${MUX_PATH}`;
  const target = baseUrl;
  const maxBytes = options.maxMessageBytes ?? defaultSessionOptions.maxMessageBytes;
  const window = http2Window(options.initialWindowSize ?? DEFAULT_HTTP2_WINDOW_BYTES);
  let session: http2.ClientHttp2Session | undefined;
  let closed = false;

  const close = (): void => {
    closed = true;
    session?.close();
    session?.destroy();
    session = undefined;
  };
  options.signal?.addEventListener("abort", close, { once: true });
  if (options.signal?.aborted === true) close();

  const connection = (): http2.ClientHttp2Session => {
    if (closed) throw new KdsError("aborted", `the gRPC transport to ${target} is closed`);
    if (session !== undefined && !session.closed && !session.destroyed) return session;
    const opened = http2.connect(url, {
      ...(options.ca === undefined ? {} : { ca: options.ca }),
      ...(options.cert === undefined ? {} : { cert: options.cert }),
      ...(options.key === undefined ? {} : { key: options.key }),
      settings: { initialWindowSize: window, enablePush: false },
    });
    // A connection error also errors its streams, where each call reports it.
    opened.on("error", () => undefined);
    opened.once("close", () => {
      if (session === opened) session = undefined;
    });
    opened.once("goaway", () => {
      if (session === opened) session = undefined;
    });
    // The connection-level window too, so one stream's burst is not held to 64 KiB.
    // Deno's and Bun's node:http2 may lack setLocalWindowSize: their connection keeps its default window then.
    opened.once("connect", () => {
      if (!opened.destroyed && window > 65_535 && typeof opened.setLocalWindowSize === "function")
        opened.setLocalWindowSize(window);
    });
    session = opened;
    return opened;
  };

  return {
    name: options.name ?? "grpc",
    close,
    open: (request) => openStream(connection, path, target, maxBytes, request),
    newConnection: () => {
      // Streams still open on the old connection finish there; the next open connects anew.
      const old = session;
      session = undefined;
      old?.close();
    },
  };
}

/** Opens one mux stream: starts writing `outbound`, waits for the response headers, returns the reader. */
async function openStream(
  connection: () => http2.ClientHttp2Session,
  path: string,
  target: string,
  maxBytes: number,
  { headers, outbound, signal }: MuxDialRequest,
): Promise<AsyncIterable<Frame>> {
  if (signal.aborted) throw cancelled(target, signal.reason);
  const requestHeaders: http2.OutgoingHttpHeaders = {};
  headers.forEach((value, name) => {
    requestHeaders[name] = value;
  });
  Object.assign(requestHeaders, {
    ":method": "POST",
    ":path": path,
    "content-type": REQUEST_CONTENT_TYPE,
    te: "trailers",
  });
  let stream: http2.ClientHttp2Stream;
  try {
    stream = connection().request(requestHeaders);
  } catch (error) {
    throw KdsError.is(error) ? error : unreachable(target, error);
  }
  let trailers: http2.IncomingHttpHeaders | undefined;
  stream.once("trailers", (t) => (trailers = t));
  // Errors before the reader starts stay on the stream (stream.errored), where the frame reader finds them.
  stream.on("error", () => undefined);
  const cancel = (): void => {
    if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
  };
  signal.addEventListener("abort", cancel, { once: true });
  const done = (): void => signal.removeEventListener("abort", cancel);
  const writes: { error?: unknown } = {};
  const written = writeAll(stream, outbound, writes);

  let responseHeaders: http2.IncomingHttpHeaders;
  try {
    responseHeaders = await response(stream);
    const { status, headerError } = validate(responseHeaders);
    if (status) {
      cancel();
      done();
      if (headerError !== undefined) throw fromConnectError(headerError, target);
      return (async function* () {
        // Trailers-only OK: the global ended the stream before sending anything, so there is nothing to yield.
      })();
    }
  } catch (error) {
    cancel();
    done();
    throw failure(error, signal, writes.error, target);
  }

  // The reader itself, with the end's checks as hooks: an async generator around it cost every frame several promise hops.
  return readGrpcFrames(stream, maxBytes, (reason, cause) => unreadable(target, reason, cause), {
    ended: () => {
      if (signal.aborted) throw cancelled(target, signal.reason);
      if (writes.error !== undefined) throw writes.error;
      if (trailers === undefined) {
        throw unreachable(
          target,
          new ConnectError(
            `the stream ended without a gRPC status (HTTP/2 code ${stream.rstCode ?? "none"})`,
            Code.Unavailable,
          ),
        );
      }
      const trailerError = findTrailerError(toHeaders(trailers));
      if (trailerError !== undefined) throw trailerError;
    },
    failed: (error) => failure(error, signal, undefined, target),
    // Reading is over: the stream is cancelled once this side's frames are written (a session that ends for the
    // peer's fault stops reading first and writes its goaway last, which a cancel at once cut off), or at once
    // when `signal` aborts (the session let the transport go).
    finished: () => {
      void written.then(() => {
        cancel();
        done();
      });
    },
  });
}

/** Writes each frame of `outbound` as it is pulled, waiting out backpressure; an error of `outbound` cancels the call and is kept in `writes`. */
async function writeAll(
  stream: http2.ClientHttp2Stream,
  outbound: AsyncIterable<Frame>,
  writes: { error?: unknown },
): Promise<void> {
  try {
    if (writesFrames(outbound)) await writePushed(stream, outbound);
    else
      for await (const message of outbound) {
        if (stream.destroyed || stream.writableEnded) break;
        if (!stream.write(grpcFrame(message))) await drained(stream);
      }
    if (!stream.destroyed && !stream.writableEnded) stream.end();
  } catch (error) {
    // The zone's frames failed: cancel the call; the reader reports it.
    writes.error = error;
    if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
  }
}

/**
 * Writes the session's frames as they are pushed (frame-push.ts), as the
 * loop in {@link writeAll} would: no promise per frame; a full stream holds
 * them back until it drains; a stream gone stops them.
 */
function writePushed(stream: http2.ClientHttp2Stream, frames: WrittenFrames): Promise<void> {
  return new Promise((resolve, reject) => {
    const flow = frames[WRITE_FRAMES]({
      frame: (message) => {
        if (stream.destroyed || stream.writableEnded) {
          flow.stop();
          resolve();
          return false;
        }
        if (stream.write(grpcFrame(message))) return true;
        void drained(stream).then(() => flow.resume());
        return false;
      },
      end: resolve,
      fail: reject,
    });
  });
}

/** The response headers, or the error or close that came first. */
function response(stream: http2.ClientHttp2Stream): Promise<http2.IncomingHttpHeaders> {
  return new Promise((resolve, reject) => {
    const onResponse = (headers: http2.IncomingHttpHeaders): void => {
      off();
      resolve(headers);
    };
    const onError = (error: unknown): void => {
      off();
      reject(error);
    };
    const onClose = (): void => {
      off();
      reject(
        new ConnectError(
          `the stream closed before the response headers (HTTP/2 code ${stream.rstCode ?? "none"})`,
          Code.Unavailable,
        ),
      );
    };
    const off = (): void => {
      stream.off("response", onResponse);
      stream.off("error", onError);
      stream.off("close", onClose);
    };
    stream.once("response", onResponse);
    stream.once("error", onError);
    stream.once("close", onClose);
  });
}

/**
 * Checks the response headers as connect-node's gRPC client does: HTTP 200,
 * a gRPC content type, no `grpc-encoding` (none was offered). Returns
 * whether they carry the status (trailers-only) and its error.
 */
function validate(headers: http2.IncomingHttpHeaders): {
  status: boolean;
  headerError: ConnectError | undefined;
} {
  const all = toHeaders(headers);
  const status = Number(headers[":status"]);
  if (status !== 200) throw new ConnectError(`HTTP ${status}`, codeFromHttpStatus(status), all);
  const type = all.get("content-type");
  if (parseContentType(type) === undefined)
    throw new ConnectError(`unsupported content type ${type ?? "(none)"}`, Code.Unknown);
  const encoding = all.get("grpc-encoding");
  if (encoding !== null && encoding.toLowerCase() !== "identity")
    throw new ConnectError(`unsupported response encoding "${encoding}"`, Code.Internal, all);
  return { status: all.has("grpc-status"), headerError: findTrailerError(all) };
}

/** gRPC's mapping of an HTTP status to a code (https://github.com/grpc/grpc/blob/master/doc/http-grpc-status-mapping.md). */
function codeFromHttpStatus(status: number): Code {
  switch (status) {
    case 400:
      return Code.Internal;
    case 401:
      return Code.Unauthenticated;
    case 403:
      return Code.PermissionDenied;
    case 404:
      return Code.Unimplemented;
    case 429:
    case 502:
    case 503:
    case 504:
      return Code.Unavailable;
    default:
      return Code.Unknown;
  }
}

function toHeaders(incoming: http2.IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(incoming)) {
    if (name.startsWith(":") || value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v);
  }
  return headers;
}

/** The `KdsError` for whatever ended a call: the abort first, then the zone's own write failure, then the wire. */
function failure(
  error: unknown,
  signal: AbortSignal,
  writeError: unknown,
  target: string,
): KdsError {
  if (signal.aborted) return cancelled(target, signal.reason);
  if (writeError !== undefined)
    return KdsError.is(writeError) ? writeError : fromConnectError(writeError, target);
  if (KdsError.is(error)) return error;
  return error instanceof ConnectError
    ? fromConnectError(error, target)
    : unreachable(target, error);
}

function cancelled(target: string, reason: unknown): KdsError {
  return new KdsError("aborted", `the stream to ${target} was cancelled`, { cause: reason });
}

function unreachable(target: string, cause: unknown): KdsError {
  return fromConnectError(ConnectError.from(cause, Code.Unavailable), target);
}

function unreadable(target: string, reason: string, cause?: unknown): KdsError {
  return new KdsError("protocol_error", `${target} sent a frame the zone cannot read (${reason})`, {
    cause,
  });
}
