/**
 * Serving Connect routes on `node:http2` (h2c or TLS, optionally asking
 * clients for certificates) with connect-node: the global's mux (plus any
 * other service) with {@link serveGlobal}, or any routes (an admin API) with
 * {@link serveRoutes}. Handlers find the client certificate of a TLS
 * connection in the `peerInfoKey` context value. Deno and Bun run it through
 * their `node:http2`.
 *
 * @module
 */
import { createContextValues, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import type { AddressInfo, Socket } from "node:net";
import { peerInfoKey } from "../../auth/peer.ts";
import { registerGlobal } from "../../global/connect-service.ts";
import { baseUrl } from "../base-url.ts";
import { KdsError } from "../../errors.ts";
import { MUX_PATH, muxStreamClaim } from "./mux-stream.ts";
import { scanMuxRequestBody } from "./mux-body-scan.ts";
import { peerInfo } from "./peer-info.ts";
import { replaySocket, UNSHIFT_REACHES_HTTP2 } from "./replay-socket.ts";
import {
  DEFAULT_MAX_CONNECTIONS_PER_ZONE,
  DEFAULT_REQUEST_TIMEOUT_MS,
  http1ServerOptions,
  http2ServerOptions,
  limitConnections,
  type ConnectionLimits,
} from "./connection-limits.ts";
import type { GuardedConnection } from "./connection-guard.ts";
import { gatedHandler, UNGUARDED, type RequestGate } from "./request-gate.ts";
import { HalfDuplexHub } from "../../transport/half-duplex/server.ts";
import { zoneGate } from "./zone-gate.ts";
import type { GlobalServer } from "../../global/global-server.ts";

/** Where and how to listen. */
export interface ListenOptions {
  /** Address to listen on. Default "127.0.0.1". */
  host?: string;
  /** Port; 0 picks a free one. Default 0. */
  port?: number;
  /**
   * How many connections the kernel keeps waiting for this process to accept
   * them (the listen backlog). Beyond it, Linux drops the clients' SYNs and
   * each client retransmits after 1, 3, 7, 15… s, so when every zone
   * reconnects at once (a global restart) a small backlog turns a burst the
   * process could absorb in seconds into minutes of retransmission waits.
   * The kernel caps it (Linux: net.core.somaxconn). Default
   * {@link DEFAULT_LISTEN_BACKLOG} (Node's own default is 511).
   */
  backlog?: number;
  /**
   * PEM key and certificate: serve TLS (h2, with HTTP/1.1 allowed for unary
   * calls and the half-duplex transport) instead of h2c. With `clientCa`,
   * clients are asked for a certificate, verified against it, and handlers
   * see the result in `peerInfoKey` (a client without one is still served:
   * it may prove itself with a token).
   */
  tls?: { key: string | Buffer; cert: string | Buffer; clientCa?: string | Buffer };
  /**
   * Without TLS: "2" serves h2c (default); "1.1" serves plain HTTP/1.1, for
   * clients that speak nothing else (they use the half-duplex transport);
   * "both" serves each connection in the protocol its first bytes speak (the
   * HTTP/2 preface or an HTTP/1.1 request), so Connect clients use h2c while
   * browsers and Prometheus reach the same port over HTTP/1.1.
   */
  httpVersion?: "2" | "1.1" | "both";
  /** On close, how long to wait for HTTP/2 connections to finish before cutting them. Default 2 s. */
  closeGraceMs?: number;
  /** Handles requests no Connect route matches (for example static files); default 404. */
  fallback?: NonNullable<Parameters<typeof connectNodeAdapter>[0]["fallback"]>;
  /** Connect interceptors run on every call (for example the admin authorizer). */
  interceptors?: Interceptor[];
  /**
   * Bounds on connections: a cap (new connections beyond it are closed at
   * once, open ones kept), idle timeouts, streams per HTTP/2 connection.
   * Default: none (Node's defaults; give a listener exposed to untrusted
   * clients limits, as the CLI does).
   */
  limits?: ConnectionLimits;
  /**
   * Proves each request's caller on its headers, before its body is read; a
   * refusal is answered at once in the caller's protocol. With `limits`, a
   * connection counts as authenticated once a request on it passed the gate
   * as authenticated, and one that does not within `limits.authTimeoutMs` is
   * closed. Without a gate every connection counts as authenticated.
   * `serveGlobal` sets its own (zone credentials).
   */
  gate?: RequestGate;
}

/** A request as node:http or node:http2 hands it to a handler. */
export type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;

/** The default of {@link ListenOptions.backlog}: Linux's default net.core.somaxconn since 5.4. */
export const DEFAULT_LISTEN_BACKLOG = 4096;

/** Options of {@link serveGlobal}. */
export interface ServeGlobalOptions extends ListenOptions {
  /** Mounts more services on the same router (for example the admin API). */
  routes?: (router: ConnectRouter) => void;
  /**
   * Serve a zone's gRPC mux stream straight on its HTTP/2 stream rather than
   * through connect-node's handler, which holds about ten times the memory
   * per idle stream (about 40 KiB more per zone). Only for binary gRPC from
   * a zone that sends its frames uncompressed (connect-node's and grpc-js's
   * default) and sets no deadline; it is answered uncompressed even when it
   * accepts gzip or brotli. Every other call goes through connect-node. Ignored (everything goes through
   * connect-node) when `interceptors` are given, so they see every call.
   * Default true.
   */
  directMuxStream?: boolean;
}

/** A running server. */
export interface ServedGlobal {
  /** Base URL, for example "http://127.0.0.1:5685". */
  readonly url: string;
  /** The bound port. */
  readonly port: number;
  /** The underlying server. */
  readonly server: http2.Http2Server | http2.Http2SecureServer | http.Server | net.Server;
  /** Stops listening and resolves when every connection is gone. */
  close(): Promise<void>;
}

/** Serves `routes` on node:http2. `beforeClose` runs first on close (for example to send goaways). */
export async function serveRoutes(
  routes: (router: ConnectRouter) => void,
  options: ListenOptions & {
    readMaxBytes?: number;
    beforeClose?: () => Promise<void>;
    /**
     * Takes an HTTP/2 stream before the gate (it proves the caller itself
     * before reading the body); true when it took it. Where node:http2 makes
     * its compatibility request and response through one `stream` listener
     * (Node, Bun), a stream it takes gets neither; elsewhere (Deno) it is
     * offered the request's stream.
     */
    claimStream?: (
      stream: http2.ServerHttp2Stream,
      headers: http2.IncomingHttpHeaders,
      connection: GuardedConnection,
    ) => boolean;
    /** Paths whose body is long-lived by design (a bidi stream), exempt from the request timeout. */
    unboundedBody?: (path: string) => boolean;
    /** Whether requests authenticate connections without `gate` (a claim does). */
    authenticates?: boolean;
  } = {},
): Promise<ServedGlobal> {
  const connect = connectNodeAdapter({
    routes,
    readMaxBytes: options.readMaxBytes,
    fallback: options.fallback,
    interceptors: options.interceptors,
    contextValues: (request) => createContextValues().set(peerInfoKey, peerInfo(request)),
  });
  const limits = options.limits;
  // Created with the servers below; requests only arrive once they listen.
  let guard: ReturnType<typeof limitConnections> | undefined;
  const claimStream = options.claimStream;
  /** Whether the h2 server hands streams to `claimStream` before its compatibility layer (set below). */
  let claimsBeforeCompat = false;
  const gated = gatedHandler({
    serve: (request, response) => {
      // A zone's stream that connect-node decodes (not the direct path's): weigh each frame before connect-node decodes it.
      if (request.url === MUX_PATH && options.readMaxBytes !== undefined)
        scanMuxRequestBody(request, options.readMaxBytes);
      void connect(request, response as Parameters<typeof connect>[1]);
    },
    claim:
      claimStream === undefined
        ? undefined
        : (request, _response, connection) =>
            !claimsBeforeCompat &&
            request.httpVersionMajor === 2 &&
            claimStream(
              (request as http2.Http2ServerRequest).stream,
              (request as http2.Http2ServerRequest).headers,
              connection,
            ),
    gate: options.gate,
    get guard() {
      return guard;
    },
    requestTimeoutMs:
      limits === undefined ? undefined : (limits.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS),
    unboundedBody: options.unboundedBody,
    onRequestTimeout: () => limits?.metrics?.connection(limits.listener, "request_timeout"),
    peer: peerInfo,
  });
  const handler: typeof connect = (request, response) =>
    gated(request, response as http.ServerResponse | http2.Http2ServerResponse);
  const backlog = options.backlog ?? DEFAULT_LISTEN_BACKLOG;
  if (!Number.isInteger(backlog) || backlog < 1)
    throw new KdsError(
      "invalid_argument",
      `the listen backlog must be a positive integer, got ${String(options.backlog)}`,
    );
  const tls = options.tls;
  const h1 =
    tls === undefined && (options.httpVersion === "1.1" || options.httpVersion === "both")
      ? http.createServer(http1ServerOptions(limits), handler)
      : undefined;
  const h2 =
    tls !== undefined
      ? http2.createSecureServer(
          {
            key: tls.key,
            cert: tls.cert,
            allowHTTP1: true,
            ...http2ServerOptions(limits),
            ...(tls.clientCa === undefined
              ? {}
              : { ca: tls.clientCa, requestCert: true, rejectUnauthorized: false }),
          },
          handler,
        )
      : options.httpVersion === "1.1"
        ? undefined
        : http2.createServer(http2ServerOptions(limits), handler);
  const server =
    options.httpVersion === "both" && options.tls === undefined
      ? sniffingServer(
          h1 as http.Server,
          h2 as http2.Http2Server,
          Math.min(SNIFF_TIMEOUT_MS, limits?.idleTimeoutMs ?? SNIFF_TIMEOUT_MS),
        )
      : ((h2 ?? h1) as http2.Http2Server | http2.Http2SecureServer | http.Server);
  if (limits !== undefined)
    guard = limitConnections(
      { accepting: server, h1, h2 },
      limits,
      options.gate !== undefined || options.authenticates === true,
    );
  if (h2 !== undefined && claimStream !== undefined)
    claimsBeforeCompat = claimBeforeCompat(h2, (stream, headers) =>
      claimStream(
        stream,
        headers,
        guard?.connection(stream.session?.socket ?? NO_PEER) ?? UNGUARDED,
      ),
    );
  const sessions = new Set<http2.Http2Session>();
  h2?.on("session", (session: http2.Http2Session) => {
    sessions.add(session);
    // `on` (here and below): a connection closes once, and `once` would hold a wrapper for the connection's life.
    session.on("close", () => sessions.delete(session));
  });
  const sockets = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ port: options.port ?? 0, host, backlog }, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const scheme = options.tls === undefined ? "http" : "https";
  let closing: Promise<void> | undefined;
  return {
    url: baseUrl(scheme, host, port),
    port,
    server,
    close: () => {
      closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        await options.beforeClose?.();
        for (const session of sessions) session.close();
        h1?.closeIdleConnections();
        const grace = setTimeout(() => {
          for (const session of sessions) session.destroy();
          for (const socket of sockets) socket.destroy();
        }, options.closeGraceMs ?? 2_000);
        await stopped;
        clearTimeout(grace);
      })();
      return closing;
    },
  };
}

