/**
 * Sync status in the spirit of Kuma's ZoneInsight: per zone, whether it is
 * online, when it connected and disconnected, the heartbeat round trip, and
 * per type what was sent, ACKed and NACKed (or received, accepted, rejected),
 * in the current session and in total; and the last session end apart from
 * the last named failure, so a clean close or a lost connection after a
 * refusal does not hide the refusal.
 *
 * @module
 */
import type { ClientObserver, ServerObserver } from "../discovery/types.ts";
import type { SessionEnd } from "../mux/state.ts";
import type { PeerVersion } from "../metrics.ts";
import type {
  SyncError,
  TypeSyncStatus,
  TypeSyncTimes,
  ZoneStatus,
} from "../observe/zone-status.ts";
import { KIND_CATALOG_TYPE_URL } from "./kind-catalog.ts";
import type { ResourceType } from "../kinds/resource-types.ts";
import type { ServedKindState } from "./snapshot-cache.ts";

/** Most resource rejections kept per type. */
const MAX_REJECTIONS = 20;

/** Which session-end codes say only that the connection went away: they show in `lastEnd`, never as `lastError`. */
const CONNECTION_LOST: ReadonlySet<string> = new Set(["transport", "peer_eof", "aborted"]);

/**
 * The empty list every type's record starts with (replaced, never pushed to,
 * when something is recorded): three empty arrays per kind were about 100
 * bytes of every zone's record that nearly every zone never fills.
 */
const NONE: readonly never[] = Object.freeze([]);

/**
 * What a type's record holds of NACKs, rejections, stalls and oversized
 * resources: made at the first of them. Nearly every zone has none, and
 * these fields in every type's record were about 100 bytes of each.
 */
class Troubles {
  nacked = 0;
  rejected = 0;
  sessionNacked = 0;
  sessionRejected = 0;
  lastNackError: string | undefined = undefined;
  lastRejectError: string | undefined = undefined;
  oversized: readonly string[] = NONE;
  rejectedResources: ReadonlyArray<{ key: string; reason: string }> = NONE;
  peerRejectedResources: ReadonlyArray<{ key: string; reason: string }> = NONE;
  peerRejectedOmitted = 0;
  lastNackAt: number | undefined = undefined;
  lastRejectedAt: number | undefined = undefined;
  stalledSince: number | undefined = undefined;
}

/**
 * The mutable record of one type, every field written out in one class (the
 * session's counters and the times flat beside the totals, the kind read
 * from its {@link ResourceType}): V8 keeps them all in the object. A
 * spread of counters and nested `session` and `times` objects cost every
 * type of every zone about 260 bytes more. {@link ZoneStatusRecord.snapshot}
 * builds the nested shape of {@link TypeSyncStatus}.
 */
class TypeRecord {
  readonly type: ResourceType;
  sent = 0;
  resourcesSent = 0;
  acked = 0;
  accepted = 0;
  resourcesReceived = 0;
  sessionSent = 0;
  sessionResourcesSent = 0;
  sessionAcked = 0;
  sessionAccepted = 0;
  sessionResourcesReceived = 0;
  lastAckedVersion: string | undefined = undefined;
  lastAcceptedVersion: string | undefined = undefined;
  stalled = false;
  lastSentAt: number | undefined = undefined;
  lastReceivedAt: number | undefined = undefined;
  lastAckAt: number | undefined = undefined;
  lastAcceptedAt: number | undefined = undefined;
  troubles: Troubles | undefined = undefined;

  constructor(type: ResourceType) {
    this.type = type;
  }

  /** The {@link Troubles} of the type, made at the first. */
  ensureTroubles(): Troubles {
    this.troubles ??= new Troubles();
    return this.troubles;
  }

  /** Starts the current session's counters at zero. */
  newSession(): void {
    this.sessionSent = 0;
    this.sessionResourcesSent = 0;
    this.sessionAcked = 0;
    this.sessionAccepted = 0;
    this.sessionResourcesReceived = 0;
    if (this.troubles !== undefined) {
      this.troubles.sessionNacked = 0;
      this.troubles.sessionRejected = 0;
    }
  }

