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
  SyncCounters,
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

type MutableCounters = { -readonly [K in keyof SyncCounters]: SyncCounters[K] };
type MutableType = {
  -readonly [K in keyof Omit<TypeSyncStatus, "session" | "times">]: TypeSyncStatus[K];
} & {
  session: MutableCounters;
  times: { -readonly [K in keyof TypeSyncTimes]: TypeSyncTimes[K] };
  oversized: readonly string[];
  rejectedResources: ReadonlyArray<{ key: string; reason: string }>;
  peerRejectedResources: ReadonlyArray<{ key: string; reason: string }>;
};

/**
 * The empty list every type's record starts with (replaced, never pushed to,
 * when something is recorded): three empty arrays per kind were about 100
 * bytes of every zone's record that nearly every zone never fills.
 */
const NONE: readonly never[] = Object.freeze([]);

const zeroCounters = (): MutableCounters => ({
  sent: 0,
  resourcesSent: 0,
  acked: 0,
  nacked: 0,
  accepted: 0,
  resourcesReceived: 0,
  rejected: 0,
});

/** Adds one to `counter` in the totals of `t`, and in its session's counters when `current` (the event is of the current session). */
function count(t: MutableType, counter: keyof SyncCounters, current: boolean): void {
  t[counter] += 1;
  if (current) t.session[counter] += 1;
}

