/**
 * What the conformance kit needs of a transport: one mux stream to the peer
 * under test, carrying whole frames, and how the call ended. The kit's core
 * speaks only to this interface; the node adapter
 * (`src/adapters/node/conformance-link.ts`) provides it over gRPC on HTTP/2.
 *
 * @module
 */
import type { Frame } from "../gen/kds/mux/v1/mux_pb.ts";

/** How a mux call ended, as far as the kit could see. */
export interface LinkEnd {
  /** The gRPC status code (0 is OK), or undefined when the call was reset or lost without a status. */
  readonly grpcStatus: number | undefined;
  /** The `kds-error-code` trailer, if any. */
  readonly kdsErrorCode: string | undefined;
  /** The status message, or what went wrong with the transport. */
  readonly message: string;
  /**
   * Where the status came: "trailers" (a trailing HEADERS frame, or the one
   * HEADERS frame of a Trailers-Only answer, which ends the stream), or
   * "headers-open" (response headers that did not end the stream: gRPC
   * clients read those as initial metadata, without a status). Undefined
   * when no status came, or the link cannot tell.
   */
  readonly statusIn?: "trailers" | "headers-open";
}

/** One mux stream to the peer under test. */
export interface MuxLink {
  /** The request headers of the call, lower-case names (zone mode: what the zone sent; global mode: what the kit sent). */
  readonly headers: ReadonlyMap<string, string>;
  /** Encodes `frames` and writes them in one transport write, in order. Errors show in {@link MuxLink.ended}. */
  write(frames: readonly Frame[]): void;
  /** The next frame from the peer; undefined once its direction has ended. Rejects when `signal` aborts. */
  read(signal: AbortSignal): Promise<Frame | undefined>;
  /** Ends the kit's direction of the stream (zone mode: with this status and trailer). */
  close(status?: { grpcStatus: number; kdsErrorCode?: string; message?: string }): void;
  /** Cancels the call at once. */
  cancel(): void;
  /** Resolves once the call has ended (global mode: the target's status and trailers). */
  readonly ended: Promise<LinkEnd>;
}

/** Opens a mux call to a global (global mode). `headers` are the request headers to send (client-id, authorization). */
export type DialLink = (
  headers: Readonly<Record<string, string>>,
  signal: AbortSignal,
) => Promise<MuxLink>;

/** Waits for the zone under test to open its next mux call to the kit (zone mode). */
export type AcceptLink = (signal: AbortSignal) => Promise<MuxLink>;
