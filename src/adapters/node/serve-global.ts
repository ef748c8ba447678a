/**
 * Serving the global on `node:http2` (h2c or TLS) with connect-node. Deno
 * and Bun run it through their `node:http2`.
 *
 * @module
 */
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { ConnectRouter } from "@connectrpc/connect";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { registerGlobal } from "../../global/connect-service.ts";
import type { GlobalServer } from "../../global/global-server.ts";

/** Options of {@link serveGlobal}. */
export interface ServeGlobalOptions {
  /** Address to listen on. Default "127.0.0.1". */
  host?: string;
  /** Port; 0 picks a free one. Default 0. */
  port?: number;
  /** PEM key and certificate: serve TLS (h2, with HTTP/1.1 allowed for gRPC-web and Connect unary) instead of h2c. */
  tls?: { key: string | Buffer; cert: string | Buffer };
  /** Mounts more services on the same router (for example the admin API). */
  routes?: (router: ConnectRouter) => void;
  /** After closing every session, how long to wait for HTTP/2 connections to finish before cutting them. Default 2 s. */
  closeGraceMs?: number;
}

/** A running global server. */
export interface ServedGlobal {
  /** Base URL zones dial, for example "http://127.0.0.1:5685". */
  readonly url: string;
  /** The bound port. */
  readonly port: number;
  /** The underlying server. */
  readonly server: http2.Http2Server | http2.Http2SecureServer;
  /** Sends every zone a goaway, stops listening, and resolves when every connection is gone. */
  close(): Promise<void>;
}

/** Serves `global`'s `MultiplexService` on node:http2. */
export async function serveGlobal(global: GlobalServer, options: ServeGlobalOptions = {}): Promise<ServedGlobal> {
  const handler = connectNodeAdapter({
    routes: (router) => {
      registerGlobal(router, global);
      options.routes?.(router);
    },
    readMaxBytes: global.maxMessageBytes,
  });
  const server = options.tls === undefined
    ? http2.createServer(handler)
    : http2.createSecureServer({ key: options.tls.key, cert: options.tls.cert, allowHTTP1: true }, handler);
  const sessions = new Set<http2.Http2Session>();
  server.on("session", (session: http2.Http2Session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
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
  const urlHost = host.includes(":") ? `[${host}]` : host;
  let closing: Promise<void> | undefined;
  return {
    url: `${scheme}://${urlHost}:${port}`,
    port,
    server,
    close: () => {
      closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        await global.close();
        for (const session of sessions) session.close();
        const grace = setTimeout(() => {
          for (const session of sessions) session.destroy();
        }, options.closeGraceMs ?? 2_000);
        await stopped;
        clearTimeout(grace);
      })();
      return closing;
    },
  };
}
