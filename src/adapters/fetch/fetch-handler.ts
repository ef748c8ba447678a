/**
 * Serving Connect routes from a fetch-style server (`Deno.serve`,
 * `Bun.serve`, any `(Request) => Promise<Response>` host). Connect and
 * gRPC-web work, including the full-duplex mux stream where the server
 * streams request bodies; gRPC does not (a fetch `Response` carries no
 * trailers). Web standards only: this module runs on every runtime.
 *
 * @module
 */
import { createConnectRouter, type ConnectRouter } from "@connectrpc/connect";
import { createFetchHandler } from "@connectrpc/connect/protocol";
import { registerGlobal } from "../../global/connect-service.ts";
import type { GlobalServer } from "../../global/global-server.ts";

/** A fetch handler: what `Deno.serve` and `Bun.serve` take. */
export type FetchHandler = (request: Request) => Promise<Response>;

/** Options of {@link fetchHandler}. */
export interface FetchHandlerOptions {
  /** Largest message the server reads, in bytes. */
  readMaxBytes?: number;
  /** Answers paths no Connect route owns (for example `observeHandler`); undefined from it means 404. */
  fallback?: (request: Request) => Promise<Response | undefined>;
}

/** A fetch handler serving `routes`; unknown paths get 404. */
export function fetchHandler(
  routes: (router: ConnectRouter) => void,
  options: FetchHandlerOptions = {},
): FetchHandler {
  const router = createConnectRouter({ readMaxBytes: options.readMaxBytes, acceptCompression: [] });
  routes(router);
  // The fetch host streams request and response bodies at once, so bidi
  // streams are allowed whatever HTTP version carries them.
  const byPath = new Map(
    router.handlers.map((h) => [h.requestPath, createFetchHandler(h, { httpVersion: "2.0" })]),
  );
  return async (request) => {
    const handle = byPath.get(new URL(request.url).pathname);
    if (handle === undefined) {
      const answered = await options.fallback?.(request);
      return (
        answered ??
        new Response("not found: this server serves kds-mux Connect routes", { status: 404 })
      );
    }
    return handle(request);
  };
}

/** A fetch handler serving `global`'s mux (Connect and gRPC-web) plus `routes`. */
export function globalFetchHandler(
  global: GlobalServer,
  routes?: (router: ConnectRouter) => void,
  fallback?: FetchHandlerOptions["fallback"],
): FetchHandler {
  return fetchHandler(
    (router) => {
      registerGlobal(router, global);
      routes?.(router);
    },
    { readMaxBytes: global.maxMessageBytes, fallback },
  );
}
