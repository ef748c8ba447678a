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
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import type * as http2 from "node:http2";
import type { PeerInfo } from "../../auth/peer.ts";
import { KdsError } from "../../errors.ts";
import { MultiplexService, type Frame } from "../../gen/kds/mux/v1/mux_pb.ts";
import {
  TRANSPORT_WATCH,
  type AcceptedFrames,
  type GlobalServer,
  type TransportWatch,
} from "../../global/global-server.ts";
import { toConnectError } from "../../connect-errors.ts";
import { drained, grpcFrame, readGrpcFrames } from "./grpc-frames.ts";
import type { GuardedConnection } from "./connection-guard.ts";
import { CLIENT_ID_HEADER } from "../../names.ts";
import {
  WRITE_FRAMES,
  writesFrames,
  type FrameFlow,
  type FrameWriter,
  type WrittenFrames,
} from "../../mux/frame-push.ts";

/** The path of the mux stream. */
export const MUX_PATH = `/${MultiplexService.typeName}/${MultiplexService.method.streamMessage.name}`;
/** What the global answers with (connect-node's gRPC handler says the same). */
const RESPONSE_HEADERS = { ":status": 200, "content-type": "application/grpc+proto" } as const;
/** The response headers go out with `waitForTrailers`, so the status trailers can follow the last frame. */
const RESPOND_OPTIONS = { waitForTrailers: true } as const;

/**
 * Takes a zone's gRPC mux stream (binary, uncompressed frames, no deadline;
 * answered uncompressed whatever the zone accepts) as node:http2 hands it
 * over, before any request object is made of it, and serves it on the
 * global; false for any other stream, which the caller hands to
 * connect-node. `connection` learns that the stream's connection
 * authenticated once the global admits the stream.
 */
export type MuxStreamClaim = (
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
  connection: GuardedConnection,
) => boolean;

/** The {@link MuxStreamClaim} of `global`; `peer` tells what the stream's connection says of the client. */
export function muxStreamClaim(
  global: GlobalServer,
  peer: (stream: http2.ServerHttp2Stream) => PeerInfo,
): MuxStreamClaim {
  return (stream, headers, connection) => {
    if (!isPlainGrpcMuxStream(headers)) return false;
    void serveMuxStream(global, stream, headers, peer(stream), connection);
    return true;
  };
}

/** Whether an HTTP/2 stream with `headers` (pseudo-headers included) is a mux stream the direct path serves (see {@link muxStreamClaim}). */
export function isPlainGrpcMuxStream(headers: http2.IncomingHttpHeaders): boolean {
  if (headers[":method"] !== "POST" || headers[":path"] !== MUX_PATH) return false;
  const type = headers["content-type"];
  if (type !== "application/grpc" && type !== "application/grpc+proto") return false;
  return identityOnly(headers["grpc-encoding"]) && headers["grpc-timeout"] === undefined;
}

/** True for an absent encoding header or one that names nothing but identity. */
function identityOnly(value: string | string[] | undefined): boolean {
  if (value === undefined) return true;
  return (Array.isArray(value) ? value.join(",") : value)
    .split(",")
    .every((name) => name.trim() === "identity" || name.trim() === "");
}

/** Serves one mux stream until the session's frames end, then sends connect's status trailers. */
function serveMuxStream(
  global: GlobalServer,
  stream: http2.ServerHttp2Stream,
  requestHeaders: http2.IncomingHttpHeaders,
  peer: PeerInfo,
  connection: GuardedConnection,
): Promise<void> {
  // Until the global admits the stream, its close aborts the admission through `gone`; once admitted, it ends the
  // session through the session's TransportWatch, and `gone` (most of a KiB with its listener, per idle zone) goes.
  let gone: AbortController | undefined = new AbortController();
  let watch: TransportWatch | undefined;
  // `on`: a stream closes once, and `once` would hold a wrapper (about 110 bytes) for the zone's life.
  stream.on("close", () => {
    const reason = new KdsError("aborted", "the zone's HTTP/2 stream closed");
    if (watch !== undefined) watch.gone(reason);
    else gone?.abort(reason);
  });
  // A reset or a lost connection also closes the stream, which ends the session (above).
  stream.on("error", ignoreStreamError);
  const headers = new Headers();
  for (const [name, value] of Object.entries(requestHeaders)) {
    if (name.startsWith(":") || value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v);
  }
  // Read now: a closure here reading the headers later kept them (in this function's context, which the stream's
  // close listener holds) as long as the zone's stream.
  const zone = headers.get(CLIENT_ID_HEADER)?.trim();
  // A promise chain, not one async function: its suspended frame lived as long as the zone's stream. Nor does the
  // chain wait for pushed frames (every zone's, on this path): their writer ends the stream itself, so no promises
  // of the chain are held for the session's life.
  return connection
    .authenticating(
      // The global proves the zone's credentials on the headers before it reads a frame.
      global.accept(
        headers,
        readGrpcFrames(stream, global.maxMessageBytes, unreadable),
        gone.signal,
        peer,
      ),
    )
    .then((outbound: AcceptedFrames) => {
      watch = outbound[TRANSPORT_WATCH];
      if (watch !== undefined) {
        // Still open (a close before this aborted `gone`, which the watch heard): the close now goes to the watch.
        watch.detach();
        gone = undefined;
      }
      connection.authenticated(zone);
      if (!writesFrames(outbound))
        return writeIterated(outbound, stream).then(() => endStream(stream, undefined));
      writePushed(outbound, stream);
      return undefined;
    })
    .catch((error: unknown) => endStream(stream, error));
}