/**
 * Hands every new stream of `server` to `claim` before node:http2's
 * compatibility layer, which makes a request and a response object of each
 * (with ten listeners on the stream) for the request handler: a zone's mux
 * stream, held for the zone's life, needs neither. Node and Bun make them
 * in the one `stream` listener a request handler installs; that listener
 * now runs only for what `claim` leaves. False, and nothing changed, where
 * the server has no such listener (Deno's node:http2 emits requests
 * itself).
 */
function claimBeforeCompat(
  server: http2.Http2Server | http2.Http2SecureServer,
  claim: (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => boolean,
): boolean {
  const listeners = server.listeners("stream");
  const compat = listeners[0];
  if (listeners.length !== 1 || typeof compat !== "function") return false;
  server.removeListener("stream", compat as (...args: unknown[]) => void);
  server.on(
    "stream",
    (
      stream: http2.ServerHttp2Stream,
      headers: http2.IncomingHttpHeaders,
      flags: number,
      rawHeaders: string[],
    ) => {
      if (!claim(stream, headers))
        Reflect.apply(compat, server, [stream, headers, flags, rawHeaders]);
    },
  );
  return true;
}

/** The connection of a stream whose session is already gone: no address, which no guard knows. */
const NO_PEER = { remoteAddress: undefined, remotePort: undefined };

/** How long a new connection may take to send its first bytes on a "both" server (at most the idle timeout). */
const SNIFF_TIMEOUT_MS = 10_000;

/** The HTTP/2 connection preface starts with these bytes; no HTTP/1.1 request does. */
const H2_PREFACE = "PRI * HTTP/2.0";

/** A plaintext server handing each connection to `h2` or `h1` by its first bytes. */
function sniffingServer(
  h1: http.Server,
  h2: http2.Http2Server,
  sniffTimeoutMs: number,
): net.Server {
  return net.createServer((socket) => {
    // A connection that never says which protocol it speaks is closed, not kept.
    socket.setTimeout(sniffTimeoutMs, () => socket.destroy());
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      head = Buffer.concat([head, chunk]);
      const prefix = head.subarray(0, H2_PREFACE.length).toString("latin1");
      if (prefix.length < H2_PREFACE.length && H2_PREFACE.startsWith(prefix)) return; // too short to tell yet
      socket.off("data", onData);
      socket.setTimeout(0);
      socket.pause();
      if (prefix === H2_PREFACE && !UNSHIFT_REACHES_HTTP2) {
        // Bun's node:http2 reads the socket natively and would miss the bytes read here.
        h2.emit("connection", replaySocket(socket, head));
        return;
      }
      socket.unshift(head);
      if (prefix === H2_PREFACE) {
        // node:http2 takes over the socket and reads what was put back itself.
        h2.emit("connection", socket);
      } else {
        h1.emit("connection", socket);
        socket.resume();
      }
    };
    socket.on("data", onData);
  });
}

