/**
 * Mounting the global on a Connect router: the `MultiplexService`
 * implementation. Any Connect server can host it (connect-node's
 * `connectNodeAdapter`, Fastify, Express, a fetch handler, ...).
 *
 * @module
 */
import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";
import { MultiplexService } from "../gen/kds/mux/v1/mux_pb.ts";
import { toConnectError } from "../transport/connect-errors.ts";
import type { GlobalServer } from "./global-server.ts";

/** The `MultiplexService` implementation backed by `global`. */
export function multiplexServiceImpl(global: GlobalServer): ServiceImpl<typeof MultiplexService> {
  return {
    async *streamMessage(requests, context) {
      let outbound;
      try {
        outbound = await global.accept(context.requestHeader, requests, context.signal);
      } catch (error) {
        throw toConnectError(error);
      }
      yield* outbound;
    },
  };
}

/** Registers the global's `MultiplexService` on `router`. */
export function registerGlobal(router: ConnectRouter, global: GlobalServer): ConnectRouter {
  return router.service(MultiplexService, multiplexServiceImpl(global));
}