  /** The status of the type, in {@link TypeSyncStatus}'s shape and field order (the store state from `served`). */
  snapshot(served: ServedKindState | undefined): TypeSyncStatus {
    const type = this.type;
    const tr = this.troubles;
    return {
      kind: type.kind,
      typeUrl: type.typeUrl,
      // add() leaves local kinds out.
      direction: type.direction as TypeSyncStatus["direction"],
      sent: this.sent,
      resourcesSent: this.resourcesSent,
      acked: this.acked,
      nacked: tr?.nacked ?? 0,
      accepted: this.accepted,
      resourcesReceived: this.resourcesReceived,
      rejected: tr?.rejected ?? 0,
      session: {
        sent: this.sessionSent,
        resourcesSent: this.sessionResourcesSent,
        acked: this.sessionAcked,
        nacked: tr?.sessionNacked ?? 0,
        accepted: this.sessionAccepted,
        resourcesReceived: this.sessionResourcesReceived,
        rejected: tr?.sessionRejected ?? 0,
      },
      lastAckedVersion: this.lastAckedVersion,
      lastNackError: tr?.lastNackError,
      stalled: this.stalled,
      oversized: [...(tr?.oversized ?? NONE)],
      lastAcceptedVersion: this.lastAcceptedVersion,
      lastRejectError: tr?.lastRejectError,
      rejectedResources: [...(tr?.rejectedResources ?? NONE)],
      peerRejectedResources: [...(tr?.peerRejectedResources ?? NONE)],
      peerRejectedOmitted: tr?.peerRejectedOmitted ?? 0,
      storeLoaded: served?.loaded,
      storeError: served?.error,
      times: {
        lastSentAt: this.lastSentAt,
        lastReceivedAt: this.lastReceivedAt,
        lastAckAt: this.lastAckAt,
        lastNackAt: tr?.lastNackAt,
        lastAcceptedAt: this.lastAcceptedAt,
        lastRejectedAt: tr?.lastRejectedAt,
        stalledSince: tr?.stalledSince,
      },
    };
  }
}

/** The mutable record behind a {@link ZoneStatus}. */
export class ZoneStatusRecord {
  readonly zone: string;
  #online = false;
  /** When the session started and ended, in ms: a Date each was about 100 bytes of every zone; snapshot() makes them. */
  #connectedAt: number | undefined;
  #disconnectedAt: number | undefined;
  #lastEnd: { code: string; message: string } | undefined;
  #lastError: SyncError | undefined;
  #rtt: (() => number | undefined) | undefined;
  #lastRtt: number | undefined;
  #peer: PeerVersion | undefined;
  /**
   * The records of the kinds, in order: a few, searched by type URL. An array
   * of exactly their number (add() concatenates) costs a zone about 100
   * bytes less than a Map.
   */
  #types: readonly TypeRecord[] = NONE;
  readonly #served: () => readonly ServedKindState[];
  readonly #now: () => number;
  #lastStamp = Number.NEGATIVE_INFINITY;
  /**
   * Which session is current: {@link ZoneStatusRecord.connected} counts
   * them. A replaced session still ends its work after the newer one
   * connected (a replaced session is closed gracefully and hands out what it
   * buffered); its sends, ACKs and applies count in the totals, not in the
   * newer session's counters, and its end does not mark the zone offline.
   */
  #session = 0;

  /**
   * @param zone - zone name
   * @param types - the kinds that flow, with their direction
   * @param served - reads the store state of the kinds this side sends
   * @param now - wall clock in ms since the epoch, for the times of {@link TypeSyncTimes}. Default `Date.now`.
   */
  constructor(
    zone: string,
    types: readonly ResourceType[],
    served: () => readonly ServedKindState[] = () => [],
    now: () => number = Date.now,
  ) {
    this.zone = zone;
    this.#served = served;
    this.#now = now;
    for (const t of types) this.add(t);
  }

