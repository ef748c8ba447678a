/**
 * Offline zones on the global. A zone offline for `staleAfterMs` has its
 * resources marked stale: each carries `kds.io/origin-last-online` (when
 * the zone was last online), which flows with zone-to-zones copies to the
 * other zones, and kinds whose `whenStale` is "withhold" are no longer
 * served to them. A zone offline for `expireAfterMs` has its resources
 * deleted (the deletions flow to the other zones). A zone that connects
 * again has its marks removed; what it still holds unchanged is not sent
 * again (its versions are untouched).
 *
 * Time comes from a {@link Clock}: whether a zone is online is checked
 * every `checkEveryMs` and when a session of this instance starts or ends,
 * and each zone's deadline is a timer of that clock, so tests step time.
 *
 * @module
 */
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import type { ResourceStore } from "../store/contract.ts";
import { LABELS, type TypeRegistry } from "../kinds/resource-types.ts";
import { KdsError } from "../errors.ts";
import { systemClock, type Clock } from "../util/clock.ts";
import { labelZoneResources, removeZoneResources } from "./zone-resources.ts";

/** Whether a zone is online anywhere, and when it was last (wall clock, ms since the epoch). */
export interface ZonePresence {
  /** A session of the zone is up on some instance. */
  readonly online: boolean;
  /** When it was last online, if known. */
  readonly lastOnline: number | undefined;
}

/** The times of {@link OfflineZones}. */
export interface OfflineTimes {
  /** Offline this long (ms): the zone's resources are marked stale. Undefined: never. */
  readonly staleAfterMs: number | undefined;
  /** Offline this long (ms): the zone's resources are deleted. Undefined: never. */
  readonly expireAfterMs: number | undefined;
}

/** One zone's state: a tagged union, changed only by {@link nextOfflineState}. */
export type OfflineState =
  /** Not looked at yet (this instance just started). */
  | { readonly state: "unknown" }
  /** A session is up somewhere. */
  | { readonly state: "online" }
  /** Offline since `since` (clock ms); `lastOnline` in wall ms (undefined: unknown). */
  | { readonly state: "offline"; readonly since: number; readonly lastOnline: number | undefined }
  /** Offline past the stale time: its resources are marked. */
  | { readonly state: "stale"; readonly since: number; readonly lastOnline: number | undefined }
  /** Offline past the expiry: its resources were deleted. */
  | { readonly state: "expired" };

/** What a transition asks to be done to the zone's resources. */
export type OfflineAction = "mark" | "clear" | "expire" | undefined;

/** An observation of a zone: online or not, at clock time `now`; `offlineForMs`: how long it has been offline already, when known. */
export interface OfflineObservation {
  /** A session of the zone is up somewhere. */
  readonly online: boolean;
  /** Clock time of the observation (ms). */
  readonly now: number;
  /** When the zone was last online (wall ms), if known. */
  readonly lastOnline: number | undefined;
  /** How long it has been offline already (ms), if known. */
  readonly offlineForMs: number | undefined;
}

/** The one transition function of a zone's offline state. */
export function nextOfflineState(
  s: OfflineState,
  seen: OfflineObservation,
  times: OfflineTimes,
): { readonly state: OfflineState; readonly action: OfflineAction } {
  if (seen.online) {
    // Unknown: marks may be left from before this instance started; clearing finds none if not.
    const action = s.state === "stale" || s.state === "unknown" ? "clear" : undefined;
    return { state: { state: "online" }, action };
  }
  let next: OfflineState = s;
  if (s.state === "unknown" || s.state === "online")
    next = {
      state: "offline",
      since: seen.now - Math.max(0, seen.offlineForMs ?? 0),
      lastOnline: seen.lastOnline,
    };
  if (next.state === "expired") return { state: next, action: undefined };
  if (next.state !== "offline" && next.state !== "stale") return { state: next, action: undefined };
  const offlineMs = seen.now - next.since;
  if (times.expireAfterMs !== undefined && offlineMs >= times.expireAfterMs)
    return { state: { state: "expired" }, action: "expire" };
  if (
    next.state === "offline" &&
    times.staleAfterMs !== undefined &&
    offlineMs >= times.staleAfterMs
  )
    return { state: { ...next, state: "stale" }, action: "mark" };
  return { state: next, action: undefined };
}