/**
 * Loads the `Headers` global, which Node loads on first use (undici: about
 * 45 ms of compiling in a profile of the 100k sync, bench/README.md): every
 * zone stream's headers are read into one, so without this the first zone
 * to connect, or the first burst after a restart, waits for it.
 */
function loadHeaders(): void {
  new Headers().has("content-type"); // the call only makes sure the object is used
}

/**
 * Serves `global`'s `MultiplexService` and half-duplex service (and
 * `options.routes`) on node:http2; close sends every zone a goaway first.
 * Every zone call's credentials are proven on its headers before its body is
 * read (see `zone-gate.ts`; `options.gate` replaces that gate); with
 * `options.limits`, a connection that carries no such call within
 * `authTimeoutMs` is closed, and one zone holds at most
 * `maxConnectionsPerIdentity` connections (default
 * {@link DEFAULT_MAX_CONNECTIONS_PER_ZONE}). Calls to `options.routes` do not
 * authenticate a connection: serve them on another listener when `limits`
 * are set.
 */
export function serveGlobal(
  global: GlobalServer,
  options: ServeGlobalOptions = {},
): Promise<ServedGlobal> {
  const hub = new HalfDuplexHub(global);
  const limits = options.limits;
  loadHeaders();
  return serveRoutes(
    (router) => {
      registerGlobal(router, global, { halfDuplex: hub });
      options.routes?.(router);
    },
    {
      ...options,
      limits:
        limits === undefined
          ? undefined
          : {
              ...limits,
              maxConnectionsPerIdentity:
                limits.maxConnectionsPerIdentity ?? DEFAULT_MAX_CONNECTIONS_PER_ZONE,
            },
      // Zone credentials on the headers of every zone call; the direct mux stream (claimed first) proves them itself.
      gate: options.gate ?? zoneGate(global, hub),
      unboundedBody: (path) => path === MUX_PATH,
      readMaxBytes: global.maxMessageBytes,
      beforeClose: () => global.close(),
      claimStream:
        options.directMuxStream !== false && (options.interceptors ?? []).length === 0
          ? muxStreamClaim(global, (stream) => peerInfo({ socket: stream.session?.socket }))
          : undefined,
    },
  );
}
