/**
 * The half-duplex transport, for zones whose HTTP client cannot stream a
 * request body (browsers and other fetch-based clients, connect-web,
 * HTTP/1.1): the global's frames come down one server stream (Pull), the
 * zone's frames go up as ordered unary calls (Push). Frames are numbered per
 * direction and acknowledged, so a dropped Pull or a failed Push is resumed
 * or retried without losing or repeating a frame. The session on top is the
 * same as over a full-duplex stream.
 *
 * Give it a transport in binary format (connect-web's Connect transport
 * defaults to JSON, which cannot carry Any payloads of types it does not
 * know): `createConnectTransport({ baseUrl, useBinaryFormat: true })`, or a
 * gRPC-web transport.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { KdsError } from "../../errors.ts";
import {
  HalfDuplexService,
  PushRequestSchema,
  type PullResponse,
} from "../../gen/kds/mux/v1/half_duplex_pb.ts";
import type { Frame } from "../../gen/kds/mux/v1/mux_pb.ts";
import { anySignal, sleep } from "../../util/abort.ts";
import { backoffCeiling, type ResolvedBackoff } from "../../util/backoff.ts";
import { systemClock, type Clock } from "../../util/clock.ts";
import { Waker } from "../../util/wake.ts";
import { fromConnectError, KDS_ERROR_CODE_HEADER } from "../../connect-errors.ts";
import type { MuxDialRequest, MuxTransport } from "../transport.ts";

/** Delays between attempts to re-open a broken Pull or to retry a Push: 50 ms doubling to 2 s. */
const RESUME_BACKOFF: ResolvedBackoff = { baseMs: 50, capMs: 2_000, resetAfterMs: 0 };

/** Failures a Push retries (the network or the server was briefly away); others end the link. */
const retryable: ReadonlySet<Code> = new Set([
  Code.Unavailable,
  Code.Unknown,
  Code.DeadlineExceeded,
  Code.Aborted,
  Code.Canceled,
]);

/** Options of {@link halfDuplexMuxTransport}. */
export interface HalfDuplexTransportOptions {
  /** Name for logs. Default "half-duplex". */
  name?: string;
  /** Where it dials, for error messages. */
  target?: string;
  /** Most frames per Push call. Default 64. */
  maxFramesPerPush?: number;
  /** Most of the zone's frames kept while unacknowledged. Default 1024. */
  maxUnacked?: number;
  /** Give up resuming a dropped leg after this long (the session then ends). Default 20 s. */
  resumeTimeoutMs?: number;
  /** Acknowledge received frames after this many, even with nothing to push. Default 16. */
  ackEvery?: number;
  /** Times the resume timeout and the retry backoff. Default {@link systemClock}; tests step a manual one. */
  clock?: Clock;
}

/** A {@link MuxTransport} over any Connect transport, using only unary and server-streaming calls. */
export function halfDuplexMuxTransport(
  transport: Transport,
  options: HalfDuplexTransportOptions = {},
): MuxTransport {
  return {
    name: options.name ?? "half-duplex",
    open: (request) => new HalfDuplexLink(transport, request, options).open(),
  };
}

class HalfDuplexLink {
  readonly #client;
  readonly #request: MuxDialRequest;
  readonly #target: string;
  readonly #maxFrames: number;
  readonly #maxUnacked: number;
  readonly #resumeTimeoutMs: number;
  readonly #ackEvery: number;
  readonly #clock: Clock;
  #linkId = "";
  /** Highest seq of the global's frames received. */
  #received = 0n;
  /** Highest seq of the global's frames acknowledged to it. */
  #reported = 0n;
  /** The zone's frames not yet acknowledged; seqs consecutive from #firstUnacked. */
  readonly #outgoing: Frame[] = [];
  #firstUnacked = 1n;
  #outboundDone = false;
  /** Wakes the push loop: frames to push or receipts to report. */
  readonly #pusher = new Waker();
  /** Wakes the outbound reader: room freed among the unacknowledged frames. */
  readonly #reader = new Waker();
  /** Set when the link cannot go on; the inbound stream then fails with it. */
  #fatal: KdsError | undefined;
  /** Aborts the link's calls: the dial's signal, or a fatal error. */
  readonly #abort = new AbortController();
  readonly #signal: AbortSignal;

  constructor(transport: Transport, request: MuxDialRequest, options: HalfDuplexTransportOptions) {
    this.#client = createClient(HalfDuplexService, transport);
    this.#request = request;
    this.#target = options.target ?? "the global";
    this.#maxFrames = options.maxFramesPerPush ?? 64;
    this.#maxUnacked = options.maxUnacked ?? 1024;
    this.#resumeTimeoutMs = options.resumeTimeoutMs ?? 20_000;
    this.#ackEvery = options.ackEvery ?? 16;
    this.#clock = options.clock ?? systemClock;
    this.#signal = anySignal([request.signal, this.#abort.signal]);
  }

