/**
 * Weighs the mux frames of a zone's stream that connect-node decodes (the
 * Connect protocol, gRPC-web, compressed gRPC: everything the direct path
 * of mux-stream.ts does not serve) before connect-node decodes them. The
 * request's body is read through an {@link EnvelopeSplitter}; each frame,
 * decompressed where the stream says it is compressed, must pass
 * `scanRefusal` (its elements, its decoded size, its well-formedness)
 * before the chunk that completes it reaches connect-node. A frame that
 * does not ends the body with a `protocol_error`, which the session answers
 * with a goaway and the status, as for a frame the global cannot read.
 *
 * Frames in the Connect protocol's JSON codec are not protobuf: they are
 * bounded by their count of JSON values instead (every `{`, `[` and `,`
 * may start one), against the same element limit.
 *
 * @module
 */
import type * as http from "node:http";
import type * as http2 from "node:http2";
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import { KdsError } from "../../errors.ts";
import { scanRefusal } from "../../mux/frame-scan.ts";
import { MAX_FRAME_ELEMENTS } from "../../mux/frame-limits.ts";
import { EnvelopeSplitter } from "./grpc-frames.ts";

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;

/** Flag bits of a length-prefixed message. */
const COMPRESSED = 0x01;
/** Connect's end-of-stream message and gRPC-web's trailers: not frames. */
const NOT_A_FRAME = 0x02 | 0x80;

/**
 * Makes `request`'s body, as connect-node reads it, pass each mux frame
 * through `scanRefusal` first (see the module). `maxBytes` is the largest
 * frame, compressed or not.
 */
export function scanMuxRequestBody(request: NodeRequest, maxBytes: number): void {
  const encoding = contentEncoding(request.headers);
  const json = /\+json|\/json/.test(String(request.headers["content-type"] ?? ""));
  const unreadable = (reason: string, cause?: unknown): KdsError =>
    new KdsError(
      "protocol_error",
      `the zone sent a frame the global cannot read (${reason}); it must be one kds.mux.v1.Frame in the call's codec`,
      { cause },
    );
  const chunks = request[Symbol.asyncIterator].bind(request);
  Object.defineProperty(request, Symbol.asyncIterator, {
    configurable: true,
    value: async function* scanned(): AsyncGenerator<Buffer, void, undefined> {
      const splitter = new EnvelopeSplitter(maxBytes, unreadable, true);
      for await (const chunk of { [Symbol.asyncIterator]: chunks } as AsyncIterable<Buffer>) {
        for (const { flags, body } of splitter.push(chunk)) {
          if ((flags & NOT_A_FRAME) !== 0) continue;
          const frame =
            (flags & COMPRESSED) !== 0 ? decompress(body, encoding, maxBytes, unreadable) : body;
          const refused = json ? jsonRefusal(frame) : scanRefusal(frame);
          if (refused !== undefined) throw unreadable(refused);
        }
        yield chunk;
      }
    },
  });
}

/** The encoding a streaming request's messages are compressed with: gRPC's and gRPC-web's header, or Connect's. */
function contentEncoding(headers: NodeRequest["headers"]): string {
  const value = headers["grpc-encoding"] ?? headers["connect-content-encoding"] ?? "identity";
  return (Array.isArray(value) ? (value[0] ?? "identity") : value).trim().toLowerCase();
}

function decompress(
  body: Buffer,
  encoding: string,
  maxBytes: number,
  unreadable: (reason: string, cause?: unknown) => KdsError,
): Buffer {
  try {
    if (encoding === "gzip") return gunzipSync(body, { maxOutputLength: maxBytes });
    if (encoding === "br") return brotliDecompressSync(body, { maxOutputLength: maxBytes });
  } catch (error) {
    throw unreadable(
      `a ${encoding} frame that does not decompress within the read limit of ${maxBytes} bytes`,
      error,
    );
  }
  throw unreadable(
    `a compressed frame in the encoding "${encoding}", which this global does not read; send gzip, br or uncompressed frames`,
  );
}

/** The JSON codec's bound: a frame may start at most as many values as a protobuf frame may hold elements. */
function jsonRefusal(text: Buffer): string | undefined {
  let starts = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === 0x7b || c === 0x5b || c === 0x2c) starts++; // { [ ,
  }
  return starts > MAX_FRAME_ELEMENTS
    ? `a JSON frame of ${text.length} bytes that may hold ${starts} values, over the ${MAX_FRAME_ELEMENTS} elements a frame may hold; split what it carries over several frames`
    : undefined;
}