  /** Tracks one more kind (a zone that learned it from the global); local kinds are left out. */
  add(t: ResourceType): void {
    if (t.direction === "local" || this.#find(t.typeUrl) !== undefined) return;
    this.#types = this.#types.concat([new TypeRecord(t)]);
  }

  /** The record of `typeUrl`, if tracked (a loop: every zone's every change comes here). */
  #find(typeUrl: string): TypeRecord | undefined {
    for (const t of this.#types) if (t.type.typeUrl === typeUrl) return t;
    return undefined;
  }

  /** Now, strictly after the previous stamp of this record (see {@link TypeSyncTimes}). */
  #stamp(): number {
    const now = this.#now();
    this.#lastStamp = now > this.#lastStamp ? now : this.#lastStamp + 0.001;
    return this.#lastStamp;
  }

  /**
   * Marks the zone online (a new session: its counters start at zero); `rtt`
   * reads the live heartbeat round trip, `peer` is what the hellos agreed on.
   * Returns the session's number, for its observers and its end.
   */
  connected(rtt: () => number | undefined, peer?: PeerVersion): number {
    this.#session++;
    this.#online = true;
    if (peer !== undefined)
      this.#peer = {
        softwareVersion: peer.softwareVersion,
        protocolVersion: peer.protocolVersion,
        features: [...peer.features],
      };
    this.#connectedAt = this.#now();
    this.#rtt = rtt;
    for (const t of this.#types) t.newSession();
    return this.#session;
  }

  /**
   * Records a failure named outside the session's end (a refused kind
   * catalog, a failed sync), which the session then closes for; it stays
   * the last error however that session and the next ones end.
   */
  failed(code: string, message: string): void {
    this.#lastError = { code, message, at: new Date(this.#now()) };
  }

