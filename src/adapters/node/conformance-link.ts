/**
 * The conformance kit's transport on Node: mux calls over gRPC on HTTP/2
 * (h2c or TLS), dialed to a global under test (global mode) or accepted
 * from a zone under test (zone mode). Frames are read with the same reader
 * as the global's own stream (`readGrpcFrames`).
 *
 * @module
 */
import * as http2 from "node:http2";
import type { AddressInfo, Socket } from "node:net";
import type { AcceptLink, DialLink, LinkEnd, MuxLink } from "../../conformance/link.ts";
import { KdsError } from "../../errors.ts";
import type { Frame } from "../../gen/kds/mux/v1/mux_pb.ts";
import { raceAbort } from "../../util/abort.ts";
import { grpcFrame, readGrpcFrames } from "./grpc-frames.ts";

/** The path of the mux call. */
const STREAM_PATH = "/kds.mux.v1.MultiplexService/StreamMessage";
/** The kit reads frames of up to this size: larger than any peer may send, so an oversized frame shows as what it is. */
const READ_LIMIT_BYTES = 64 << 20;

/** A mux call on one HTTP/2 stream, seen from either end. */
class StreamLink implements MuxLink {
  readonly headers: ReadonlyMap<string, string>;
  readonly ended: Promise<LinkEnd>;
  readonly #stream: http2.ClientHttp2Stream | http2.ServerHttp2Stream;
  readonly #frames: AsyncIterator<Frame>;
  #pending: Promise<Frame | undefined> | undefined;
  #readError = "";
  #trailers: http2.OutgoingHttpHeaders = { "grpc-status": "0" };

  constructor(
    stream: http2.ClientHttp2Stream | http2.ServerHttp2Stream,
    headers: ReadonlyMap<string, string>,
    ended: Promise<LinkEnd>,
  ) {
    this.#stream = stream;
    this.headers = headers;
    this.ended = ended;
    this.#frames = readGrpcFrames(
      stream,
      READ_LIMIT_BYTES,
      (reason, cause) =>
        new KdsError("protocol_error", `the peer sent an unreadable frame: ${reason}`, { cause }),
    );
    stream.on("wantTrailers", () =>
      (stream as http2.ServerHttp2Stream).sendTrailers(this.#trailers),
    );
  }

