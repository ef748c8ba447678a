/**
 * The global's mux stream served straight on a node:http2 stream for gRPC
 * clients (every Connect-node and grpc-js zone), instead of through
 * connect-node's handler. An idle zone's stream is what a global holds ten
 * thousand of, and connect-node's pipeline of async generators holds about
 * 43 KiB of heap per idle bidi stream (a bare node:http2 stream about 4 KiB;
 * measured with 1,000 streams). Everything else (the Connect and gRPC-web
 * protocols, JSON, compression, a `grpc-timeout`, the other services) still
 * goes through connect-node, and so does a zone that sends compressed
 * frames. A zone that accepts compressed responses (connect-node's default)
 * is answered uncompressed, which gRPC allows (`grpc-accept-encoding` lists
 * what a client can read, and identity is always readable): compressing
 * every response once per zone is what the fan-out cannot afford, and on a
 * fast link it cost 3-8x throughput (docs/transports.md). The status
 * trailers are connect's own.
 *
 * @module
 */
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import type * as http from "node:http";
import type * as http2 from "node:http2";
import type { PeerInfo } from "../../auth/peer.ts";
import { KdsError } from "../../errors.ts";
import { MessageSchema, MultiplexService, type Message } from "../../gen/kds/mux/v1/mux_pb.ts";
import type { GlobalServer } from "../../global/global-server.ts";
import { toConnectError } from "../../transport/connect-errors.ts";

/** The path of the mux stream. */
const MUX_PATH = `/${MultiplexService.typeName}/${MultiplexService.method.streamMessage.name}`;
/** What the global answers with (connect-node's gRPC handler says the same). */
const RESPONSE_CONTENT_TYPE = "application/grpc+proto";
/** gRPC's length-prefixed message header: a flags byte and a 32-bit big-endian length. */
const PREFIX_BYTES = 5;

/**
 * A request handler for `serveRoutes` that takes a zone's gRPC mux stream
 * (binary, uncompressed frames, no deadline; answered uncompressed whatever
 * the zone accepts) and serves it on `global`; false for any other request,
 * which the caller hands to connect-node.
 */
export function muxStreamClaim(
  global: GlobalServer,
  peer: (request: http2.Http2ServerRequest) => PeerInfo,
): (request: http.IncomingMessage | http2.Http2ServerRequest, response: http.ServerResponse | http2.Http2ServerResponse) => boolean {
  return (request, response) => {
    if (!isPlainGrpcMuxStream(request)) return false;
    const h2 = request as http2.Http2ServerRequest;
    void serveMuxStream(global, h2, response as http2.Http2ServerResponse, peer(h2));
    return true;
  };
}

/** Whether `request` is a mux stream the direct path serves (see {@link muxStreamClaim}). */
export function isPlainGrpcMuxStream(request: Pick<http.IncomingMessage, "httpVersionMajor" | "method" | "url" | "headers">): boolean {
  if (request.httpVersionMajor !== 2 || request.method !== "POST" || request.url !== MUX_PATH) return false;
  const headers = request.headers;
  const type = headers["content-type"];
  if (type !== "application/grpc" && type !== "application/grpc+proto") return false;
  return identityOnly(headers["grpc-encoding"]) && headers["grpc-timeout"] === undefined;
}

/** True for an absent encoding header or one that names nothing but identity. */
function identityOnly(value: string | string[] | undefined): boolean {
  if (value === undefined) return true;
  return (Array.isArray(value) ? value.join(",") : value).split(",").every((name) => name.trim() === "identity" || name.trim() === "");
}

/** Serves one mux stream until the session's frames end, then sends connect's status trailers. */
async function serveMuxStream(global: GlobalServer, request: http2.Http2ServerRequest, response: http2.Http2ServerResponse, peer: PeerInfo): Promise<void> {
  const stream = request.stream;
  const gone = new AbortController();
  stream.once("close", () => gone.abort(new KdsError("aborted", "the zone's HTTP/2 stream closed")));
  // A reset or a lost connection also closes the stream, which ends the session through `gone`.
  stream.on("error", () => undefined);
  const headers = new Headers();
  for (const [name, value] of Object.entries(request.headers)) {
    if (name.startsWith(":") || value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v);
  }
  let failure: unknown;
  try {
    const outbound = await global.accept(headers, readFrames(stream, global.maxMessageBytes), gone.signal, peer);
    for await (const message of outbound) {
      if (stream.closed || stream.destroyed) continue; // the session ends through `gone`; its frames go nowhere
      if (!response.headersSent) response.writeHead(200, { "content-type": RESPONSE_CONTENT_TYPE });
      if (!response.write(envelope(toBinary(MessageSchema, message)))) await drained(stream);
    }
  } catch (error) {
    failure = error;
  }
  if (stream.closed || stream.destroyed) return;
  if (!response.headersSent) response.writeHead(200, { "content-type": RESPONSE_CONTENT_TYPE });
  const trailers: Record<string, string> = {};
  setTrailerStatus(new Headers(), failure === undefined ? undefined : toConnectError(failure)).forEach((value, name) => (trailers[name] = value));
  response.addTrailers(trailers);
  response.end();
}

