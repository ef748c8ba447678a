/**
 * Mounting the global on a Connect router: the `MultiplexService`
 * implementation. Any Connect server can host it (connect-node's
 * `connectNodeAdapter`, Fastify, Express, a fetch handler, ...).
 *
 * @module
 */
import { Code, ConnectError, type ConnectRouter, type ServiceImpl } from "@connectrpc/connect";
import { peerInfoKey } from "../auth/peer.ts";
import { KdsError } from "../errors.ts";
import { MultiplexService, type Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import { toConnectError } from "../connect-errors.ts";
import type { GlobalServer } from "./global-server.ts";
import {
  HalfDuplexHub,
  registerHalfDuplex,
  type HalfDuplexHubOptions,
} from "../transport/half-duplex/server.ts";

/**
 * The `MultiplexService` implementation backed by `global`. A session the
 * global ends for a failure or a revocation ends the call, after its goaway,
 * with the matching non-OK status and the `kds-error-code` trailer (see
 * `sessionEndError`); frames the server cannot decode end the session as a
 * protocol error.
 */
export function multiplexServiceImpl(global: GlobalServer): ServiceImpl<typeof MultiplexService> {
  return {
    async *streamMessage(requests, context) {
      try {
        const outbound = await global.accept(
          context.requestHeader,
          decodedFrames(requests),
          context.signal,
          context.values.get(peerInfoKey),
        );
        yield* outbound;
      } catch (error) {
        throw toConnectError(error);
      }
    },
  };
}

/**
 * The zone's frames, with the failures that mean "the zone wrote something
 * that is not a frame" turned into a `protocol_error` (undecodable bytes, a
 * message over the read limit, a broken envelope). Every other failure (a
 * cancelled or lost stream) passes unchanged.
 */
async function* decodedFrames(
  requests: AsyncIterable<Frame>,
): AsyncGenerator<Frame, void, undefined> {
  try {
    yield* requests;
  } catch (error) {
    if (error instanceof ConnectError && isDecodeFailure(error)) {
      throw new KdsError(
        "protocol_error",
        `the zone sent a frame the global cannot read (${error.rawMessage}); it must be one kds.mux.v1.Frame in the call's codec`,
        { cause: error },
      );
    }
    throw error;
  }
}

function isDecodeFailure(error: ConnectError): boolean {
  switch (error.code) {
    case Code.InvalidArgument: // JSON that is not a Frame, a broken envelope
    case Code.ResourceExhausted: // larger than the read limit
      return true;
    case Code.Internal: // connect's binary codec reports "parse binary: ...", its envelope reader a compressed flag without an encoding
      return (
        error.rawMessage.startsWith("parse ") || error.rawMessage.includes("compressed envelope")
      );
    default:
      return false;
  }
}

/**
 * Registers the global's `MultiplexService` on `router`, and its
 * `HalfDuplexService` for zones that cannot stream request bodies (pass
 * `halfDuplex: false` to leave it out, hub options to tune it, or the hub
 * itself when the server adapter consults it, as `serveGlobal` does). Both are
 * registered with the global's {@link GlobalServer.jsonRegistry}, so the
 * Connect protocol's JSON codec can write and read the `Any`s in frames.
 */
export function registerGlobal(
  router: ConnectRouter,
  global: GlobalServer,
  options: { halfDuplex?: HalfDuplexHubOptions | HalfDuplexHub | false } = {},
): ConnectRouter {
  const jsonOptions = { registry: global.jsonRegistry };
  router.service(MultiplexService, multiplexServiceImpl(global), { jsonOptions });
  const halfDuplex = options.halfDuplex;
  if (halfDuplex !== false)
    registerHalfDuplex(
      router,
      halfDuplex instanceof HalfDuplexHub ? halfDuplex : new HalfDuplexHub(global, halfDuplex),
      { jsonOptions },
    );
  return router;
}
