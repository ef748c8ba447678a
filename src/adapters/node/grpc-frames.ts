/**
 * gRPC's length-prefixed messages on a node:http2 stream, shared by the
 * global's direct mux stream (mux-stream.ts) and the zone's gRPC client
 * (grpc-mux-client.ts): one reader, one envelope, one drain wait.
 *
 * @module
 */
import type { Readable, Writable } from "node:stream";
import type { Frame } from "../../gen/kds/mux/v1/mux_pb.ts";
import { encodeFrame } from "../../mux/frame-encode.ts";
import { readFrame } from "../../mux/frame-decode.ts";

/** gRPC's length-prefixed message header: a flags byte and a 32-bit big-endian length. */
export const GRPC_PREFIX_BYTES = 5;

/** Builds the error for a frame that cannot be read; `reason` says why. */
export type UnreadableFrame = (reason: string, cause?: unknown) => Error;

/** `body` as one uncompressed gRPC message: flag byte 0, big-endian length, body. */
export function grpcEnvelope(body: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(GRPC_PREFIX_BYTES + body.length);
  frame[0] = 0;
  frame.writeUInt32BE(body.length, 1);
  frame.set(body, GRPC_PREFIX_BYTES);
  return frame;
}

/**
 * `frame` as one uncompressed gRPC message, encoded straight behind its
 * prefix (`encodeFrame`: a delta response is written once, not copied per
 * nesting level and then again behind the prefix).
 */
export function grpcFrame(frame: Frame): Buffer {
  const out = encodeFrame(frame, GRPC_PREFIX_BYTES, allocate) as Buffer;
  out[0] = 0;
  out.writeUInt32BE(out.length - GRPC_PREFIX_BYTES, 1);
  return out;
}

const allocate = (bytes: number): Uint8Array => Buffer.allocUnsafe(bytes);

/** Resolves when `stream` can take more writes, or has closed. */
export function drained(stream: Writable): Promise<void> {
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

/** One length-prefixed message: its flags byte and its body. */
export interface Envelope {
  readonly flags: number;
  readonly body: Buffer;
}

/**
 * Splits a byte stream into length-prefixed messages (gRPC's, and the same
 * framing gRPC-web and Connect streams use), holding at most one message
 * (`maxBytes`) and the chunk that completes it: a message's length is
 * checked against `maxBytes` before its body is buffered, and its chunks are
 * kept apart until it is whole and joined once (joining on every chunk
 * copied a 4 MiB frame's bytes about 250 times).
 */
export class EnvelopeSplitter {
  readonly #maxBytes: number;
  readonly #unreadable: UnreadableFrame;
  readonly #compressed: boolean;
  #pending: Buffer = Buffer.alloc(0);
  readonly #parts: Buffer[] = [];
  #partBytes = 0;
  /** Bytes the message being read needs in all: its prefix, then prefix and body once the length is known. */
  #need = GRPC_PREFIX_BYTES;

  /**
   * @param maxBytes - the largest body
   * @param unreadable - builds the error for a message over it (or compressed, when refused)
   * @param compressed - whether a message may carry the compressed flag; refused as soon as its prefix arrives when not
   */
  constructor(maxBytes: number, unreadable: UnreadableFrame, compressed: boolean) {
    this.#maxBytes = maxBytes;
    this.#unreadable = unreadable;
    this.#compressed = compressed;
  }

  /** Takes the next chunk; returns the messages it completes, in order. Throws for a message over `maxBytes`, or a refused compressed one. */
  push(chunk: Buffer): Envelope[] {
    this.#parts.push(chunk);
    this.#partBytes += chunk.length;
    if (this.#pending.length + this.#partBytes < this.#need) return [];
    // A chunk that starts with a message (nothing left over before it), as nearly every ACK does: no copy.
    let pending =
      this.#pending.length === 0 && this.#parts.length === 1
        ? (this.#parts[0] as Buffer)
        : Buffer.concat([this.#pending, ...this.#parts]);
    this.#parts.length = 0;
    this.#partBytes = 0;
    const out: Envelope[] = [];
    while (pending.length >= GRPC_PREFIX_BYTES) {
      if (!this.#compressed && ((pending[0] as number) & 1) !== 0)
        throw this.#unreadable("a compressed frame on a stream without grpc-encoding");
      const length = pending.readUInt32BE(1);
      if (length > this.#maxBytes)
        throw this.#unreadable(
          `a frame of ${length} bytes, above the read limit of ${this.#maxBytes}`,
        );
      this.#need = GRPC_PREFIX_BYTES + length;
      if (pending.length < this.#need) break;
      out.push({
        flags: pending[0] as number,
        body: pending.subarray(GRPC_PREFIX_BYTES, this.#need),
      });
      pending = pending.subarray(this.#need);
      this.#need = GRPC_PREFIX_BYTES;
    }
    this.#pending = pending;
    return out;
  }

  /** Bytes received that no complete message holds yet. */
  get left(): number {
    return this.#pending.length + this.#partBytes;
  }
}

/**
 * The mux frames in gRPC's length-prefixed messages on `stream`, decoded
 * one at a time as they are pulled, with at most one frame buffered (see
 * {@link EnvelopeSplitter}). Each frame is weighed before it is decoded
 * (`readFrame`: its elements and decoded size), so a frame of millions of
 * tiny elements costs its bytes, never its objects. A compressed flag is
 * refused: both users only read streams without `grpc-encoding`. Ends when
 * the stream ends or closes; a stream error is thrown as it is.
 */
export async function* readGrpcFrames(
  stream: Readable,
  maxBytes: number,
  unreadable: UnreadableFrame,
): AsyncGenerator<Frame, void, undefined> {
  const splitter = new EnvelopeSplitter(maxBytes, unreadable, false);
  for await (const chunk of chunksOf(stream)) {
    for (const { body } of splitter.push(chunk)) {
      yield readFrame(body, unreadable);
    }
  }
  if (splitter.left > 0)
    throw unreadable(`the stream ended inside a frame (${splitter.left} bytes left)`);
}

/**
 * The chunks of `stream` as they are asked for: it is paused while a chunk
 * waits, so HTTP/2 flow control pushes back on a peer whose frames are not
 * taken. Unlike Node's stream iterator, stopping early leaves the stream
 * open, so a server can still send its status trailers. A stream already
 * destroyed when the reading starts ends at once (with its error, if any).
 */
async function* chunksOf(stream: Readable): AsyncGenerator<Buffer, void, undefined> {
  const waiting: Buffer[] = [];
  let ended = false;
  let failure: unknown;
  let wake: (() => void) | undefined;
  const onData = (chunk: Buffer): void => {
    waiting.push(chunk);
    // A reader already waiting takes this chunk next: no pause and resume for it (one per ACK of every zone).
    // Any further chunk before it runs pauses the stream, as one does while the reader is busy.
    const waiter = wake;
    wake = undefined;
    if (waiter === undefined) stream.pause();
    else waiter();
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
  // A stream destroyed before this reader started has emitted its end or error already.
  if (stream.destroyed) {
    ended = true;
    failure = stream.errored ?? undefined;
  }
  try {
    for (;;) {
      const chunk = waiting.shift();
      if (chunk !== undefined) {
        yield chunk;
        if (waiting.length === 0 && stream.isPaused()) stream.resume();
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