/** The stream's error listener: one function for every stream, not a closure each. */
function ignoreStreamError(): void {
  // Nothing lost: an error closes the stream too, and the close ends the session (serveMuxStream).
}

/** Writes the session's frames by iteration (a session whose frames are not pushed). */
async function writeIterated(
  outbound: AsyncIterable<Frame>,
  stream: http2.ServerHttp2Stream,
): Promise<void> {
  for await (const message of outbound) {
    if (stream.closed || stream.destroyed) continue; // the session ends through the stream's close; its frames go nowhere
    if (!stream.headersSent) stream.respond(RESPONSE_HEADERS, RESPOND_OPTIONS);
    if (!stream.write(grpcFrame(message))) await drained(stream);
  }
}

/** Ends the stream with connect's status trailers: OK, or what `failure` says (nothing when the stream is gone). */
function endStream(stream: http2.ServerHttp2Stream, failure: unknown): void {
  if (stream.closed || stream.destroyed) return;
  if (!stream.headersSent) stream.respond(RESPONSE_HEADERS, RESPOND_OPTIONS);
  const trailers: Record<string, string> = {};
  setTrailerStatus(
    new Headers(),
    failure === undefined ? undefined : toConnectError(failure),
  ).forEach((value, name) => {
    trailers[name] = value;
  });
  // Asked for once the last DATA frame is queued (the headers went out with waitForTrailers).
  stream.once("wantTrailers", () => stream.sendTrailers(trailers));
  stream.end();
}

/**
 * Writes the session's frames as they are pushed (frame-push.ts), as the
 * loop over them would: no promise per frame; a full stream holds them back
 * until it drains. When they are over, ends the stream with connect's status
 * trailers (OK, or what they ended with), as {@link endStream}.
 */
function writePushed(frames: WrittenFrames, stream: http2.ServerHttp2Stream): void {
  const writer = new StreamWriter(stream);
  writer.flow = frames[WRITE_FRAMES](writer);
}

/**
 * The writer of {@link writePushed}: an object with prototype methods, not a
 * literal of closures, as every idle zone's stream holds one for its life.
 */
class StreamWriter implements FrameWriter {
  /** The flow the writer resumes once the stream drained (set as soon as the frames start). */
  flow: FrameFlow | undefined;
  readonly #stream: http2.ServerHttp2Stream;

  constructor(stream: http2.ServerHttp2Stream) {
    this.#stream = stream;
  }

  frame(message: Frame): boolean {
    const stream = this.#stream;
    if (stream.closed || stream.destroyed) return true; // the session ends through the stream's close; its frames go nowhere
    if (!stream.headersSent) stream.respond(RESPONSE_HEADERS, RESPOND_OPTIONS);
    if (stream.write(grpcFrame(message))) return true;
    void drained(stream).then(() => this.flow?.resume());
    return false;
  }

  // The status goes from a later microtask, as it did when a promise of the frames' end was awaited: not from
  // inside the session's push of its last frame.
  end(): void {
    queueMicrotask(() => endStream(this.#stream, undefined));
  }

  fail(error: unknown): void {
    queueMicrotask(() => endStream(this.#stream, error));
  }
}

/** Why a zone's frame cannot be read, as the connect-node path words it. */
function unreadable(reason: string, cause?: unknown): KdsError {
  return new KdsError(
    "protocol_error",
    `the zone sent a frame the global cannot read (${reason}); it must be one kds.mux.v1.Frame in the call's codec`,
    { cause },
  );
}
