/**
 * `kds-mux/fetch`: serving the global from any fetch-style host
 * (`Deno.serve`, `Bun.serve`, a service worker, an edge runtime):
 * {@link globalFetchHandler} for a `GlobalServer`, {@link fetchHandler} for
 * any set of Connect routes. Web standards only: no `node:` import.
 *
 * @module
 */
export {
  fetchHandler,
  globalFetchHandler,
  type FetchHandler,
  type FetchHandlerOptions,
} from "./fetch-handler.ts";
