/**
 * The lifecycle of a session as a tagged union with one transition function.
 *
 *     handshaking --hello--> open --end--> ending --released--> closed
 *          \______________end______________/^
 *
 * `end` is the moment the session's fate is decided (the reason is fixed then);
 * `released` is when the transport has been let go.
 *
 * @module
 */

/** Why a session ended. */
export type SessionEndCode =
  /** A side closed the session on purpose (shutdown, restart). */
  | "shutdown"
  /** A newer session of the same zone replaced this one. */
  | "replaced"
  /** The zone was removed or disabled on the global. */
  | "zone_revoked"
  /** The credential the zone was admitted with (zone token, client certificate) expired. */
  | "token_expired"
  /** The global asked the zone to reconnect now, preferably to another instance (it drains, or evens out its instances). */
  | "reconnect"
  /** A side broke the mux protocol. */
  | "protocol_error"
  /** The peer made this side buffer more than its process's memory budget allows (see `MemoryBudget`). */
  | "resource_exhausted"
  /** A side heard nothing from its peer for longer than the heartbeat timeout. */
  | "heartbeat_timeout"
  /** A frame waited longer than the send timeout to leave. */
  | "send_timeout"
  /** The peer did not send its hello in time. */
  | "handshake_timeout"
  /** The peer ended its direction of the stream without a goaway. */
  | "peer_eof"
  /** The transport failed (reset, connection lost, cancelled by the peer). */
  | "transport"
  /** This side's AbortSignal aborted. */
  | "aborted";

/** The end of a session: why, who decided, and whether it was deliberate. */
export interface SessionEnd {
  /** Why the session ended. */
  readonly code: SessionEndCode;
  /** Human-readable explanation, including what to do next where there is something to do. */
  readonly message: string;
  /** Which side ended the session. */
  readonly initiator: "local" | "peer";
  /** True for a deliberate close (shutdown, replaced, zone revoked, reconnect), false for a failure. */
  readonly graceful: boolean;
  /** The underlying error, if any. */
  readonly cause?: unknown;
}

/** Settings the peer announced in its hello, and what the two hellos agreed on (version, features). */
export interface PeerSettings {
  /** The peer's name. */
  readonly peerId: string;
  /** How many requests this side may send before a window update. */
  readonly requestWindow: number;
  /** How many responses this side may send before a window update. */
  readonly responseWindow: number;
  /** How many bytes of requests (by credit size) this side may send before a window update; 0 when the peer counts no bytes. */
  readonly requestWindowBytes: number;
  /** How many bytes of responses this side may send before a window update; 0 when the peer counts no bytes. */
  readonly responseWindowBytes: number;
  /** The largest frame the peer accepts. */
  readonly maxMessageBytes: number;
  /** The peer accepts reverse-call frames (it answers or refuses calls) and this side offered them too: the session uses the `calls` feature. */
  readonly calls: boolean;
  /** The mux protocol versions the peer speaks (a version 2 peer: exactly 2). */
  readonly protocolVersions: { readonly min: number; readonly max: number };
  /** The peer's software version ("kds-mux/0.1.0"); empty when it did not say (a version 2 peer). */
  readonly softwareVersion: string;
  /** The version the session runs: the highest both sides speak. */
  readonly protocolVersion: number;
  /** The features the session uses: those both sides offered ("batching", "calls"). */
  readonly features: readonly string[];
}

/** The states of a session. */
export type SessionState =
  | { readonly kind: "handshaking" }
  | { readonly kind: "open"; readonly peer: PeerSettings }
  | { readonly kind: "ending"; readonly end: SessionEnd; readonly peer: PeerSettings | undefined }
  | { readonly kind: "closed"; readonly end: SessionEnd; readonly peer: PeerSettings | undefined };

/** The events that move a session. */
export type SessionEvent =
  | { readonly type: "hello"; readonly peer: PeerSettings }
  | { readonly type: "end"; readonly end: SessionEnd }
  | { readonly type: "released" };

/** Codes that mean a deliberate close rather than a failure. */
export const gracefulCodes: ReadonlySet<SessionEndCode> = new Set([
  "shutdown",
  "replaced",
  "zone_revoked",
  "token_expired",
  "reconnect",
]);

/**
 * The one transition function. Events that make no sense in a state leave it
 * unchanged (the first end wins; a hello after the handshake is rejected by
 * the reader before it gets here).
 */
export function transition(state: SessionState, event: SessionEvent): SessionState {
  switch (event.type) {
    case "hello":
      return state.kind === "handshaking" ? { kind: "open", peer: event.peer } : state;
    case "end":
      if (state.kind === "handshaking") return { kind: "ending", end: event.end, peer: undefined };
      if (state.kind === "open") return { kind: "ending", end: event.end, peer: state.peer };
      return state;
    case "released":
      if (state.kind === "ending") return { kind: "closed", end: state.end, peer: state.peer };
      return state;
  }
}
