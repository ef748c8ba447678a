/**
 * The seam between the zone and the wire: how a zone opens the mux stream.
 *
 * @module
 */
import type { PeerInfo } from "../auth/peer.ts";
import type { Frame } from "../gen/kds/mux/v1/mux_pb.ts";

/** What a zone hands a transport to open the mux stream. */
export interface MuxDialRequest {
  /** Request headers; carries `client-id` (the zone's name) and `authorization` (its zone token). */
  readonly headers: Headers;
  /** The frames the zone writes, pulled by the transport one at a time. */
  readonly outbound: AsyncIterable<Frame>;
  /** Aborting it cancels the stream. */
  readonly signal: AbortSignal;
}

/**
 * Opens the zone's one bidirectional stream to the global. Implementations:
 * - {@link connectMuxTransport}: over any Connect `Transport` (gRPC, gRPC-web
 *   and the Connect protocol over HTTP/2);
 * - `halfDuplexMuxTransport` (`kds-mux/transport`): unary and
 *   server-streaming calls only, for clients that cannot stream a request
 *   body (fetch, HTTP/1.1);
 * - {@link memoryMuxTransport}: in process, straight to a `MuxAcceptor`;
 * - {@link failoverMuxTransport}: several of the above, one per global
 *   instance, moving on when a dial fails or the global says RECONNECT;
 * - `grpcMuxTransport` (`kds-mux/node`): plain gRPC on one `node:http2`
 *   connection, what the CLI zone's `--transport grpc` uses.
 */
export interface MuxTransport {
  /** Short name for logs ("grpc", "memory", ...). */
  readonly name: string;
  /**
   * Opens the stream and returns the frames the global writes. An admission
   * failure or an unreachable global rejects with a `KdsError`, either here or
   * from the first read of the returned iterable.
   */
  open(request: MuxDialRequest): Promise<AsyncIterable<Frame>>;
  /**
   * Optional: the next {@link MuxTransport.open} dials a new connection
   * instead of reusing the current one (which closes once its streams
   * end). {@link failoverMuxTransport} calls it after a goaway RECONNECT,
   * so that a load balancer in front of several global instances places
   * the zone again rather than keeping it on the connection to the
   * instance that asked it to move.
   */
  newConnection?(): void;
}

/** The global's side of the seam: accepts one zone's stream. */
export interface MuxAcceptor {
  /**
   * Admits the zone named in `headers` and returns the frames the global
   * writes. Rejects with a `KdsError` (`missing_client_id`,
   * `unauthenticated`, `permission_denied`, `zone_not_registered`,
   * `zone_disabled`) when the zone is not admitted. `signal` aborts when the
   * zone's stream goes away. `peer` is what the server adapter knows of the
   * connection (a client certificate), never anything the client sent. The
   * returned frames end when the session ends; after the goaway of a
   * session the global ended for a failure or a revocation they throw that
   * end as a `KdsError` (see `sessionEndError`), which a Connect handler
   * turns into the stream's status.
   */
  accept(
    headers: Headers,
    inbound: AsyncIterable<Frame>,
    signal: AbortSignal,
    peer?: PeerInfo,
  ): Promise<AsyncIterable<Frame>>;
}
