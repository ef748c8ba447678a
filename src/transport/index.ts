/**
 * `kds-mux/transport`: how a zone's mux frames reach the global. Full-duplex
 * over any Connect transport ({@link connectMuxTransport}: gRPC, gRPC-web or
 * the Connect protocol), half-duplex for clients that cannot stream a request
 * body ({@link halfDuplexMuxTransport}: fetch, connect-web, HTTP/1.1), or an
 * in-memory pair ({@link memoryMuxTransport}); {@link failoverMuxTransport}
 * tries several globals in turn. Web standards only: no `node:`
 * import; bring the Connect transport of your runtime (connect-web in a
 * browser, connect-node on Node).
 *
 * @module
 */
export type { MuxAcceptor, MuxDialRequest, MuxTransport } from "./transport.ts";
export { memoryMuxTransport } from "./memory.ts";
export { failoverMuxTransport, type FailoverOptions } from "./failover.ts";
export { halfDuplexMuxTransport, type HalfDuplexTransportOptions } from "./half-duplex/client.ts";
export { connectMuxTransport, type ConnectMuxTransportOptions } from "./connect.ts";
export {
  KDS_ERROR_CODE_HEADER,
  KDS_RETRY_AFTER_MS_HEADER,
  fromConnectError,
  toConnectError,
} from "../connect-errors.ts";
export {
  HalfDuplexHub,
  registerHalfDuplex,
  type HalfDuplexHubOptions,
} from "./half-duplex/server.ts";
