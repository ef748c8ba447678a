/**
 * The Node adapter entry point: serving the global on node:http2.
 *
 * @module
 */
export { serveGlobal, type ServeGlobalOptions, type ServedGlobal } from "./serve-global.ts";
