/**
 * The metrics seam: what the layers report, as events. The mux, the
 * discovery observers, the roles and the store wrapper call a {@link Metrics};
 * what it does with the events (Prometheus counters, the status page's live
 * feed, nothing) is up to the implementation. Web standards only: this file
 * imports nothing, so every layer may depend on it.
 *
 * @module
 */

/** A mux lane as metrics label it: the two data lanes, and control frames. */
export type MetricLane = "requests" | "responses" | "control";

/** How the global answered a zone's stream. */
export type AdmissionResult =
  /** Admitted: a session starts. */
  | "admitted"
  /** The `client-id` header was missing. */
  | "missing_client_id"
  /** The `client-id` is not a valid zone name. */
  | "invalid_client_id"
  /** No valid credential: a missing, forged, expired or revoked token, or an untrusted certificate. */
  | "unauthenticated"
  /** A valid credential of another zone. */
  | "permission_denied"
  /** No Zone resource of that name. */
  | "not_registered"
  /** The Zone resource is disabled. */
  | "disabled"
  /** The global was shutting down. */
  | "shutting_down"
  /** Too many streams were already admitted and waiting for their hello (the global's `maxHandshakes`). */
  | "overloaded"
  /** The registry could not be read. */
  | "error";

/** Which listener a connection reached: the one zones dial, or an admin API's. */
export type ListenerName = "zones" | "admin";

/** What happened to a connection on a listener. */
export type ConnectionEvent =
  /** A connection was accepted. */
  | "opened"
  /** An accepted connection closed (for any reason). */
  | "closed"
  /** A connection was closed at once because the listener already held its maximum. */
  | "refused"
  /** An accepted connection was closed because it carried no request for the idle timeout. */
  | "idle_timeout"
  /** An unauthenticated connection was closed to make room at the cap, or an identity's oldest beyond its share. */
  | "evicted"
  /** An accepted connection was closed because it presented no valid credentials within the authentication timeout. */
  | "unauthenticated_timeout"
  /** A request was cut (its HTTP/2 stream reset, its HTTP/1.1 connection closed) because its body did not arrive within the request timeout. */
  | "request_timeout";

/** What a discovery event was, seen from the side that sent the response. */
export type DiscoveryEvent =
  /** This side sent a response. */
  | "response"
  /** The peer ACKed one of this side's responses. */
  | "ack"
  /** The peer NACKed one of this side's responses. */
  | "nack"
  /** The peer ACKed one of this side's responses but reported resources it rejects (per-resource errors). */
  | "partial_ack"
  /** This side accepted (and ACKed) a response from the peer. */
  | "accepted"
  /** This side rejected (and NACKed) a response from the peer. */
  | "rejected";

/** What a session's hellos agreed on, as metrics see it. */
export interface PeerVersion {
  /** The mux protocol version the session runs. */
  readonly protocolVersion: number;
  /** The peer's software version; empty when it did not say. */
  readonly softwareVersion: string;
  /** The features the session uses. */
  readonly features: readonly string[];
}

/**
 * Where the layers report. Every method returns at once and never throws
 * into the caller's path (an implementation that can fail catches its own
 * errors). Names are peers (zone or global names), kinds ("Mesh") and store
 * method names; the implementation chooses which become labels.
 */