  /** Ends the link with `error`: the session reading it ends with that reason. */
  #fail(error: KdsError): void {
    this.#fatal ??= error;
    this.#abort.abort(error);
  }

  /** Opens the link (admission happens here) and starts pushing. */
  async open(): Promise<AsyncIterable<Frame>> {
    const first = await this.#openPull();
    void this.#readOutbound().catch((error: unknown) =>
      this.#fail(
        new KdsError("transport", `reading the session's frames failed: ${String(error)}`, {
          cause: error,
        }),
      ),
    );
    // The loop handles a failed Push itself; an error escaping it is unexpected, and ends the link with its reason rather than leaving the zone's frames unsent.
    void this.#pushLoop().catch((error: unknown) =>
      this.#fail(
        new KdsError("transport", `pushing the zone's frames stopped: ${String(error)}`, {
          cause: error,
        }),
      ),
    );
    return this.#inbound(first);
  }

  async #openPull(): Promise<AsyncIterator<PullResponse>> {
    const headers = this.#request.headers;
    try {
      const stream = this.#client
        .pull({ linkId: this.#linkId, ackedSeq: this.#received }, { headers, signal: this.#signal })
        [Symbol.asyncIterator]();
      const opening = await stream.next();
      if (opening.done === true || opening.value.linkId === "")
        throw new KdsError("protocol_error", "the global opened no half-duplex link");
      this.#linkId = opening.value.linkId;
      this.#acknowledged(opening.value.pushAckedSeq);
      return stream;
    } catch (error) {
      throw fromConnectError(error, this.#target);
    }
  }

  /** The global's frames, in order, exactly once; resumes a dropped Pull. */
  async *#inbound(first: AsyncIterator<PullResponse>): AsyncGenerator<Frame, void, undefined> {
    let stream = first;
    for (;;) {
      let response: IteratorResult<PullResponse>;
      try {
        response = await stream.next();
      } catch (error) {
        if (this.#fatal !== undefined) throw this.#fatal;
        if (this.#request.signal.aborted) throw error;
        // The global ended the Pull with the session's end (a status carrying a kds-mux error code): there is nothing to resume.
        if (error instanceof ConnectError && error.metadata.has(KDS_ERROR_CODE_HEADER))
          throw fromConnectError(error, this.#target);
        stream = await this.#resume(error);
        continue;
      }
      if (response.done === true) {
        stream = await this.#resume(new Error("the Pull stream ended without the end marker"));
        continue;
      }
      const { seq, frame, end, pushAckedSeq } = response.value;
      this.#acknowledged(pushAckedSeq);
      if (end) return;
      if (frame === undefined || seq <= this.#received) continue; // a resend of something already delivered
      if (seq !== this.#received + 1n)
        throw new KdsError(
          "protocol_error",
          `half-duplex frame ${seq} arrived after ${this.#received}`,
        );
      this.#received = seq;
      if (this.#received - this.#reported >= BigInt(this.#ackEvery)) this.#pusher.wake();
      yield frame;
    }
  }

  /** Re-opens Pull with backoff until it works or the resume timeout passes. */
  async #resume(cause: unknown): Promise<AsyncIterator<PullResponse>> {
    const deadline = this.#clock.now() + this.#resumeTimeoutMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#openPull();
      } catch (error) {
        if (
          this.#request.signal.aborted ||
          KdsError.is(error, "session_closed") ||
          this.#clock.now() > deadline
        ) {
          throw new KdsError(
            "transport",
            `the half-duplex link to ${this.#target} broke and could not be resumed within ${this.#resumeTimeoutMs} ms: ${String(error)}`,
            {
              cause: cause ?? error,
            },
          );
        }
      }
      await sleep(backoffCeiling(attempt, RESUME_BACKOFF), this.#request.signal, this.#clock);
    }
  }

  /** Takes the session's frames while fewer than `maxUnacked` wait. */
  async #readOutbound(): Promise<void> {
    const iterator = this.#request.outbound[Symbol.asyncIterator]();
    try {
      for (;;) {
        while (this.#outgoing.length >= this.#maxUnacked) {
          await this.#reader.wait(this.#request.signal);
          if (this.#request.signal.aborted) return;
        }
        const r = await iterator.next();
        if (r.done === true) break;
        this.#outgoing.push(r.value);
        this.#pusher.wake();
      }
    } finally {
      this.#outboundDone = true;
      this.#pusher.wake();
    }
  }

  /** One Push at a time: the oldest unacknowledged frames, retried until acknowledged. */
  async #pushLoop(): Promise<void> {
    const signal = this.#signal;
    let failingSince: number | undefined;
    let attempt = 0;
    while (!signal.aborted) {
      if (this.#outgoing.length === 0 && this.#received - this.#reported < BigInt(this.#ackEvery)) {
        if (this.#outboundDone) return;
        await this.#pusher.wait(signal);
        continue;
      }
      const frames = this.#outgoing.slice(0, this.#maxFrames);
      const pulled = this.#received;
      try {
        const response = await this.#client.push(
          create(PushRequestSchema, {
            linkId: this.#linkId,
            firstSeq: this.#firstUnacked,
            frames,
            pullAckedSeq: pulled,
          }),
          { headers: this.#request.headers, signal },
        );
        if (pulled > this.#reported) this.#reported = pulled;
        this.#acknowledged(response.ackedSeq);
        failingSince = undefined;
        attempt = 0;
      } catch (error) {
        if (signal.aborted) return;
        failingSince ??= this.#clock.now();
        const code = error instanceof ConnectError ? error.code : Code.Unknown;
        if (!retryable.has(code) || this.#clock.now() - failingSince > this.#resumeTimeoutMs) {
          const kds = fromConnectError(error, this.#target);
          this.#fail(
            new KdsError(kds.code, `pushing the zone's frames failed: ${kds.message}`, {
              cause: error,
            }),
          );
          return;
        }
        // sleep rejects only when `signal` aborts, and the loop then ends: nothing to report
        await sleep(backoffCeiling(attempt++, RESUME_BACKOFF), signal, this.#clock).catch(
          () => undefined,
        );
      }
    }
  }

  /** Drops the zone's frames the global confirmed. */
  #acknowledged(seq: bigint): void {
    while (this.#firstUnacked <= seq && this.#outgoing.length > 0) {
      this.#outgoing.shift();
      this.#firstUnacked++;
    }
    this.#reader.wake();
  }
}