/** When the zone in `s` next changes by time alone (clock ms), or undefined. */
export function nextDeadline(s: OfflineState, times: OfflineTimes): number | undefined {
  if (s.state !== "offline" && s.state !== "stale") return undefined;
  const due = [
    s.state === "offline" && times.staleAfterMs !== undefined
      ? s.since + times.staleAfterMs
      : undefined,
    times.expireAfterMs === undefined ? undefined : s.since + times.expireAfterMs,
  ].filter((t): t is number => t !== undefined);
  return due.length === 0 ? undefined : Math.min(...due);
}

/** Options of {@link OfflineZones}. */
export interface OfflineZonesOptions extends OfflineTimes {
  /** The global's store. */
  readonly store: ResourceStore;
  /** Registered types. */
  readonly types: TypeRegistry;
  /** Every registered zone, online or not (from the Zone resources and the session leases). */
  readonly presence: (signal: AbortSignal) => Promise<ReadonlyMap<string, ZonePresence>>;
  /** How often presence is read (besides this instance's session starts and ends). Default: 10 s, or half the shortest time if less. */
  readonly checkEveryMs?: number;
  /** Durations and timers. Default {@link systemClock}. */
  readonly clock?: Clock;
  /** Wall clock in ms (for `kds.io/origin-last-online`). Default `Date.now`. */
  readonly now?: () => number;
  /** Where stale resources are counted (a gauge per zone and kind). */
  readonly metrics?: Metrics;
  /** Where to log. */
  readonly logger: Logger;
}

/** Checks a duration option: a positive number of ms, or undefined. */
export function checkDuration(name: string, ms: number | undefined): number | undefined {
  if (ms !== undefined && !(Number.isFinite(ms) && ms > 0))
    throw new KdsError(
      "invalid_argument",
      `${name} must be a positive number of milliseconds, got ${String(ms)}`,
    );
  return ms;
}

/** Marks, clears and expires offline zones' resources (see the module comment). */
export class OfflineZones {
  readonly #options: OfflineZonesOptions;
  readonly #clock: Clock;
  readonly #now: () => number;
  readonly #checkEveryMs: number;
  readonly #states = new Map<string, OfflineState>();
  /** Per stale zone, how many resources of each kind carry the mark. */
  readonly #marked = new Map<string, Map<string, number>>();
  #signal: AbortSignal | undefined;
  #cancelTimer: (() => void) | undefined;
  #checking: Promise<void> | undefined;
  #again = false;

  /** @param options - times, store, presence */
  constructor(options: OfflineZonesOptions) {
    this.#options = options;
    checkDuration("zoneStaleAfterMs", options.staleAfterMs);
    checkDuration("zoneExpireAfterMs", options.expireAfterMs);
    this.#clock = options.clock ?? systemClock;
    this.#now = options.now ?? Date.now;
    const shortest = Math.min(
      options.staleAfterMs ?? Number.POSITIVE_INFINITY,
      options.expireAfterMs ?? Number.POSITIVE_INFINITY,
    );
    this.#checkEveryMs = options.checkEveryMs ?? Math.max(100, Math.min(10_000, shortest / 2));
  }

  /** Whether any time is set (otherwise nothing is ever marked or expired). */
  get enabled(): boolean {
    return this.#options.staleAfterMs !== undefined || this.#options.expireAfterMs !== undefined;
  }