function envelope(body: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(PREFIX_BYTES + body.length);
  frame[0] = 0;
  frame.writeUInt32BE(body.length, 1);
  frame.set(body, PREFIX_BYTES);
  return frame;
}

/** Resolves when `stream` can take more writes, or has closed. */
function drained(stream: http2.ServerHttp2Stream): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      stream.off("drain", done);
      stream.off("close", done);
      resolve();
    };
    stream.once("drain", done);
    stream.once("close", done);
  });
}

/** Why a zone's frame cannot be read, as the connect-node path words it. */
function unreadable(reason: string, cause?: unknown): KdsError {
  return new KdsError("protocol_error", `the zone sent a frame the global cannot read (${reason}); it must be one kds.mux.v1.Message in the call's codec`, { cause });
}

/**
 * The zone's frames from gRPC's length-prefixed messages on `stream`; holds
 * at most one frame (`maxBytes`) and the chunk that completes it. The chunks
 * of a frame are kept apart until it is whole and joined once: joining on
 * every chunk copied a 4 MiB frame's bytes about 250 times.
 */
async function* readFrames(stream: http2.ServerHttp2Stream, maxBytes: number): AsyncGenerator<Message, void, undefined> {
  let pending: Buffer = Buffer.alloc(0);
  const parts: Buffer[] = [];
  let partBytes = 0;
  /** Bytes the frame being read needs in all: its prefix, then prefix and body once the length is known. */
  let need = PREFIX_BYTES;
  for await (const chunk of chunksOf(stream)) {
    parts.push(chunk);
    partBytes += chunk.length;
    if (pending.length + partBytes < need) continue;
    pending = Buffer.concat([pending, ...parts]);
    parts.length = 0;
    partBytes = 0;
    while (pending.length >= PREFIX_BYTES) {
      if (((pending[0] as number) & 1) !== 0) throw unreadable("a compressed frame on a stream without grpc-encoding");
      const length = pending.readUInt32BE(1);
      if (length > maxBytes) throw unreadable(`a frame of ${length} bytes, above the read limit of ${maxBytes}`);
      need = PREFIX_BYTES + length;
      if (pending.length < need) break;
      const body = pending.subarray(PREFIX_BYTES, need);
      pending = pending.subarray(need);
      need = PREFIX_BYTES;
      let message: Message;
      try {
        message = fromBinary(MessageSchema, body);
      } catch (error) {
        throw unreadable(`parse binary: ${error instanceof Error ? error.message : String(error)}`, error);
      }
      yield message;
    }
  }
  const left = pending.length + partBytes;
  if (left > 0) throw unreadable(`the stream ended inside a frame (${left} bytes left)`);
}

/**
 * The chunks of `stream` as they are asked for: it is paused while a chunk
 * waits, so HTTP/2 flow control pushes back on a zone whose frames the
 * session does not take. Unlike Node's stream iterator, stopping early
 * leaves the stream open, so the status trailers can still go out.
 */
async function* chunksOf(stream: http2.ServerHttp2Stream): AsyncGenerator<Buffer, void, undefined> {
  const waiting: Buffer[] = [];
  let ended = false;
  let failure: unknown;
  let wake: (() => void) | undefined;
  const onData = (chunk: Buffer): void => {
    waiting.push(chunk);
    stream.pause();
    wake?.();
  };
  const onEnd = (): void => {
    ended = true;
    wake?.();
  };
  const onError = (error: unknown): void => {
    failure = error;
    wake?.();
  };
  stream.on("data", onData);
  stream.once("end", onEnd);
  stream.once("close", onEnd);
  stream.once("error", onError);
  try {
    for (;;) {
      const chunk = waiting.shift();
      if (chunk !== undefined) {
        yield chunk;
        if (waiting.length === 0) stream.resume();
        continue;
      }
      if (failure !== undefined) throw failure;
      if (ended) return;
      await new Promise<void>((resolve) => (wake = resolve));
      wake = undefined;
    }
  } finally {
    stream.off("data", onData);
    stream.off("end", onEnd);
    stream.off("close", onEnd);
    stream.off("error", onError);
  }
}
