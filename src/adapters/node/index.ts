/**
 * The Node adapter entry point: serving the global and admin APIs on node:http2.
 *
 * @module
 */
export { serveGlobal, serveRoutes, type ListenOptions, type ServeGlobalOptions, type ServedGlobal } from "./serve-global.ts";