/** The mutable record behind a {@link ZoneStatus}. */
export class ZoneStatusRecord {
  readonly zone: string;
  #online = false;
  #connectedAt: Date | undefined;
  #disconnectedAt: Date | undefined;
  #lastEnd: { code: string; message: string } | undefined;
  #lastError: SyncError | undefined;
  #rtt: (() => number | undefined) | undefined;
  #lastRtt: number | undefined;
  #peer: PeerVersion | undefined;
  readonly #types = new Map<string, MutableType>();
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
    if (t.direction === "local" || this.#types.has(t.typeUrl)) return;
    this.#types.set(t.typeUrl, {
      kind: t.kind,
      typeUrl: t.typeUrl,
      direction: t.direction,
      ...zeroCounters(),
      session: zeroCounters(),
      lastAckedVersion: undefined,
      lastNackError: undefined,
      stalled: false,
      oversized: NONE,
      lastAcceptedVersion: undefined,
      lastRejectError: undefined,
      rejectedResources: NONE,
      peerRejectedResources: NONE,
      peerRejectedOmitted: 0,
      storeLoaded: undefined,
      storeError: undefined,
      times: {
        lastSentAt: undefined,
        lastReceivedAt: undefined,
        lastAckAt: undefined,
        lastNackAt: undefined,
        lastAcceptedAt: undefined,
        lastRejectedAt: undefined,
        stalledSince: undefined,
      },
    });
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
    this.#connectedAt = new Date(this.#now());
    this.#rtt = rtt;
    for (const t of this.#types.values()) t.session = zeroCounters();
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
    this.#disconnectedAt = new Date(this.#now());
    this.#lastEnd = { code: end.code, message: end.message };
    this.#lastRtt = this.#rtt?.();
    this.#rtt = undefined;
    for (const t of this.#types.values()) {
      t.stalled = false;
      t.times.stalledSince = undefined;
    }
  }

  /** Callbacks for the discovery server of session `session` (by default the current one) of this zone. */
  serverObserver(session: number = this.#session): ServerObserver {
    return {
      // Every zone's every change comes here (a send, its ACK, and the ACK's errors): the counters are
      // named, not reached through count()'s computed keys, and no closure is made per call.
      sent: (typeUrl, info) => {
        const t = this.#types.get(typeUrl);
        if (t === undefined) return;
        t.sent++;
        t.resourcesSent += info.resources;
        if (session === this.#session) {
          t.session.sent++;
          t.session.resourcesSent += info.resources;
        }
        t.times.lastSentAt = this.#stamp();
      },
      acked: (typeUrl, version) => {
        const t = this.#types.get(typeUrl);
        if (t === undefined) return;
        t.acked++;
        if (session === this.#session) t.session.acked++;
        t.lastAckedVersion = version;
        t.stalled = false;
        const at = this.#stamp();
        t.times.lastAckAt = at;
        t.times.lastReceivedAt = at;
        t.times.stalledSince = undefined;
      },
      nacked: (typeUrl, _version, error) => {
        // The zone refused the global's kinds: the session ends for it, and the reason stays the last error.
        if (typeUrl === KIND_CATALOG_TYPE_URL) this.failed("kinds_refused", error);
        this.#with(typeUrl, (t) => {
          count(t, "nacked", session === this.#session);
          t.lastNackError = error;
          const at = this.#stamp();
          t.times.lastNackAt = at;
          t.times.lastReceivedAt = at;
          t.times.stalledSince = undefined;
        });
      },
      resourceErrors: (typeUrl, errors, omitted) => {
        const t = this.#types.get(typeUrl);
        if (t === undefined) return;
        // Most ACKs reject nothing and find nothing rejected before: no new array for those.
        if (errors.length > 0 || t.peerRejectedResources.length > 0)
          t.peerRejectedResources = errors.map((e) => ({ key: e.key, reason: e.reason }));
        t.peerRejectedOmitted = omitted;
      },
      // A replaced session's stall is not the zone's: the newer session's ACKs would never clear it.
      stalled: (typeUrl) =>
        void this.#with(typeUrl, (t) => {
          if (session !== this.#session) return;
          t.stalled = true;
          t.times.stalledSince ??= this.#stamp();
        }),
      oversized: (typeUrl, key) =>
        void this.#with(typeUrl, (t) => {
          if (!t.oversized.includes(key) && t.oversized.length < 100)
            t.oversized = [...t.oversized, key];
        }),
    };
  }

  /** Callbacks for the discovery client of session `session` (by default the current one) of this zone. */
  clientObserver(session: number = this.#session): ClientObserver {
    return {
      // Every change every zone applies comes here: the counters are named, not reached through count()'s computed keys.
      accepted: (typeUrl, info) => {
        const t = this.#types.get(typeUrl);
        if (t === undefined) return;
        t.accepted++;
        t.resourcesReceived += info.resources;
        if (session === this.#session) {
          t.session.accepted++;
          t.session.resourcesReceived += info.resources;
        }
        t.lastAcceptedVersion = info.version;
        // Accepted, then ACKed at once: received and sent at one time.
        const at = this.#stamp();
        t.times.lastAcceptedAt = at;
        t.times.lastReceivedAt = at;
        t.times.lastSentAt = at;
      },
      rejected: (typeUrl, _version, error) =>
        void this.#with(typeUrl, (t) => {
          count(t, "rejected", session === this.#session);
          t.lastRejectError = error;
          const at = this.#stamp();
          t.times.lastRejectedAt = at;
          t.times.lastReceivedAt = at;
          t.times.lastSentAt = at;
        }),
      resourceRejected: (typeUrl, key, reason) =>
        void this.#with(typeUrl, (t) => {
          t.rejectedResources = [
            ...t.rejectedResources.filter((r) => r.key !== key),
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
      connectedAt: this.#connectedAt,
      disconnectedAt: this.#disconnectedAt,
      lastEnd: this.#lastEnd,
      lastError: this.#lastError,
      heartbeatRttMs: this.#rtt?.() ?? this.#lastRtt,
      ...(this.#peer === undefined
        ? {}
        : { peer: { ...this.#peer, features: [...this.#peer.features] } }),
      types: [...this.#types.values()].map((t) => {
        const served = this.#served().find((k) => k.kind === t.kind);
        return {
          ...t,
          session: { ...t.session },
          oversized: [...t.oversized],
          rejectedResources: [...t.rejectedResources],
          peerRejectedResources: [...t.peerRejectedResources],
          times: { ...t.times },
          storeLoaded: served?.loaded,
          storeError: served?.error,
        };
      }),
    };
  }

  #with(typeUrl: string, update: (t: MutableType) => unknown): void {
    const t = this.#types.get(typeUrl);
    if (t !== undefined) update(t);
  }
}
