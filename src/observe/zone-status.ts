/**
 * What a side reports of its sync with a peer, per zone and per kind: the
 * plain records the sync engine fills (`ZoneStatusRecord` in sync/status.ts)
 * and the status feed, the admin API and the page read. Data only, so the
 * readers below the sync engine need not import it.
 *
 * @module
 */
import type { PeerVersion } from "../metrics.ts";

/** Response counters of one type, over one session or over all of them. */
export interface SyncCounters {
  /** As sender: responses sent. */
  readonly sent: number;
  /** As sender: resources sent in them. */
  readonly resourcesSent: number;
  /** As sender: responses the peer ACKed. */
  readonly acked: number;
  /** As sender: responses the peer NACKed. */
  readonly nacked: number;
  /** As receiver: responses accepted. */
  readonly accepted: number;
  /** As receiver: resources received in accepted responses. */
  readonly resourcesReceived: number;
  /** As receiver: responses rejected (NACKed). */
  readonly rejected: number;
}

/** A failure a side named, kept apart from how the last session ended. */
export interface SyncError {
  /** A session-end code ("protocol_error", "heartbeat_timeout", ...), or "kinds_refused" or "sync_failed". */
  readonly code: string;
  /** What happened. */
  readonly message: string;
  /** When. */
  readonly at: Date;
}

/** Status of one type on one zone's connection. */
export interface TypeSyncStatus extends SyncCounters {
  /** The kind. */
  readonly kind: string;
  /** Its type URL. */
  readonly typeUrl: string;
  /** Which way it flows. */
  readonly direction: "global-to-zone" | "zone-to-global" | "zone-to-zones";
  /**
   * The counters of the current session (of the last one while offline);
   * zero before the first. The counters of this interface itself are the
   * totals since this side started, over every session. Which of them move
   * depends on the side: see {@link sideOf}.
   */
  readonly session: SyncCounters;
  /** As sender: the last version the peer ACKed. */
  readonly lastAckedVersion: string | undefined;
  /** As sender: the peer's last NACK reason. */
  readonly lastNackError: string | undefined;
  /** As sender: a response is waiting past the ACK timeout. */
  readonly stalled: boolean;
  /** As sender: resources left out because they are larger than a message may be. */
  readonly oversized: readonly string[];
  /** As receiver: the last version accepted. */
  readonly lastAcceptedVersion: string | undefined;
  /** As receiver: why the last rejected response was rejected. */
  readonly lastRejectError: string | undefined;
  /** As receiver: resources of accepted responses left out, newest last (at most 20). */
  readonly rejectedResources: ReadonlyArray<{ readonly key: string; readonly reason: string }>;
  /**
   * As sender: the resources the peer rejected (applied the rest of their
   * response without them) and has not since accepted, with its reasons, as
   * its last ACK reported them (at most 100; a later good version or a
   * removal clears one).
   */
  readonly peerRejectedResources: ReadonlyArray<{ readonly key: string; readonly reason: string }>;
  /** As sender: how many more the peer rejected beyond those listed. */
  readonly peerRejectedOmitted: number;
  /** As sender: the kind has loaded from this side's store (until then nothing of it is sent). */
  readonly storeLoaded: boolean | undefined;
  /** As sender: the last failure reading this side's store, while it lasts. */
  readonly storeError: string | undefined;
  /** When things last happened to the type (ms since the epoch; undefined: never). See {@link TypeSyncTimes}. */
  readonly times?: TypeSyncTimes;
}

/**
 * When things last happened to one type on one zone's connection, in ms
 * since the epoch (undefined: not yet). Stamps of one zone strictly increase
 * (two events in one millisecond differ by a fraction), so "a NACK newer than
 * the last ACK" is `lastNackAt > lastAckAt` even within a millisecond.
 */
export interface TypeSyncTimes {
  /** This side sent a frame of the type: a response (as sender) or an ACK or NACK (as receiver). */
  readonly lastSentAt: number | undefined;
  /** This side received a frame of the type: an ACK or NACK (as sender) or a response (as receiver). */
  readonly lastReceivedAt: number | undefined;
  /** As sender: the peer's last ACK. */
  readonly lastAckAt: number | undefined;
  /** As sender: the peer's last NACK. */
  readonly lastNackAt: number | undefined;
  /** As receiver: this side's last accepted response. */
  readonly lastAcceptedAt: number | undefined;
  /** As receiver: this side's last rejected (NACKed) response. */
  readonly lastRejectedAt: number | undefined;
  /** As sender: since when a response waits past the ACK timeout (undefined while none does). */
  readonly stalledSince: number | undefined;
}

/**
 * This side's part in syncing a kind of `direction`: the "sender" (its
 * counters are sent, ACKed and NACKed), the "receiver" (received, that is
 * accepted plus rejected, accepted and rejected), or "both" for a
 * zone-to-zones kind (each side sends its part and receives the others').
 */
