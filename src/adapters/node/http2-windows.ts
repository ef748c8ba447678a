/**
 * HTTP/2 flow-control windows for a zone's connect-node transport, sized to
 * the mux's own byte window instead of Node's 64 KiB defaults.
 *
 * Why: HTTP/2 lets a sender be at most a window ahead of what the receiver's
 * HTTP/2 layer has taken in. Node takes data in (and sends WINDOW_UPDATE) only
 * when its event loop runs, so while a zone is busy applying one response the
 * global can push only 64 KiB of the next, and the zone then waits for the
 * rest round trip by round trip. The mux already bounds what a peer may send
 * ahead with its own byte credit (8 MiB per lane by default, see
 * `SessionOptions.responseWindowBytes`), so an HTTP/2 window of the same size
 * lets the global put what the mux allows on the wire while the zone works.
 *
 * Memory: the window is what the global may send before the zone reads. The
 * zone's mux reads its stream as soon as data arrives (it never waits for a
 * consumer) and holds at most its byte credit, so a window as large as that
 * credit adds no buffering the mux does not already allow. On the global it
 * only moves bytes the global's mux has already queued for the zone out of
 * the global's process sooner. The global's listener keeps Node's default
 * receive windows: there a window is memory each of many peers may fill per
 * stream before a handler reads.
 *
 * @module
 */
import { Http2SessionManager } from "@connectrpc/connect-node";
import type * as http2 from "node:http2";

/**
 * The HTTP/2 receive windows {@link windowedSessionManager} gives a
 * connection and each stream by default: 8 MiB, the mux's default byte window
 * per lane (`defaultSessionOptions.responseWindowBytes`).
 */
export const DEFAULT_HTTP2_WINDOW_BYTES = 8 * 1024 * 1024;

/** The largest window HTTP/2 allows (2^31 - 1). */
const MAX_HTTP2_WINDOW = 2 ** 31 - 1;

/** `bytes` as an HTTP/2 window: whole, at least HTTP/2's default of 65,535, at most 2^31 - 1. */
export function http2Window(bytes: number): number {
  return Math.min(MAX_HTTP2_WINDOW, Math.max(65_535, Math.floor(bytes)));
}

/**
 * A connect-node HTTP/2 session manager for `baseUrl` whose connections
 * announce a receive window of `windowBytes` per stream (SETTINGS
 * `initialWindowSize`) and for the whole connection (a WINDOW_UPDATE when
 * its first stream opens). Pass it as `sessionManager` to
 * `createGrpcTransport`, `createConnectTransport` or `createGrpcWebTransport`
 * (with `httpVersion: "2"`); it replaces their `nodeOptions`, so give those
 * here.
 *
 * Use the mux's response byte window for `windowBytes` (8 MiB by default, or
 * the zone's `maxMessageBytes` when that is larger): see the module
 * documentation for why that bounds memory.
 *
 * @param baseUrl - the global's URL, as given to the transport
 * @param nodeOptions - options for `http2.connect` (TLS material); their `settings` are kept, with `initialWindowSize` set
 * @param windowBytes - the windows, in bytes; at most 2^31 - 1
 */
export function windowedSessionManager(
  baseUrl: string,
  nodeOptions: http2.ClientSessionOptions | http2.SecureClientSessionOptions = {},
  windowBytes = DEFAULT_HTTP2_WINDOW_BYTES,
): Http2SessionManager {
  const window = http2Window(windowBytes);
  return new WindowedSessionManager(
    baseUrl,
    { ...nodeOptions, settings: { ...nodeOptions.settings, initialWindowSize: window } },
    window,
  );
}

/** Opens the connection window of each new session at its first stream. */
class WindowedSessionManager extends Http2SessionManager {
  readonly #window: number;
  readonly #opened = new WeakSet<http2.Http2Session>();

  constructor(
    baseUrl: string,
    nodeOptions: http2.ClientSessionOptions | http2.SecureClientSessionOptions,
    window: number,
  ) {
    super(baseUrl, undefined, nodeOptions);
    this.#window = window;
  }

  override async request(
    method: string,
    path: string,
    headers: http2.OutgoingHttpHeaders,
    options: Omit<http2.ClientSessionRequestOptions, "signal">,
  ): Promise<http2.ClientHttp2Stream> {
    const stream = await super.request(method, path, headers, options);
    const session = stream.session;
    // Deno's and Bun's node:http2 may lack setLocalWindowSize: their connection keeps its default window then.
    if (
      session !== undefined &&
      !this.#opened.has(session) &&
      typeof session.setLocalWindowSize === "function"
    ) {
      this.#opened.add(session);
      session.setLocalWindowSize(this.#window);
    }
    return stream;
  }
}
