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
import { PUSH_FRAMES, type FrameReceiver, type PushedFrames } from "../../mux/frame-push.ts";
import { traceContextsOf, tracesMarked, type WireTraceContext } from "../../mux/trace-context.ts";
import {
  SPAN_ATTRIBUTES,
  SPAN_NAMES,
  activeTracer,
  parseTraceparent,
} from "../../observe/tracing.ts";
import { ROOT_CONTEXT, trace } from "@opentelemetry/api";

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
  // Nothing to look for until a message was marked with a trace context (only while a tracing SDK is registered).
  if (tracesMarked()) {
    const contexts = traceContextsOf(frame);
    if (contexts.length > 0) return tracedEncode(frame, contexts);
  }
  const out = encodeFrame(frame, GRPC_PREFIX_BYTES, allocate) as Buffer;
  out[0] = 0;
  out.writeUInt32BE(out.length - GRPC_PREFIX_BYTES, 1);
  return out;
}

/** {@link grpcFrame}, recording a `kds.encode` span under each trace context the frame carries. */
function tracedEncode(frame: Frame, contexts: readonly WireTraceContext[]): Buffer {
  const start = performance.now();
  const out = encodeFrame(frame, GRPC_PREFIX_BYTES, allocate) as Buffer;
  out[0] = 0;
  out.writeUInt32BE(out.length - GRPC_PREFIX_BYTES, 1);
  const end = performance.now();
  const tracer = activeTracer();
  if (tracer === undefined) return out;
  for (const wire of contexts) {
    const remote = parseTraceparent(wire.traceparent, wire.tracestate);
    if (remote === undefined) continue;
    tracer
      .startSpan(
        SPAN_NAMES.encode,
        {
          startTime: start,
          attributes: {
            [SPAN_ATTRIBUTES.bytes]: out.length - GRPC_PREFIX_BYTES,
            [SPAN_ATTRIBUTES.frames]:
              frame.value.case === "batch" ? frame.value.value.frames.length : 1,
          },
        },
        // The sender's own span: not remote here, so the encode span is its child in this process.
        trace.setSpanContext(ROOT_CONTEXT, { ...remote, isRemote: false }),
      )
      .end(end);
  }
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

/** An empty buffer: what is left of a chunk that held whole messages only. */
const NO_BYTES = Buffer.alloc(0);

/** No messages: what a reader holds once it read every message of its last chunk. */
const NO_ENVELOPES: readonly Envelope[] = Object.freeze([]);

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
  #pending: Buffer = NO_BYTES;
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
      // A chunk holding exactly one message (nearly every chunk a zone reads): no empty view of what is left.
      pending = pending.length === this.#need ? NO_BYTES : pending.subarray(this.#need);
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
 * one at a time as they are pulled, with at most one chunk's messages
 * buffered (see {@link EnvelopeSplitter}). Each frame is weighed before it is
 * decoded (`readFrame`: its elements and decoded size), so a frame of
 * millions of tiny elements costs its bytes, never its objects. A compressed
 * flag is refused: both users only read streams without `grpc-encoding`.
 * Ends when the stream ends or closes; a stream error is thrown as it is.
 *
 * The stream is paused while a chunk waits to be read, so HTTP/2 flow
 * control pushes back on a peer whose frames are not taken. Unlike Node's
 * stream iterator, stopping early (`return`) leaves the stream open, so a
 * server can still send its status trailers. A stream already destroyed when
 * the reading starts ends at once (with its error, if any).
 *
 * A session takes them pushed instead (`PUSH_FRAMES`, mux/frame-push.ts):
 * each frame from the stream's data event, with no promise per frame and
 * the stream never paused (the session takes every frame at once, and its
 * credit bounds what the peer may send).
 */
export function readGrpcFrames(
  stream: Readable,
  maxBytes: number,
  unreadable: UnreadableFrame,
  hooks: ReadHooks = {},
): AsyncIterableIterator<Frame> & PushedFrames {
  return new GrpcFrameReader(stream, maxBytes, unreadable, hooks);
}

/**
 * What a caller of {@link readGrpcFrames} adds to the reading, in place of
 * an async generator around it (which cost a zone several promise hops per
 * frame): a check when the stream ended cleanly, the error the reader fails
 * with for any failure, and what runs once when the reading is over (done,
 * failed, or stopped by `return`).
 */
export interface ReadHooks {
  /** Runs when the stream ended after whole frames; a throw fails the reading instead of ending it. */
  readonly ended?: () => void;
  /** The error the reading fails with for `error` (thrown by the stream, the reader, or `ended`). Default `error` itself. */
  readonly failed?: (error: unknown) => unknown;
  /** Runs once when the reading is over. */
  readonly finished?: () => void;
}

/** What {@link GrpcFrameReader}'s pending `next` settles with. */
interface ReadWaiter {
  resolve(result: IteratorResult<Frame, undefined>): void;
  reject(reason: unknown): void;
}

/**
 * {@link readGrpcFrames}, written out by hand rather than as two async
 * generators (chunks, then frames): a frame that arrives while the reader
 * waits settles its `next` from the stream's data event directly. Every ACK
 * of every zone comes through here, and the two generator layers cost
 * several promise hops and allocations per frame.
 */
class GrpcFrameReader implements AsyncIterableIterator<Frame>, PushedFrames {
  readonly #stream: Readable;
  readonly #splitter: EnvelopeSplitter;
  readonly #unreadable: UnreadableFrame;
  readonly #hooks: ReadHooks;
  /** Chunks received and not yet split. */
  readonly #chunks: Buffer[] = [];
  /** The messages of the chunk split last, and how many of them were read. */
  #envelopes: readonly Envelope[] = NO_ENVELOPES;
  #next = 0;
  #ended = false;
  #failure: unknown;
  /** Listeners removed: every read from now on is done. */
  #finished = false;
  #waiter: ReadWaiter | undefined;
  /** Settles once the pending `next` has: a `next` called meanwhile reads after it. */
  #pending: Promise<unknown> | undefined;
  /** Where frames are pushed (see mux/frame-push.ts), once the reader asked for that instead of `next`. */
  #receiver: FrameReceiver | undefined;

  constructor(stream: Readable, maxBytes: number, unreadable: UnreadableFrame, hooks: ReadHooks) {
    this.#stream = stream;
    this.#splitter = new EnvelopeSplitter(maxBytes, unreadable, false);
    this.#unreadable = unreadable;
    this.#hooks = hooks;
    // `on`, not `once`: each of these fires at most once per stream, and `once` wraps a listener in a record and a
    // bound function (about 110 bytes) that every idle zone's stream held for its life. `#finish` removes them.
    stream.on("data", this.#onData);
    stream.on("end", this.#onEnd);
    stream.on("close", this.#onEnd);
    stream.on("error", this.#onError);
    // A stream destroyed before this reader started has emitted its end or error already.
    if (stream.destroyed) {
      this.#ended = true;
      this.#failure = stream.errored ?? undefined;
    }
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<Frame> {
    return this;
  }

  next(): Promise<IteratorResult<Frame, undefined>> {
    if (this.#waiter !== undefined) {
      const after = (): Promise<IteratorResult<Frame, undefined>> => this.next();
      return (this.#pending as Promise<unknown>).then(after, after);
    }
    let result: IteratorResult<Frame, undefined> | undefined;
    try {
      result = this.#pull();
    } catch (error) {
      return Promise.reject(error);
    }
    if (result !== undefined) return Promise.resolve(result);
    const pending = new Promise<IteratorResult<Frame, undefined>>((resolve, reject) => {
      this.#waiter = { resolve, reject };
    });
    this.#pending = pending;
    return pending;
  }

  /**
   * Pushes every frame to `receiver` as it is read, from the stream's data
   * event: no promise per frame, and the stream is not paused (the reader
   * takes each frame at once; the session's credit bounds what the peer may
   * send).
   */
  [PUSH_FRAMES](receiver: FrameReceiver): void {
    if (this.#receiver !== undefined || this.#waiter !== undefined)
      throw new TypeError("the frames of a stream have one reader: they are already being read");
    this.#receiver = receiver;
    this.#push();
  }

  /** Hands the receiver every frame that can be read now, then the end or the failure if it came. */
  #push(): void {
    const receiver = this.#receiver;
    while (receiver !== undefined && this.#receiver === receiver) {
      let result: IteratorResult<Frame, undefined> | undefined;
      try {
        result = this.#pull();
      } catch (error) {
        this.#receiver = undefined;
        receiver.fail(error);
        return;
      }
      if (result === undefined) return;
      if (result.done === true) {
        this.#receiver = undefined;
        receiver.end();
        return;
      }
      if (!receiver.frame(result.value)) {
        this.#receiver = undefined;
        return;
      }
    }
  }

  return(): Promise<IteratorResult<Frame, undefined>> {
    this.#finish();
    this.#receiver = undefined;
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.resolve({ done: true, value: undefined });
    return Promise.resolve({ done: true, value: undefined });
  }

  throw(error: unknown): Promise<IteratorResult<Frame, undefined>> {
    void this.return();
    return Promise.reject(error);
  }

  /** The next frame, the end, or undefined when nothing is there yet; throws what the read fails with (and is done then). */
  #pull(): IteratorResult<Frame, undefined> | undefined {
    if (this.#finished) return { done: true, value: undefined };
    try {
      for (;;) {
        const envelopes = this.#envelopes;
        const envelope = envelopes[this.#next];
        if (envelope !== undefined) {
          // The last message of a chunk lets go of the chunk's list at once, not at the next chunk: a zone's
          // next ACK comes a change later, and whatever lives that long is copied by every young collection
          // meanwhile and then promoted to the old generation (a global's heap grew by it with each change).
          if (++this.#next === envelopes.length) {
            this.#envelopes = NO_ENVELOPES;
            this.#next = 0;
          }
          return { done: false, value: this.#decode(envelope.body) };
        }
        // Every message of the last chunk was read: the stream may flow again once no chunk waits.
        const chunk = this.#chunks.shift();
        if (chunk === undefined) {
          if (this.#stream.isPaused()) this.#stream.resume();
          break;
        }
        this.#envelopes = this.#splitter.push(chunk);
        this.#next = 0;
      }
      if (this.#failure !== undefined) throw this.#failure;
      if (this.#ended) {
        const left = this.#splitter.left;
        if (left > 0)
          throw this.#unreadable(`the stream ended inside a frame (${left} bytes left)`);
        this.#hooks.ended?.();
        this.#finish();
        return { done: true, value: undefined };
      }
      return undefined;
    } catch (error) {
      this.#finish();
      const failed = this.#hooks.failed;
      throw failed === undefined ? error : failed(error);
    }
  }

  #decode(body: Buffer): Frame {
    return readFrame(body, this.#unreadable);
  }

  /** Settles the pending `next`, if any, with what can be read now. */
  #wake(): void {
    const waiter = this.#waiter;
    if (waiter === undefined) return;
    let result: IteratorResult<Frame, undefined> | undefined;
    try {
      result = this.#pull();
    } catch (error) {
      this.#waiter = undefined;
      waiter.reject(error);
      return;
    }
    if (result === undefined) return;
    this.#waiter = undefined;
    waiter.resolve(result);
  }

  readonly #onData = (chunk: Buffer): void => {
    this.#chunks.push(chunk);
    if (this.#receiver !== undefined) {
      this.#push();
      return;
    }
    // A reader already waiting takes this chunk now: no pause and resume for it (one per ACK of every zone).
    // Any further chunk before the reader asks again pauses the stream, as one does while the reader is busy.
    if (this.#waiter === undefined) this.#stream.pause();
    else this.#wake();
  };

  readonly #onEnd = (): void => {
    this.#ended = true;
    if (this.#receiver !== undefined) this.#push();
    else this.#wake();
  };

  readonly #onError = (error: unknown): void => {
    this.#failure = error;
    if (this.#receiver !== undefined) this.#push();
    else this.#wake();
  };

  #finish(): void {
    if (this.#finished) return;
    this.#finished = true;
    this.#stream.off("data", this.#onData);
    this.#stream.off("end", this.#onEnd);
    this.#stream.off("close", this.#onEnd);
    this.#stream.off("error", this.#onError);
    this.#hooks.finished?.();
  }
}