export function sideOf(
  role: "global" | "zone",
  direction: TypeSyncStatus["direction"],
): "sender" | "receiver" | "both" {
  if (direction === "zone-to-zones") return "both";
  return (direction === "global-to-zone") === (role === "global") ? "sender" : "receiver";
}

/** Status of one zone (on the global), or of the zone's own connection (on the zone). */
export interface ZoneStatus {
  /** The zone's name. */
  readonly zone: string;
  /** A session is up. */
  readonly online: boolean;
  /** On a global with several instances: the instance holding (or that last held) the zone's session. */
  readonly instance?: string;
  /** When the current (or last) session started. */
  readonly connectedAt: Date | undefined;
  /** When the last session ended. */
  readonly disconnectedAt: Date | undefined;
  /** Why the last session ended, whatever the reason (a clean close and a lost connection included). */
  readonly lastEnd: { readonly code: string; readonly message: string } | undefined;
  /**
   * The last failure a side named: a refusal (of the kinds, of a type), a
   * protocol error, a timeout, a failed sync. A later clean close or lost
   * connection does not replace it (those show in `lastEnd`); only the next
   * named failure does.
   */
  readonly lastError: SyncError | undefined;
  /** Round trip of the last heartbeat, in ms. */
  readonly heartbeatRttMs: number | undefined;
  /**
   * What the hellos of the current (or last) session agreed on: the peer's
   * software version (on a global the zone's, on a zone the global's; empty
   * from a version 2 peer), the protocol version and the features the
   * session uses. Undefined before the first session.
   */
  readonly peer?: PeerVersion;
  /** Per type. */
  readonly types: readonly TypeSyncStatus[];
  /**
   * The deletions the reset guard holds for this zone's session (its first
   * exchange after connecting would have deleted most of a kind); absent
   * when none are held.
   */
  readonly heldReset?: HeldReset;
  /**
   * On the global: the zone has been offline past its stale time
   * (`zoneStaleAfterMs`): its resources carry the `kds.io/origin-last-online`
   * label; `since` is when it was last online, `resources` how many are
   * marked. Absent while the zone is online or not yet stale.
   */
  readonly stale?: { readonly since: Date; readonly resources: number };
  /** On a zone with replicas (a lease): this replica's part. */
  readonly leadership?: ZoneLeadership;
  /** On the global: the zone's sessions replaced by newer ones lately, when more than a few (two processes use its name). */
  readonly replacements?: ZoneReplacements;
  /**
   * On a global with several instances: what rebalancing on this instance
   * did with the zone (see {@link RebalanceMoves}); absent when it never
   * asked the zone to move.
   */
  readonly moves?: RebalanceMoves;
  /**
   * On the global: when the credential of the zone's session on this
   * instance expires (its zone token's expiry, or its client certificate's
   * notAfter) and which it is; the session ends then. Absent when it has no
   * session here or its credential does not expire.
   */
  readonly credentialExpiry?: {
    readonly at: Date;
    readonly credential: "token" | "certificate";
  };
}

/** A zone replica's part in its zone's election (see `ZoneControlPlane`'s `lease`). */
export interface ZoneLeadership {
  /** "leader": it dials and writes; "standby": it serves reads only. */
  readonly role: "leader" | "standby";
  /** The term (fencing revision) of the current leader, when known. */
  readonly term: number | undefined;
  /** On a standby: the leader, when known. */
  readonly leader: { readonly holder: string; readonly address: string } | undefined;
}

/** How often a zone's sessions were replaced by newer ones of the same name. */
export interface ZoneReplacements {
  /** Replacements within the last `windowMs`. */
  readonly count: number;
  /** The window, in ms. */
  readonly windowMs: number;
  /** When the last one happened, in ms since the epoch. */
  readonly lastAt: number;
}

/** What rebalancing on one global instance did with one zone. */
export interface RebalanceMoves {
  /** Times the instance asked the zone to move (goaway RECONNECT). */
  readonly asked: number;
  /** Of those, the times the zone came back to the same instance: moves that did not land. */
  readonly unlanded: number;
  /** While the zone is not asked again (after a move that did not land): until when (wall clock). */
  readonly heldUntil: Date | undefined;
}

/** A held reset of one kind, as status shows it. */
export interface HeldKind {
  /** The kind. */
  readonly kind: string;
  /** Deletions held. */
  readonly held: number;
  /** Resources of the kind held for the peer when the reset was held. */
  readonly of: number;
}

/** Deletions the reset guard holds (sync/reset-guard.ts), as status shows them. */
export interface HeldReset {
  /** When the first kind's deletions were held (wall clock). */
  readonly since: Date;
  /** When they apply by themselves (`holdForMs`); undefined: only when accepted. */
  readonly releaseAt: Date | undefined;
  /** Per kind with held deletions. */
  readonly kinds: readonly HeldKind[];
}
