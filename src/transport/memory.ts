/**
 * The in-memory transport: a zone and a global in one process, no network and
 * no serialization. The global pulls the zone's frames straight from the
 * zone's writer and the other way round, so nothing is buffered in between.
 *
 * @module
 */
import type { MuxAcceptor, MuxTransport } from "./transport.ts";

/** A transport that hands the zone's stream directly to `acceptor` (usually a `GlobalServer`). */
export function memoryMuxTransport(acceptor: MuxAcceptor): MuxTransport {
  return {
    name: "memory",
    open: ({ headers, outbound, signal }) =>
      acceptor.accept(new Headers(headers), outbound, signal),
  };
}
