/**
 * The mux over any Connect `Transport`. With `@connectrpc/connect-node` that
 * is gRPC (`createGrpcTransport`), gRPC-web (`createGrpcWebTransport`) or the
 * Connect protocol (`createConnectTransport`) on HTTP/2, and the in-memory
 * `createRouterTransport`. The stream is full duplex, so the transport must
 * be too: fetch-based transports (`@connectrpc/connect-web`) cannot stream
 * request bodies and fail with "The fetch API does not support streaming
 * request bodies"; connect-node over HTTP/1.1 is refused by the server
 * (HTTP 505). See docs/transports.md.
 *
 * @module
 */
import type { Transport } from "@connectrpc/connect";
import type { Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import { MultiplexService } from "../gen/kds/mux/v1/mux_pb.ts";
import { fromConnectError } from "../connect-errors.ts";
import type { MuxDialRequest, MuxTransport } from "./transport.ts";

/** Options of {@link connectMuxTransport}. */
export interface ConnectMuxTransportOptions {
  /** Name for logs. Default "connect". */
  name?: string;
  /** Where it dials, for error messages (for example the base URL). */
  target?: string;
}

/**
 * A {@link MuxTransport} over a Connect `Transport`. Do not give the
 * transport a `defaultTimeoutMs`: the mux stream is meant to live for days.
 */
export function connectMuxTransport(
  transport: Transport,
  options: ConnectMuxTransportOptions = {},
): MuxTransport {
  const target = options.target ?? "the global";
  return {
    name: options.name ?? "connect",
    async open({ headers, outbound, signal }: MuxDialRequest): Promise<AsyncIterable<Frame>> {
      try {
        const response = await transport.stream(
          MultiplexService.method.streamMessage,
          signal,
          undefined,
          headers,
          outbound,
          undefined,
        );
        return mapErrors(response.message, target);
      } catch (error) {
        throw fromConnectError(error, target);
      }
    },
  };
}

async function* mapErrors(
  messages: AsyncIterable<Frame>,
  target: string,
): AsyncGenerator<Frame, void, undefined> {
  try {
    yield* messages;
  } catch (error) {
    throw fromConnectError(error, target);
  }
}