export interface Metrics {
  /** A mux session finished its handshake with `peer`; `version` is what the hellos agreed on. */
  sessionOpened(peer: string, version?: PeerVersion): void;
  /** A session that had opened ended, for `code` (a `SessionEndCode`); `version` as it opened. */
  sessionClosed(peer: string, code: string, version?: PeerVersion): void;
  /** The global decided on a zone's stream. */
  admission(result: AdmissionResult): void;
  /** A connection on `listener` opened, closed, was refused at the cap, or was closed for idling. */
  connection(listener: ListenerName, event: ConnectionEvent): void;
  /** `frames` frames of `bytes` bytes (as the mux accounts them) left or arrived on `lane`. */
  frames(direction: "sent" | "received", lane: MetricLane, frames: number, bytes: number): void;
  /** Sends on `lane` waited `ms` milliseconds for the peer's credit (reported when the wait ends). */
  creditWait(lane: "requests" | "responses", ms: number): void;
  /** A discovery response, ACK or NACK of `kind` on the session with `peer`. */
  discovery(event: DiscoveryEvent, peer: string, kind: string): void;
  /** A change of `kind` reached `peer` and was ACKed `ms` milliseconds after the store reported it. */
  syncLag(peer: string, kind: string, ms: number): void;
  /** A store call `op` took `ms` milliseconds and succeeded or failed. */
  storeOperation(op: string, ms: number, ok: boolean): void;
  /** `count` resources of `kind` from `zone` are marked stale now (their zone is offline past its stale time); 0 when none. A gauge. */
  staleResources(zone: string, kind: string, count: number): void;
  /** `count` deletions of `kind` for `zone`'s session are held by the reset guard now; 0 when none. A gauge. */
  heldDeletions(zone: string, kind: string, count: number): void;
  /** Rebalancing asked a zone to move to another instance, or found one it asked back on this instance (the move did not land). Optional. */
  rebalanceMove?(outcome: "asked" | "unlanded"): void;
  /**
   * The earliest expiry, in seconds since the epoch, of the credentials
   * (zone tokens, client certificates) of the zone sessions this global
   * holds; undefined when none of them expires (or no zone is online). A
   * gauge. Optional: an implementation without it reports nothing.
   */
  zoneTokenEarliestExpiry?(seconds: number | undefined): void;
}

/** A {@link Metrics} that drops everything (the default everywhere). */
export const noopMetrics: Metrics = Object.freeze({
  sessionOpened: () => undefined,
  sessionClosed: () => undefined,
  admission: () => undefined,
  connection: () => undefined,
  frames: () => undefined,
  creditWait: () => undefined,
  discovery: () => undefined,
  syncLag: () => undefined,
  storeOperation: () => undefined,
  staleResources: () => undefined,
  heldDeletions: () => undefined,
  rebalanceMove: () => undefined,
});

/** One {@link Metrics} that reports every event to each of `sinks`, in order. */
export function fanOutMetrics(...sinks: Metrics[]): Metrics {
  if (sinks.length === 1) return sinks[0] as Metrics;
  return {
    sessionOpened: (peer, version) => {
      for (const s of sinks) s.sessionOpened(peer, version);
    },
    sessionClosed: (peer, code, version) => {
      for (const s of sinks) s.sessionClosed(peer, code, version);
    },
    admission: (result) => {
      for (const s of sinks) s.admission(result);
    },
    connection: (listener, event) => {
      for (const s of sinks) s.connection(listener, event);
    },
    frames: (direction, lane, frames, bytes) => {
      for (const s of sinks) s.frames(direction, lane, frames, bytes);
    },
    creditWait: (lane, ms) => {
      for (const s of sinks) s.creditWait(lane, ms);
    },
    discovery: (event, peer, kind) => {
      for (const s of sinks) s.discovery(event, peer, kind);
    },
    syncLag: (peer, kind, ms) => {
      for (const s of sinks) s.syncLag(peer, kind, ms);
    },
    storeOperation: (op, ms, ok) => {
      for (const s of sinks) s.storeOperation(op, ms, ok);
    },
    staleResources: (zone, kind, count) => {
      for (const s of sinks) s.staleResources(zone, kind, count);
    },
    heldDeletions: (zone, kind, count) => {
      for (const s of sinks) s.heldDeletions(zone, kind, count);
    },
    rebalanceMove: (outcome) => {
      for (const s of sinks) s.rebalanceMove?.(outcome);
    },
    zoneTokenEarliestExpiry: (seconds) => {
      for (const s of sinks) s.zoneTokenEarliestExpiry?.(seconds);
    },
  };
}
