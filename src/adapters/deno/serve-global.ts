/**
 * Serving the global on `Deno.serve` (HTTP/1.1 and h2c): the mux over the
 * Connect protocol and gRPC-web, full duplex, plus any other routes. gRPC
 * needs trailers, which a fetch `Response` lacks: serve gRPC zones through
 * `serveGlobal` from `kds-mux/node` (it runs on Deno's node:http2).
 *
 * @module
 */
import type { ConnectRouter } from "@connectrpc/connect";
import type { GlobalServer } from "../../global/global-server.ts";
import { baseUrl } from "../base-url.ts";
import { globalFetchHandler } from "../fetch/fetch-handler.ts";

interface DenoServer {
  readonly addr: { readonly port: number };
  shutdown(): Promise<void>;
}

interface DenoLike {
  serve(
    options: { hostname: string; port: number; onListen?: () => void },
    handler: (request: Request) => Promise<Response>,
  ): DenoServer;
}

/** Options of {@link serveGlobalDeno}. */
export interface ServeGlobalDenoOptions {
  /** Default "127.0.0.1". */
  hostname?: string;
  /** 0 picks a free port. Default 0. */
  port?: number;
  /** More routes on the same server (the admin API). */
  routes?: (router: ConnectRouter) => void;
  /** Answers paths no route owns (for example `observeHandler` for `/metrics`). */
  fallback?: (request: Request) => Promise<Response | undefined>;
}

/** A running Deno server. */
export interface ServedGlobalDeno {
  /** Base URL zones dial. */
  readonly url: string;
  /** Sends every zone a goaway, then stops the server. */
  close(): Promise<void>;
}

/** Serves `global` on `Deno.serve`. Throws when not running on Deno. */
export function serveGlobalDeno(
  global: GlobalServer,
  options: ServeGlobalDenoOptions = {},
): ServedGlobalDeno {
  const deno = (globalThis as { Deno?: DenoLike }).Deno;
  if (deno === undefined)
    throw new Error("serveGlobalDeno needs Deno; on Node use serveGlobal from kds-mux/node");
  const hostname = options.hostname ?? "127.0.0.1";
  const server = deno.serve(
    { hostname, port: options.port ?? 0, onListen: () => undefined },
    globalFetchHandler(global, options.routes, options.fallback),
  );
  return {
    url: baseUrl("http", hostname, server.addr.port),
    close: async () => {
      await global.close();
      await server.shutdown();
    },
  };
}