  /** Checks now and then until `signal` aborts. */
  start(signal: AbortSignal): void {
    if (!this.enabled) return;
    this.#signal = signal;
    signal.addEventListener("abort", () => this.#cancelTimer?.(), { once: true });
    this.poke();
  }

  /** Checks soon (a session of this instance started or ended). */
  poke(): void {
    if (this.#signal === undefined || this.#signal.aborted) return;
    this.#schedule(0);
  }

  /**
   * Zone `zone` connected to this instance: its stale marks are removed
   * before sync starts (so sync's own writes do not race the removal).
   * Never rejects: a failure is logged, and the next check retries.
   */
  async connected(zone: string, signal: AbortSignal): Promise<void> {
    if (!this.enabled) return;
    await this.#observe(zone, { online: true, lastOnline: undefined }, signal);
  }

  /** The stale state of `zone` for status, or undefined when it is not stale. */
  stale(zone: string): { readonly since: Date; readonly resources: number } | undefined {
    const s = this.#states.get(zone);
    if (s?.state !== "stale") return undefined;
    let resources = 0;
    for (const n of this.#marked.get(zone)?.values() ?? []) resources += n;
    return { since: new Date(s.lastOnline ?? 0), resources };
  }

  /** Resolves once the check under way (if any) is done (for tests). */
  async settled(): Promise<void> {
    while (this.#checking !== undefined) await this.#checking;
  }

  #schedule(ms: number): void {
    this.#cancelTimer?.();
    this.#cancelTimer = this.#clock.setTimer(() => {
      this.#cancelTimer = undefined;
      this.#check();
    }, ms);
  }

  #check(): void {
    if (this.#checking !== undefined) {
      this.#again = true;
      return;
    }
    const signal = this.#signal;
    if (signal === undefined || signal.aborted) return;
    this.#checking = this.#checkAll(signal)
      .catch((error: unknown) => {
        if (!signal.aborted)
          this.#options.logger.warn(
            "checking which zones are offline failed; the next check retries",
            { error },
          );
      })
      .finally(() => {
        this.#checking = undefined;
        if (signal.aborted) return;
        if (this.#again) {
          this.#again = false;
          this.#schedule(0);
        } else this.#schedule(this.#untilNext());
      });
  }

  async #checkAll(signal: AbortSignal): Promise<void> {
    const presence = await this.#options.presence(signal);
    for (const zone of [...this.#states.keys()])
      if (!presence.has(zone)) {
        this.#states.delete(zone);
        this.#setMarked(zone, new Map());
      }
    for (const [zone, p] of presence) await this.#observe(zone, p, signal);
  }

  /** How long until the earliest zone deadline, at most `checkEveryMs`. */
  #untilNext(): number {
    let next = this.#clock.now() + this.#checkEveryMs;
    for (const s of this.#states.values()) {
      const due = nextDeadline(s, this.#options);
      if (due !== undefined && due < next) next = due;
    }
    return Math.max(0, next - this.#clock.now());
  }

  async #observe(zone: string, p: ZonePresence, signal: AbortSignal): Promise<void> {
    const before = this.#states.get(zone) ?? { state: "unknown" };
    const wall = this.#now();
    const lastOnline = p.lastOnline ?? (p.online ? undefined : wall);
    const { state, action } = nextOfflineState(
      before,
      {
        online: p.online,
        now: this.#clock.now(),
        lastOnline,
        offlineForMs: p.lastOnline === undefined ? undefined : Math.max(0, wall - p.lastOnline),
      },
      this.#options,
    );
    this.#states.set(zone, state);
    if (action === undefined) return;
    try {
      await this.#act(zone, action, state, signal);
    } catch (error) {
      // Try again at the next check: back to the state before, so the action is asked again.
      this.#states.set(zone, before);
      if (signal.aborted) return;
      this.#options.logger.warn(
        `${action === "clear" ? "removing the stale marks of" : action === "mark" ? "marking stale the resources of" : "deleting the expired resources of"} zone "${zone}" failed; the next check retries`,
        { zone, error },
      );
    }
  }

  async #act(
    zone: string,
    action: Exclude<OfflineAction, undefined>,
    state: OfflineState,
    signal: AbortSignal,
  ): Promise<void> {
    const { store, types, logger } = this.#options;
    const key = LABELS.originLastOnline;
    if (action === "expire") {
      const removed = await removeZoneResources(store, types, zone, signal);
      this.#setMarked(zone, new Map());
      logger.warn(
        `zone "${zone}" has been offline past zoneExpireAfterMs; its ${removed} resources were deleted (they come back if it connects again)`,
        { zone, removed },
      );
      return;
    }
    if (action === "clear") {
      const counts = await labelZoneResources(store, types, zone, key, undefined, signal);
      const had = this.#marked.has(zone);
      this.#setMarked(zone, counts);
      if (had)
        logger.info(`zone "${zone}" is online again; its resources are no longer stale`, { zone });
      return;
    }
    const lastOnline = state.state === "stale" ? state.lastOnline : undefined;
    const since = lastOnline === undefined ? "unknown" : new Date(lastOnline).toISOString();
    const counts = await labelZoneResources(store, types, zone, key, since, signal);
    this.#setMarked(zone, counts);
    let total = 0;
    for (const n of counts.values()) total += n;
    logger.warn(
      `zone "${zone}" has been offline past zoneStaleAfterMs (last online ${since}); its ${total} resources are marked stale (${key})`,
      { zone, stale: total },
    );
  }

  #setMarked(zone: string, counts: ReadonlyMap<string, number>): void {
    const before = this.#marked.get(zone) ?? new Map<string, number>();
    for (const kind of new Set([...before.keys(), ...counts.keys()]))
      this.#options.metrics?.staleResources(zone, kind, counts.get(kind) ?? 0);
    let any = false;
    for (const n of counts.values()) if (n > 0) any = true;
    if (any) this.#marked.set(zone, new Map(counts));
    else this.#marked.delete(zone);
  }
}
