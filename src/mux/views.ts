/**
 * The two views a session gives each side, and the session's public shape.
 *
 * @module
 */
import type { MuxRequest, MuxResponse } from "./frames.ts";
import type { KdsError } from "../errors.ts";
import type { Call } from "../gen/kds/mux/v1/mux_pb.ts";
import type { PeerSettings, SessionEnd } from "./state.ts";

/** Where a view's `recvTo` hands what it received: one of the two, once per call. */
export interface ViewReceiver<T> {
  /** The frame asked for. */
  take(item: T): void;
  /** Why there is none: as `recv` rejects (`session_closed`, `busy`, `aborted`). */
  fail(error: unknown): void;
}

/**
 * This side as a discovery *server*: receives the peer's requests and sends
 * responses. On the global it serves global resources to the zone; on the
 * zone it serves zone resources to the global.
 */
export interface ServerStreamView {
  /**
   * The next request from the peer. Waits until one arrives; rejects with
   * `session_closed` once the session has ended and every buffered request
   * was taken, with `busy` if another recv is pending, or with `aborted`.
   */
  recv(signal?: AbortSignal): Promise<MuxRequest>;
  /**
   * {@link ServerStreamView.recv} without a promise: the next request, or why
   * there is none, goes to `receiver` (`take` or `fail`) from a later
   * microtask, as the promise would settle. For a reader that waits long
   * for each request and passes the same receiver every time: a promise per
   * wait that lasts until the peer's next ACK is copied by young collections
   * and then promoted. A view may lack it; `recv` then does the same.
   */
  recvTo?(receiver: ViewReceiver<MuxRequest>, signal?: AbortSignal): void;
  /**
   * Sends a response. Resolves once the response fits in the peer's window
   * for responses; it then leaves in order (possibly batched with others).
   * Waits while the peer's client view has no room, so a slow consumer on the
   * other side slows only this lane. Responses accepted but not yet written
   * when the session ends are lost with it; the discovery layer's ACKs cover
   * that.
   */
  send(response: MuxResponse, signal?: AbortSignal): Promise<void>;
  /**
   * Sends `response` at once when it can (it fits the peer's window for
   * responses and none waits before it): returns true when it was accepted,
   * as a resolved {@link ServerStreamView.send} would be, and hands it to the
   * transport before returning where the transport can take it. Returns
   * false, having done nothing, otherwise (or when `signal` aborted): `send`
   * it then. A view may lack it.
   */
  trySend?(response: MuxResponse, signal?: AbortSignal): boolean;
}

/**
 * This side as a discovery *client*: sends requests to the peer and receives
 * its responses.
 */
export interface ClientStreamView {
  /** Sends a request; same waiting rules as {@link ServerStreamView.send}. */
  send(request: MuxRequest, signal?: AbortSignal): Promise<void>;
  /** The next response from the peer; same rules as {@link ServerStreamView.recv}. */
  recv(signal?: AbortSignal): Promise<MuxResponse>;
  /** {@link ClientStreamView.recv} without a promise, as {@link ServerStreamView.recvTo}. A view may lack it. */
  recvTo?(receiver: ViewReceiver<MuxResponse>, signal?: AbortSignal): void;
  /**
   * {@link ClientStreamView.send} at once when it can, as
   * {@link ServerStreamView.trySend}: true when `request` was accepted (and
   * handed to the transport where it can take it), false having done
   * nothing otherwise (`send` it then). A view may lack it.
   */
  trySend?(request: MuxRequest, signal?: AbortSignal): boolean;
}

/**
 * The reverse-call frames of a session, for the call layer (`src/rpc`):
 * frames travel on the request lane (from the caller) or the response lane
 * (from the callee), in order with discovery traffic.
 */
export interface CallPort {
  /** Whether the peer's hello said it accepts call frames (false before the hello). */
  peerAcceptsCalls(): boolean;
  /** Sends a call frame; same waiting rules as {@link ServerStreamView.send}. */
  send(call: Call, signal?: AbortSignal): Promise<void>;
  /**
   * Sets the one listener of call frames. It is called by the session's
   * reader and must not wait; returning an error ends the session with a
   * protocol error. Without a listener, calls are refused.
   */
  listen(listener: (call: Call) => KdsError | undefined): void;
}

/** Live figures of a session. */
export interface SessionStats {
  /** Frames handed to the transport. */
  readonly sent: {
    readonly requests: number;
    readonly responses: number;
    readonly control: number;
  };
  /** Frames read from the transport. */
  readonly received: {
    readonly requests: number;
    readonly responses: number;
    readonly control: number;
  };
  /** Frames waiting in each view's receive buffer. */
  readonly buffered: { readonly requests: number; readonly responses: number };
  /** Bytes (by credit size) waiting in each view's receive buffer. */
  readonly bufferedBytes: { readonly requests: number; readonly responses: number };
  /** Round trip of the last answered heartbeat, in milliseconds. */
  readonly heartbeatRttMs: number | undefined;
}

/** How {@link Session.close} ends a session. */
export interface CloseOptions {
  /**
   * Why: a plain shutdown (default), replacement by a newer session, a
   * revoked zone, a request that the zone reconnect now (preferably to
   * another instance: a drain or a rebalance), or a peer that broke the
   * protocol above the mux (it asked for a type this side does not serve,
   * say; not graceful).
   */
  readonly code?:
    | "shutdown"
    | "replaced"
    | "zone_revoked"
    | "token_expired"
    | "reconnect"
    | "protocol_error";
  /** Told to the peer in the goaway. */
  readonly message?: string;
  /** With `reconnect`: the zone-facing URL of the instance the zone should dial next (the goaway's `reconnect_to`). */
  readonly reconnectTo?: string;
  /** The error behind the close, kept in the session's end (`protocol_error` closes carry a `KdsError` naming what was wrong). */
  readonly cause?: unknown;
  /** Stops waiting for the transport to be released (the session still ends). */
  readonly signal?: AbortSignal;
}

/** One multiplexed connection between a zone and the global, seen from one side. */
export interface Session {
  /** Which side this is. */
  readonly role: "zone" | "global";
  /** This side's name. */
  readonly localId: string;
  /**
   * The peer's name. On the global it is the zone name the connection was
   * admitted under; on the zone it is the global's name from its hello
   * (empty until {@link Session.ready}).
   */
  readonly peerId: string;
  /** What the peer announced in its hello (windows, largest message); undefined before it arrived. */
  readonly peer: PeerSettings | undefined;
  /** This side as a discovery server. */
  readonly server: ServerStreamView;
  /** This side as a discovery client. */
  readonly client: ClientStreamView;
  /** Reverse-call frames (see `src/rpc`). */
  readonly calls: CallPort;
  /** Resolves once both hellos are exchanged; rejects if the session ends first. */
  readonly ready: Promise<void>;
  /** Resolves with the reason when the session ends (never rejects). */
  readonly closed: Promise<SessionEnd>;
  /** The reason, once ended. */
  readonly end: SessionEnd | undefined;
  /** Aborts when the session ends; tie per-session work to it. */
  readonly signal: AbortSignal;
  /** Live figures. */
  stats(): SessionStats;
  /**
   * Ends the session on purpose: queued sends fail, a goaway tells the peer
   * why, and the transport is released (after at most `closeGraceMs`).
   * Resolves with the session's end reason (the first reason wins).
   */
  close(options?: CloseOptions): Promise<SessionEnd>;
}