  write(frames: readonly Frame[]): void {
    if (this.#stream.destroyed || this.#stream.writableEnded) return; // the call is over: how it ended is in `ended`
    this.#stream.write(Buffer.concat(frames.map((f) => grpcFrame(f))));
  }

  read(signal: AbortSignal): Promise<Frame | undefined> {
    this.#pending ??= this.#frames.next().then(
      (r) => (r.done === true ? undefined : r.value),
      (error: unknown) => {
        // Not lost: a read that fails ends the peer's direction, and the reason goes into the link's end.
        this.#readError = error instanceof Error ? error.message : String(error);
        return undefined;
      },
    );
    const pending = this.#pending;
    return raceAbort(pending, signal, "reading the peer's next frame").then((frame) => {
      if (this.#pending === pending && frame !== undefined) this.#pending = undefined;
      return frame;
    });
  }

  /** Why reading failed, if it did. */
  get readError(): string {
    return this.#readError;
  }

  close(status?: { grpcStatus: number; kdsErrorCode?: string; message?: string }): void {
    if (status !== undefined) {
      this.#trailers = { "grpc-status": String(status.grpcStatus) };
      if (status.message !== undefined)
        this.#trailers["grpc-message"] = encodeURIComponent(status.message);
      if (status.kdsErrorCode !== undefined) this.#trailers["kds-error-code"] = status.kdsErrorCode;
    }
    if (!this.#stream.destroyed && !this.#stream.writableEnded) this.#stream.end();
  }

  cancel(): void {
    if (!this.#stream.destroyed) this.#stream.close(http2.constants.NGHTTP2_CANCEL);
  }
}

function headerMap(
  headers: http2.IncomingHttpHeaders | Readonly<Record<string, string>>,
): Map<string, string> {
  return new Map(
    Object.entries(headers).flatMap(([k, v]) =>
      v === undefined
        ? []
        : [[k.toLowerCase(), Array.isArray(v) ? v.join(", ") : String(v)] as [string, string]],
    ),
  );
}

/** Options of {@link conformanceDialer}. */
export interface ConformanceDialOptions {
  /** The global's zone-facing URL (http:// for h2c, https:// for TLS). */
  readonly url: string;
  /** PEM of the CA that signed the global's certificate (https). */
  readonly caPem?: string;
  /** How long one dial may take until the connection is up, in ms. Default 10 s. */
  readonly connectTimeoutMs?: number;
}

/**
 * Dials mux calls to a global under test, one HTTP/2 connection per call
 * (so one call's end cannot disturb the next). A dial settles in every
 * case: connected, refused, cancelled through its signal, closed before it
 * connected (a connection destroyed then emits neither `connect` nor
 * `error`), or not up within `connectTimeoutMs`.
 */
export function conformanceDialer(options: ConformanceDialOptions): DialLink {
  const connectMs = options.connectTimeoutMs ?? 10_000;
  return (headers, signal) =>
    new Promise<MuxLink>((resolve, reject) => {
      if (signal.aborted) {
        reject(
          new KdsError(
            "aborted",
            "dialing the global under test was cancelled through its AbortSignal",
          ),
        );
        return;
      }
      const session = http2.connect(
        options.url,
        options.caPem === undefined ? {} : { ca: options.caPem },
      );
      let connected = false;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const fail = (error: KdsError): void => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        session.off("error", connectFailed);
        session.off("close", closedEarly);
        session.on("error", () => undefined); // this dial has failed with its reason; a later error of the dead connection adds nothing
        session.destroy();
        reject(error);
      };
      const onAbort = (): void => {
        // After connecting, an abort ends the call, whose end the link reports.
        if (connected) void session.destroy();
        else
          fail(
            new KdsError(
              "aborted",
              "dialing the global under test was cancelled through its AbortSignal",
            ),
          );
      };
      signal.addEventListener("abort", onAbort, { once: true });
      const unreachable = (why: string, cause?: Error): KdsError =>
        new KdsError(
          "transport",
          `cannot reach the global under test at ${options.url} (${why}); check the URL (the address the global serves zones on) and that it is running`,
          { cause },
        );
      const connectFailed = (error: Error): void => fail(unreachable(error.message, error));
      const closedEarly = (): void => fail(unreachable("the connection closed before it was up"));
      timer = setTimeout(
        () => fail(unreachable(`the connection was not up within ${connectMs} ms`)),
        connectMs,
      );
      session.once("error", connectFailed);
      session.once("close", closedEarly);
      session.once("connect", () => {
        if (session.destroyed || signal.aborted) return; // `close` (or the abort) settles this dial
        connected = true;
        clearTimeout(timer);
        session.off("error", connectFailed);
        session.off("close", closedEarly);
        session.on("error", () => undefined); // a connection error ends the call, whose end the link reports
        const stream = session.request({
          ":method": "POST",
          ":path": STREAM_PATH,
          "content-type": "application/grpc+proto",
          te: "trailers",
          ...headers,
        });
        let responseHeaders: http2.IncomingHttpHeaders = {};
        let trailers: http2.IncomingHttpHeaders = {};
        let headersEnded = false;
        let resetWhy = "";
        stream.on("response", (h, flags) => {
          responseHeaders = h;
          headersEnded = (flags & http2.constants.NGHTTP2_FLAG_END_STREAM) !== 0;
        });
        stream.on("trailers", (t) => (trailers = t));
        stream.on("error", (error: Error) => (resetWhy = error.message));
        // The call has ended once its status arrived (in the trailers, or in the headers of a trailers-only answer), even while the kit's side is open.
        const ended = new Promise<LinkEnd>((done) => {
          const finish = (): void => {
            const all = { ...responseHeaders, ...trailers };
            const status = all["grpc-status"];
            const message = all["grpc-message"];
            done({
              statusIn:
                trailers["grpc-status"] !== undefined ||
                (responseHeaders["grpc-status"] !== undefined && headersEnded)
                  ? "trailers"
                  : responseHeaders["grpc-status"] !== undefined
                    ? "headers-open"
                    : undefined,
              grpcStatus: status === undefined ? undefined : Number(status),
              kdsErrorCode:
                all["kds-error-code"] === undefined ? undefined : String(all["kds-error-code"]),
              message:
                message !== undefined
                  ? decodeURIComponent(String(message))
                  : status !== undefined
                    ? ""
                    : resetWhy !== ""
                      ? resetWhy
                      : `the stream closed without a status (RST_STREAM ${stream.rstCode ?? "none"}, HTTP ${String(responseHeaders[":status"] ?? "none")})`,
            });
          };
          // Read once the stream closed, when the frame's flags are known: a status in headers that end the stream is Trailers-Only.
          stream.on("response", (h, flags) => {
            if (
              h["grpc-status"] !== undefined &&
              (flags & http2.constants.NGHTTP2_FLAG_END_STREAM) !== 0
            )
              finish();
          });
          stream.on("trailers", () => finish());
          stream.once("close", () => {
            signal.removeEventListener("abort", onAbort);
            session.close();
            finish();
          });
        });
        resolve(new StreamLink(stream, headerMap(headers), ended));
      });
    });
}

/** A listener the zone under test dials; {@link ConformanceListener.accept} hands out its calls one by one. */
export interface ConformanceListener {
  /** The URL the zone should dial (its --global). */
  readonly url: string;
  /** The next mux call a zone opened. */
  readonly accept: AcceptLink;
  /** Stops listening and ends every connection. */
  close(): Promise<void>;
}

/** How many calls may wait to be accepted; more are refused with UNAVAILABLE (the kit runs one session at a time). */
const ACCEPT_BACKLOG = 4;

/** Listens on `host:port` (h2c) for the zone under test. */
export function listenForZone(
  host: string,
  port: number,
  signal: AbortSignal,
): Promise<ConformanceListener> {
  const server = http2.createServer();
  const backlog: MuxLink[] = [];
  let waiter: ((link: MuxLink) => void) | undefined;
  server.on("stream", (stream, headers) => {
    if (headers[":path"] !== STREAM_PATH) {
      stream.respond({ ":status": 404 }, { endStream: true });
      return;
    }
    if (backlog.length >= ACCEPT_BACKLOG) {
      stream.respond(
        {
          ":status": 200,
          "content-type": "application/grpc+proto",
          "grpc-status": "14",
          "grpc-message": "the conformance kit runs one session at a time; retry",
        },
        { endStream: true },
      );
      return;
    }
    stream.on("error", () => undefined); // a reset ends the call, which `ended` reports
    stream.respond(
      { ":status": 200, "content-type": "application/grpc+proto" },
      { waitForTrailers: true },
    );
    const ended = new Promise<LinkEnd>((done) =>
      stream.once("close", () =>
        done({
          grpcStatus: undefined,
          kdsErrorCode: undefined,
          message: `the call closed (RST_STREAM ${stream.rstCode ?? "none"})`,
        }),
      ),
    );
    const link = new StreamLink(stream, headerMap(headers), ended);
    if (waiter !== undefined) {
      const w = waiter;
      waiter = undefined;
      w(link);
    } else backlog.push(link);
  });
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
    s.on("error", () => undefined); // a connection error ends its calls, which their links report
  });
  // Every connection, also one whose HTTP/2 session is not up yet: the server's close waits for them all to end.
  const sockets = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  const close = (): Promise<void> =>
    new Promise((resolve) => {
      for (const s of sessions) s.destroy();
      for (const socket of sockets) socket.destroy();
      server.close(() => resolve());
    });
  signal.addEventListener("abort", () => void close(), { once: true });
  return new Promise((resolve, reject) => {
    server.once("error", (error: Error) =>
      reject(
        new KdsError(
          "transport",
          `cannot listen on ${host}:${port} (${error.message}); pick a free address`,
          { cause: error },
        ),
      ),
    );
    server.listen(port, host, () => {
      const address = server.address() as AddressInfo;
      resolve({
        url: `http://${host.includes(":") ? `[${host}]` : host}:${address.port}`,
        accept: (acceptSignal) => {
          const ready = backlog.shift();
          if (ready !== undefined) return Promise.resolve(ready);
          let mine: ((link: MuxLink) => void) | undefined;
          const waiting = raceAbort(
            new Promise<MuxLink>((r) => (waiter = mine = r)),
            acceptSignal,
            "waiting for the zone under test to dial",
          );
          // A wait that gave up leaves no waiter behind: the zone's next call goes to the backlog for the next accept, not to a promise nobody reads.
          return waiting.catch((error: unknown) => {
            if (waiter === mine) waiter = undefined;
            throw error;
          });
        },
        close,
      });
    });
  });
}
