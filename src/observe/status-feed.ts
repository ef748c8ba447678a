/**
 * What the live status page shows, kept small and bounded: the zones' sync
 * status (read on demand from the role), the latest sessions, and the sync
 * lag over time per zone. It is a {@link Metrics} sink (give it to a control
 * plane through `fanOutMetrics`), and it tells readers when something changed
 * so the page's event stream sends a fresh snapshot. Web standards only.
 *
 * @module
 */
import { sideOf, type TypeSyncStatus, type ZoneStatus } from "./zone-status.ts";
import { directionTimes, zoneVerdict, type ZoneState } from "./zone-health.ts";
import { noopMetrics, type Metrics } from "../metrics.ts";
import { Pulse } from "../util/wake.ts";

/** How many recent sessions the page lists. */
const MAX_SESSIONS = 50;
/** How many seconds of lag history are kept per zone (one point per second with a change). */
const LAG_SECONDS = 300;
/** How many zones keep a lag history; the least recently updated is dropped beyond it. */
const MAX_LAG_ZONES = 200;

/** One session as the page lists it. */
export interface SessionEntry {
  /** The peer (zone name on the global, the global's name on a zone). */
  readonly peer: string;
  /** When it opened (ms since the epoch). */
  readonly openedAt: number;
  /** When it ended, if it did. */
  readonly endedAt?: number;
  /** Why it ended (a session end code). */
  readonly endCode?: string;
}

/** One point of a zone's lag series: the worst lag ACKed in that second. */
export interface LagPoint {
  /** The second (ms since the epoch, rounded down to the second). */
  readonly t: number;
  /** The largest lag ACKed in it, in ms. */
  readonly ms: number;
}

/** A type's status as JSON: with this side's part in it. */
export interface TypeSyncStatusJson extends TypeSyncStatus {
  /** "sender" (its counters are sent, ACKed, NACKed) or "receiver" (received, accepted, rejected). */
  readonly side: "sender" | "receiver" | "both";
}

/** A zone's status as JSON (dates as ms since the epoch). */
export interface ZoneStatusJson
  extends Omit<
    ZoneStatus,
    | "connectedAt"
    | "disconnectedAt"
    | "lastError"
    | "types"
    | "heldReset"
    | "stale"
    | "credentialExpiry"
  > {
  /** When the current or last session started. */
  readonly connectedAt: number | null;
  /** When the last session ended. */
  readonly disconnectedAt: number | null;
  /** The last failure a side named, kept when later sessions end cleanly (see {@link ZoneStatus.lastError}); `at` in ms since the epoch. */
  readonly lastError: {
    readonly code: string;
    readonly message: string;
    readonly at: number;
  } | null;
  /** Per type. */
  readonly types: readonly TypeSyncStatusJson[];
  /** The deletions the reset guard holds (see {@link ZoneStatus.heldReset}); times in ms since the epoch. */
  readonly heldReset: {
    readonly since: number;
    readonly releaseAt: number | null;
    readonly kinds: readonly {
      readonly kind: string;
      readonly held: number;
      readonly of: number;
    }[];
  } | null;
  /** Stale (see {@link ZoneStatus.stale}): `since` is when the zone was last online, in ms since the epoch. */
  readonly stale: { readonly since: number; readonly resources: number } | null;
  /** The zone's verdict (see zone-health.ts): its state, why, and since when (ms since the epoch). */
  readonly verdict: {
    readonly state: ZoneState;
    readonly reason: string;
    readonly since: number | null;
  };
  /** Per direction with kinds, when this side last sent and received a frame of them (ms since the epoch). */
  readonly directions: readonly {
    readonly direction: TypeSyncStatus["direction"];
    readonly lastSentAt: number | null;
    readonly lastReceivedAt: number | null;
  }[];
  /** When the credential of the zone's session here expires (see {@link ZoneStatus.credentialExpiry}), in ms since the epoch. */
  readonly credentialExpiry: {
    readonly at: number;
    readonly credential: "token" | "certificate";
  } | null;
}

/** Everything the page shows, as one JSON document. */
export interface StatusSnapshot {
  /** "global" or "zone". */
  readonly role: "global" | "zone";
  /** This side's name. */
  readonly name: string;
  /** When the snapshot was taken (ms since the epoch). */
  readonly now: number;
  /** Per zone (on a zone: itself). */
  readonly zones: readonly ZoneStatusJson[];
  /** Newest first. */
  readonly sessions: readonly SessionEntry[];
  /** Per zone, the lag series, oldest first. */
  readonly lag: Readonly<Record<string, readonly LagPoint[]>>;
}

/** Options of {@link StatusFeed}. */
export interface StatusFeedOptions {
  /** "global" or "zone". */
  readonly role: "global" | "zone";
  /** This side's name. */
  readonly name: string;
  /** Reads the zones' status (the global's every zone, or the zone itself). */
  readonly zones: () => Promise<readonly ZoneStatus[]>;
  /** On a zone, the zone's name: lag is reported per peer (the global), and shown under the zone. */
  readonly zone?: string;
  /** Wall clock in ms. Default `Date.now`. */
  readonly now?: () => number;
}

