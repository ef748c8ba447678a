/**
 * Serving Connect routes on `node:http2` (h2c or TLS) with connect-node:
 * the global's mux (plus any other service) with {@link serveGlobal}, or
 * any routes (a zone's admin API) with {@link serveRoutes}. Deno and Bun
 * run it through their `node:http2`.
 *
 * @module
 */
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { ConnectRouter } from "@connectrpc/connect";
import * as http from "node:http";
import * as http2 from "node:http2";
import type { AddressInfo, Socket } from "node:net";
import { registerGlobal } from "../../global/connect-service.ts";
import { baseUrl } from "../base-url.ts";
import type { GlobalServer } from "../../global/global-server.ts";

/** Where and how to listen. */
export interface ListenOptions {
  /** Address to listen on. Default "127.0.0.1". */
  host?: string;
  /** Port; 0 picks a free one. Default 0. */
  port?: number;
  /** PEM key and certificate: serve TLS (h2, with HTTP/1.1 allowed for unary calls) instead of h2c. */
  tls?: { key: string | Buffer; cert: string | Buffer };
  /**
   * Without TLS: "2" serves h2c (default); "1.1" serves plain HTTP/1.1, for
   * clients that speak nothing else (they use the half-duplex transport).
   */
  httpVersion?: "2" | "1.1";
  /** On close, how long to wait for HTTP/2 connections to finish before cutting them. Default 2 s. */
  closeGraceMs?: number;
  /** Handles requests no Connect route matches (for example static files); default 404. */
  fallback?: NonNullable<Parameters<typeof connectNodeAdapter>[0]["fallback"]>;
}

/** Options of {@link serveGlobal}. */
export interface ServeGlobalOptions extends ListenOptions {
  /** Mounts more services on the same router (for example the admin API). */
  routes?: (router: ConnectRouter) => void;
}

/** A running server. */
export interface ServedGlobal {
  /** Base URL, for example "http://127.0.0.1:5685". */
  readonly url: string;
  /** The bound port. */
  readonly port: number;
  /** The underlying server. */
  readonly server: http2.Http2Server | http2.Http2SecureServer | http.Server;
  /** Stops listening and resolves when every connection is gone. */
  close(): Promise<void>;
}

/** Serves `routes` on node:http2. `beforeClose` runs first on close (for example to send goaways). */
export async function serveRoutes(
  routes: (router: ConnectRouter) => void,
  options: ListenOptions & { readMaxBytes?: number; beforeClose?: () => Promise<void> } = {},
): Promise<ServedGlobal> {
  const handler = connectNodeAdapter({ routes, readMaxBytes: options.readMaxBytes, fallback: options.fallback });
  const server =
    options.tls !== undefined
      ? http2.createSecureServer({ key: options.tls.key, cert: options.tls.cert, allowHTTP1: true }, handler)
      : options.httpVersion === "1.1"
        ? http.createServer(handler)
        : http2.createServer(handler);
  const sessions = new Set<http2.Http2Session>();
  server.on("session", (session: http2.Http2Session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  const sockets = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, host, () => {
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
        if (server instanceof http.Server) server.closeIdleConnections();
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

/** Serves `global`'s `MultiplexService` (and `options.routes`) on node:http2; close sends every zone a goaway first. */
export function serveGlobal(global: GlobalServer, options: ServeGlobalOptions = {}): Promise<ServedGlobal> {
  return serveRoutes(
    (router) => {
      registerGlobal(router, global);
      options.routes?.(router);
    },
    { ...options, readMaxBytes: global.maxMessageBytes, beforeClose: () => global.close() },
  );
}
