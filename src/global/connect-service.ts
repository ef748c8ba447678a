/**
 * Mounting the global on a Connect router: the `MultiplexService`
 * implementation. Any Connect server can host it (connect-node's
 * `connectNodeAdapter`, Fastify, Express, a fetch handler, ...).
 *
 * @module
 */
import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";
import { peerInfoKey } from "../auth/peer.ts";
import { MultiplexService } from "../gen/kds/mux/v1/mux_pb.ts";
import { toConnectError } from "../transport/connect-errors.ts";
import type { GlobalServer } from "./global-server.ts";
import { HalfDuplexHub, registerHalfDuplex, type HalfDuplexHubOptions } from "../transport/half-duplex/server.ts";

/** The `MultiplexService` implementation backed by `global`. */
export function multiplexServiceImpl(global: GlobalServer): ServiceImpl<typeof MultiplexService> {
  return {
    async *streamMessage(requests, context) {
      let outbound;
      try {
        outbound = await global.accept(context.requestHeader, requests, context.signal, context.values.get(peerInfoKey));
      } catch (error) {
        throw toConnectError(error);
      }
      yield* outbound;
    },
  };
}

/**
 * Registers the global's `MultiplexService` on `router`, and its
 * `HalfDuplexService` for zones that cannot stream request bodies (pass
 * `halfDuplex: false` to leave it out, or hub options to tune it).
 */
export function registerGlobal(router: ConnectRouter, global: GlobalServer, options: { halfDuplex?: HalfDuplexHubOptions | false } = {}): ConnectRouter {
  router.service(MultiplexService, multiplexServiceImpl(global));
  if (options.halfDuplex !== false) registerHalfDuplex(router, new HalfDuplexHub(global, options.halfDuplex));
  return router;
}
