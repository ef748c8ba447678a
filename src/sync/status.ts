/**
 * Sync status in the spirit of Kuma's ZoneInsight: per zone, whether it is
 * online, when it connected and disconnected, the heartbeat round trip, and
 * per type what was sent, ACKed and NACKed (or received, accepted, rejected).
 *
 * @module
 */
import type { ClientObserver, ServerObserver } from "../discovery/types.ts";
import type { SessionEnd } from "../mux/state.ts";
import type { ResourceType } from "./resource-types.ts";
import type { ServedKindState } from "./snapshot-cache.ts";

/** Most resource rejections kept per type. */
const MAX_REJECTIONS = 20;

/** Status of one type on one zone's connection. */
export interface TypeSyncStatus {
  /** The kind. */
  readonly kind: string;
  /** Its type URL. */
  readonly typeUrl: string;
  /** Which way it flows. */
  readonly direction: "global-to-zone" | "zone-to-global";
  /** As sender: responses sent. */
  readonly sent: number;
  /** As sender: resources sent in them (added or updated; a resume that finds nothing changed sends none). */
  readonly resourcesSent: number;
  /** As sender: responses the peer ACKed. */
  readonly acked: number;
  /** As sender: responses the peer NACKed. */
  readonly nacked: number;
  /** As sender: the last version the peer ACKed. */
  readonly lastAckedVersion: string | undefined;
  /** As sender: the peer's last NACK reason. */
  readonly lastNackError: string | undefined;
  /** As sender: a response is waiting past the ACK timeout. */
  readonly stalled: boolean;
  /** As sender: resources left out because they are larger than a message may be. */
  readonly oversized: readonly string[];
  /** As receiver: responses accepted. */
  readonly accepted: number;
  /** As receiver: resources received in accepted responses. */
  readonly resourcesReceived: number;
  /** As receiver: responses rejected (NACKed). */
  readonly rejected: number;
  /** As receiver: the last version accepted. */
  readonly lastAcceptedVersion: string | undefined;
  /** As receiver: why the last rejected response was rejected. */
  readonly lastRejectError: string | undefined;
  /** As receiver: resources of accepted responses left out, newest last (at most 20). */
  readonly rejectedResources: ReadonlyArray<{ readonly key: string; readonly reason: string }>;
  /** As sender: the kind has loaded from this side's store (until then nothing of it is sent). */
  readonly storeLoaded: boolean | undefined;
  /** As sender: the last failure reading this side's store, while it lasts. */
  readonly storeError: string | undefined;
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
  /** Why the last session ended. */
  readonly lastEnd: { readonly code: string; readonly message: string } | undefined;
  /** Round trip of the last heartbeat, in ms. */
  readonly heartbeatRttMs: number | undefined;
  /** Per type. */
  readonly types: readonly TypeSyncStatus[];
}

type MutableType = { -readonly [K in keyof TypeSyncStatus]: TypeSyncStatus[K] } & {
  oversized: string[];
  rejectedResources: Array<{ key: string; reason: string }>;
};

/** The mutable record behind a {@link ZoneStatus}. */
export class ZoneStatusRecord {
  readonly zone: string;
  #online = false;
  #connectedAt: Date | undefined;
  #disconnectedAt: Date | undefined;
  #lastEnd: { code: string; message: string } | undefined;
  #rtt: (() => number | undefined) | undefined;
  #lastRtt: number | undefined;
  readonly #types = new Map<string, MutableType>();
  readonly #served: () => readonly ServedKindState[];

  /**
   * @param zone - zone name
   * @param types - the kinds that flow, with their direction
   * @param served - reads the store state of the kinds this side sends
   */
  constructor(zone: string, types: readonly ResourceType[], served: () => readonly ServedKindState[] = () => []) {
    this.zone = zone;
    this.#served = served;
    for (const t of types) this.add(t);
  }

  /** Tracks one more kind (a zone that learned it from the global); local kinds are left out. */
  add(t: ResourceType): void {
    if (t.direction === "local" || this.#types.has(t.typeUrl)) return;
    this.#types.set(t.typeUrl, {
      kind: t.kind,
      typeUrl: t.typeUrl,
      direction: t.direction,
      sent: 0,
      resourcesSent: 0,
      acked: 0,
      nacked: 0,
      lastAckedVersion: undefined,
      lastNackError: undefined,
      stalled: false,
      oversized: [],
      accepted: 0,
      resourcesReceived: 0,
      rejected: 0,
      lastAcceptedVersion: undefined,
      lastRejectError: undefined,
      rejectedResources: [],
      storeLoaded: undefined,
      storeError: undefined,
    });
  }

  /** Marks the zone online; `rtt` reads the live heartbeat round trip. */
  connected(rtt: () => number | undefined): void {
    this.#online = true;
    this.#connectedAt = new Date();
    this.#rtt = rtt;
  }

  /** Marks the zone offline with the session's end. */
  disconnected(end: SessionEnd): void {
    this.#online = false;
    this.#disconnectedAt = new Date();
    this.#lastEnd = { code: end.code, message: end.message };
    this.#lastRtt = this.#rtt?.();
    this.#rtt = undefined;
    for (const t of this.#types.values()) t.stalled = false;
  }

  /** Callbacks for the discovery server of this zone's connection. */
  serverObserver(): ServerObserver {
    return {
      sent: (typeUrl, info) =>
        void this.#with(typeUrl, (t) => {
          t.sent++;
          t.resourcesSent += info.resources;
        }),
      acked: (typeUrl, version) =>
        void this.#with(typeUrl, (t) => {
          t.acked++;
          t.lastAckedVersion = version;
          t.stalled = false;
        }),
      nacked: (typeUrl, _version, error) =>
        void this.#with(typeUrl, (t) => {
          t.nacked++;
          t.lastNackError = error;
        }),
      stalled: (typeUrl) => void this.#with(typeUrl, (t) => (t.stalled = true)),
      oversized: (typeUrl, key) =>
        void this.#with(typeUrl, (t) => {
          if (!t.oversized.includes(key) && t.oversized.length < 100) t.oversized.push(key);
        }),
    };
  }

  /** Callbacks for the discovery client of this zone's connection. */
  clientObserver(): ClientObserver {
    return {
      accepted: (typeUrl, info) =>
        void this.#with(typeUrl, (t) => {
          t.accepted++;
          t.resourcesReceived += info.resources;
          t.lastAcceptedVersion = info.version;
        }),
      rejected: (typeUrl, _version, error) =>
        void this.#with(typeUrl, (t) => {
          t.rejected++;
          t.lastRejectError = error;
        }),
      resourceRejected: (typeUrl, key, reason) =>
        void this.#with(typeUrl, (t) => {
          t.rejectedResources = [...t.rejectedResources.filter((r) => r.key !== key), { key, reason }].slice(-MAX_REJECTIONS);
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
      heartbeatRttMs: this.#rtt?.() ?? this.#lastRtt,
      types: [...this.#types.values()].map((t) => {
        const served = this.#served().find((k) => k.kind === t.kind);
        return {
          ...t,
          oversized: [...t.oversized],
          rejectedResources: [...t.rejectedResources],
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