/** The live state behind the status page. */
export class StatusFeed {
  /** Report into this (for example through `fanOutMetrics`). */
  readonly metrics: Metrics;
  readonly #options: StatusFeedOptions;
  readonly #now: () => number;
  readonly #sessions: SessionEntry[] = [];
  readonly #lag = new Map<string, LagPoint[]>();
  #version = 0;
  readonly #pulse = new Pulse();

  /** @param options - role, name and where zone status comes from */
  constructor(options: StatusFeedOptions) {
    this.#options = options;
    this.#now = options.now ?? (() => Date.now());
    this.metrics = {
      ...noopMetrics,
      sessionOpened: (peer) => {
        this.#sessions.unshift({ peer, openedAt: this.#now() });
        if (this.#sessions.length > MAX_SESSIONS) this.#sessions.pop();
        this.#changed();
      },
      sessionClosed: (peer, code) => {
        const i = this.#sessions.findIndex((s) => s.peer === peer && s.endedAt === undefined);
        if (i >= 0)
          this.#sessions[i] = {
            ...(this.#sessions[i] as SessionEntry),
            endedAt: this.#now(),
            endCode: code,
          };
        this.#changed();
      },
      discovery: () => this.#changed(),
      syncLag: (peer, _kind, ms) => this.#addLag(options.zone ?? peer, ms),
      // A held reset or stale zone starting or ending shows at once.
      staleResources: () => this.#changed(),
      heldDeletions: () => this.#changed(),
    };
  }

  /** Bumped at every change (readers compare it to know whether to send again). */
  get version(): number {
    return this.#version;
  }

  /** Everything the page shows, now. */
  async snapshot(): Promise<StatusSnapshot> {
    const zones = await this.#options.zones();
    return {
      role: this.#options.role,
      name: this.#options.name,
      now: this.#now(),
      zones: zones.map((z) => this.#json(z)),
      sessions: [...this.#sessions],
      lag: Object.fromEntries([...this.#lag].map(([zone, points]) => [zone, [...points]])),
    };
  }

  /**
   * Resolves at the next change, or after `ms` (the page also refreshes
   * figures such as the heartbeat round trip that change without an event),
   * or when `signal` aborts.
   */
  changed(ms: number, signal: AbortSignal): Promise<void> {
    return this.#pulse.next(signal, ms);
  }

  #json(z: ZoneStatus): ZoneStatusJson {
    return {
      ...z,
      connectedAt: z.connectedAt?.getTime() ?? null,
      disconnectedAt: z.disconnectedAt?.getTime() ?? null,
      lastError:
        z.lastError === undefined ? null : { ...z.lastError, at: z.lastError.at.getTime() },
      types: z.types.map((t) => ({ ...t, side: sideOf(this.#options.role, t.direction) })),
      heldReset:
        z.heldReset === undefined
          ? null
          : {
              since: z.heldReset.since.getTime(),
              releaseAt: z.heldReset.releaseAt?.getTime() ?? null,
              kinds: z.heldReset.kinds.map((k) => ({ ...k })),
            },
      stale:
        z.stale === undefined
          ? null
          : { since: z.stale.since.getTime(), resources: z.stale.resources },
      credentialExpiry:
        z.credentialExpiry === undefined
          ? null
          : { at: z.credentialExpiry.at.getTime(), credential: z.credentialExpiry.credential },
      ...this.#health(z),
    };
  }

  #health(z: ZoneStatus): Pick<ZoneStatusJson, "verdict" | "directions"> {
    const verdict = zoneVerdict(z);
    return {
      verdict: { state: verdict.state, reason: verdict.reason, since: verdict.since ?? null },
      directions: directionTimes(z).map((d) => ({
        direction: d.direction,
        lastSentAt: d.lastSentAt ?? null,
        lastReceivedAt: d.lastReceivedAt ?? null,
      })),
    };
  }

  #addLag(zone: string, ms: number): void {
    const second = Math.floor(this.#now() / 1000) * 1000;
    let points = this.#lag.get(zone);
    if (points === undefined) {
      points = [];
      if (this.#lag.size >= MAX_LAG_ZONES)
        this.#lag.delete(this.#lag.keys().next().value as string);
    } else this.#lag.delete(zone); // re-inserted below: the map stays ordered by last update
    this.#lag.set(zone, points);
    const last = points.at(-1);
    if (last !== undefined && last.t === second)
      points[points.length - 1] = { t: second, ms: Math.max(last.ms, ms) };
    else points.push({ t: second, ms });
    while (points.length > 0 && (points[0] as LagPoint).t <= second - LAG_SECONDS * 1000)
      points.shift();
    this.#changed();
  }

  #changed(): void {
    this.#version++;
    this.#pulse.notify();
  }
}