  /**
   * Marks the zone offline with the end of session `session` (by default the
   * current one). A failure (not a clean close, not a lost connection) also
   * becomes the last error. The end of a session a newer one replaced
   * changes nothing else: the zone is online in the newer one.
   */
  disconnected(end: SessionEnd, session: number = this.#session): void {
    if (!end.graceful && !CONNECTION_LOST.has(end.code)) this.failed(end.code, end.message);
    if (session !== this.#session) return;
    this.#online = false;
    this.#disconnectedAt = this.#now();
    this.#lastEnd = { code: end.code, message: end.message };
    this.#lastRtt = this.#rtt?.();
    this.#rtt = undefined;
    for (const t of this.#types) {
      t.stalled = false;
      if (t.troubles !== undefined) t.troubles.stalledSince = undefined;
    }
  }

  /** Callbacks for the discovery server of session `session` (by default the current one) of this zone. */
  serverObserver(session: number = this.#session): ServerObserver {
    return {
      // Every zone's every change comes here (a send, its ACK, and the ACK's errors): the counters are
      // named, not reached through count()'s computed keys, and no closure is made per call.
      sent: (typeUrl, info) => {
        const t = this.#find(typeUrl);
        if (t === undefined) return;
        t.sent++;
        t.resourcesSent += info.resources;
        if (session === this.#session) {
          t.sessionSent++;
          t.sessionResourcesSent += info.resources;
        }
        t.lastSentAt = this.#stamp();
      },
      acked: (typeUrl, version) => {
        const t = this.#find(typeUrl);
        if (t === undefined) return;
        t.acked++;
        if (session === this.#session) t.sessionAcked++;
        t.lastAckedVersion = version;
        t.stalled = false;
        const at = this.#stamp();
        t.lastAckAt = at;
        t.lastReceivedAt = at;
        if (t.troubles !== undefined) t.troubles.stalledSince = undefined;
      },
      nacked: (typeUrl, _version, error) => {
        // The zone refused the global's kinds: the session ends for it, and the reason stays the last error.
        if (typeUrl === KIND_CATALOG_TYPE_URL) this.failed("kinds_refused", error);
        this.#with(typeUrl, (t) => {
          const tr = t.ensureTroubles();
          tr.nacked++;
          if (session === this.#session) tr.sessionNacked++;
          tr.lastNackError = error;
          const at = this.#stamp();
          tr.lastNackAt = at;
          t.lastReceivedAt = at;
          tr.stalledSince = undefined;
        });
      },
      resourceErrors: (typeUrl, errors, omitted) => {
        const t = this.#find(typeUrl);
        if (t === undefined) return;
        // Most ACKs reject nothing and find nothing rejected before: no new array, nor troubles, for those.
        const tr = t.troubles;
        if (errors.length > 0 || (tr !== undefined && tr.peerRejectedResources.length > 0))
          t.ensureTroubles().peerRejectedResources = errors.map((e) => ({
            key: e.key,
            reason: e.reason,
          }));
        if (omitted !== 0 || tr !== undefined) t.ensureTroubles().peerRejectedOmitted = omitted;
      },
      // A replaced session's stall is not the zone's: the newer session's ACKs would never clear it.
      stalled: (typeUrl) =>
        void this.#with(typeUrl, (t) => {
          if (session !== this.#session) return;
          t.stalled = true;
          t.ensureTroubles().stalledSince ??= this.#stamp();
        }),
      oversized: (typeUrl, key) =>
        void this.#with(typeUrl, (t) => {
          const tr = t.ensureTroubles();
          if (!tr.oversized.includes(key) && tr.oversized.length < 100)
            tr.oversized = [...tr.oversized, key];
        }),
    };
  }

  /** Callbacks for the discovery client of session `session` (by default the current one) of this zone. */
  clientObserver(session: number = this.#session): ClientObserver {
    return {
      // Every change every zone applies comes here: the counters are named, not reached through count()'s computed keys.
      accepted: (typeUrl, info) => {
        const t = this.#find(typeUrl);
        if (t === undefined) return;
        t.accepted++;
        t.resourcesReceived += info.resources;
        if (session === this.#session) {
          t.sessionAccepted++;
          t.sessionResourcesReceived += info.resources;
        }
        t.lastAcceptedVersion = info.version;
        // Accepted, then ACKed at once: received and sent at one time.
        const at = this.#stamp();
        t.lastAcceptedAt = at;
        t.lastReceivedAt = at;
        t.lastSentAt = at;
      },
      rejected: (typeUrl, _version, error) =>
        void this.#with(typeUrl, (t) => {
          const tr = t.ensureTroubles();
          tr.rejected++;
          if (session === this.#session) tr.sessionRejected++;
          tr.lastRejectError = error;
          const at = this.#stamp();
          tr.lastRejectedAt = at;
          t.lastReceivedAt = at;
          t.lastSentAt = at;
        }),
      resourceRejected: (typeUrl, key, reason) =>
        void this.#with(typeUrl, (t) => {
          const tr = t.ensureTroubles();
          tr.rejectedResources = [
            ...tr.rejectedResources.filter((r) => r.key !== key),
            { key, reason },
          ].slice(-MAX_REJECTIONS);
        }),
    };
  }

  /** A snapshot of the status. */
  snapshot(): ZoneStatus {
    return {
      zone: this.zone,
      online: this.#online,
      connectedAt: this.#connectedAt === undefined ? undefined : new Date(this.#connectedAt),
      disconnectedAt:
        this.#disconnectedAt === undefined ? undefined : new Date(this.#disconnectedAt),
      lastEnd: this.#lastEnd,
      lastError: this.#lastError,
      heartbeatRttMs: this.#rtt?.() ?? this.#lastRtt,
      ...(this.#peer === undefined
        ? {}
        : { peer: { ...this.#peer, features: [...this.#peer.features] } }),
      types: this.#types.map((t) => t.snapshot(this.#served().find((k) => k.kind === t.type.kind))),
    };
  }

  #with(typeUrl: string, update: (t: TypeRecord) => unknown): void {
    const t = this.#find(typeUrl);
    if (t !== undefined) update(t);
  }
}
