/**
 * Serving the global on `Bun.serve` (HTTP/1.1): the mux over the Connect
 * protocol and gRPC-web, full duplex, plus any other routes. Two Bun
 * defaults would cut a long-lived mux stream and are lifted here: the idle
 * timeout (10 s, shorter than the 15 s heartbeat; disabled) and the 128 MiB
 * cap on a request body (the zone's whole direction of the stream is one
 * request body; raised to the largest safe size). gRPC needs trailers and
 * HTTP/2: serve gRPC zones through `serveGlobal` from `kds-mux/node`.
 *
 * @module
 */
import type { ConnectRouter } from "@connectrpc/connect";
import type { GlobalServer } from "../../global/global-server.ts";
import { baseUrl } from "../base-url.ts";
import { globalFetchHandler } from "../fetch/fetch-handler.ts";

interface BunServer {
  readonly port: number;
  stop(closeActiveConnections?: boolean): Promise<void> | void;
}

interface BunLike {
  serve(options: {
    hostname: string;
    port: number;
    idleTimeout: number;
    maxRequestBodySize: number;
    fetch: (request: Request) => Promise<Response>;
  }): BunServer;
}

/** Options of {@link serveGlobalBun}. */
export interface ServeGlobalBunOptions {
  /** Default "127.0.0.1". */
  hostname?: string;
  /** 0 picks a free port. Default 0. */
  port?: number;
  /** More routes on the same server (the admin API). */
  routes?: (router: ConnectRouter) => void;
  /** Answers paths no route owns (for example `observeHandler` for `/metrics`). */
  fallback?: (request: Request) => Promise<Response | undefined>;
}

/** A running Bun server. */
export interface ServedGlobalBun {
  /** Base URL zones dial (HTTP/1.1). */
  readonly url: string;
  /** Sends every zone a goaway, then stops the server. */
  close(): Promise<void>;
}

/** Serves `global` on `Bun.serve`. Throws when not running on Bun. */
export function serveGlobalBun(
  global: GlobalServer,
  options: ServeGlobalBunOptions = {},
): ServedGlobalBun {
  const bun = (globalThis as { Bun?: BunLike }).Bun;
  if (bun === undefined)
    throw new Error("serveGlobalBun needs Bun; on Node use serveGlobal from kds-mux/node");
  const hostname = options.hostname ?? "127.0.0.1";
  const server = bun.serve({
    hostname,
    port: options.port ?? 0,
    idleTimeout: 0,
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    fetch: globalFetchHandler(global, options.routes, options.fallback),
  });
  return {
    url: baseUrl("http", hostname, server.port),
    close: async () => {
      await global.close();
      await server.stop(true);
    },
  };
}
