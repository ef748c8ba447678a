/**
 * Zone names whose sessions keep replacing each other. A newer session of a
 * zone closes the older one (goaway REPLACED): once after a reconnect, but
 * over and over when two processes use one zone name (two replicas without a
 * shared store, or a copied configuration), each reconnecting after the
 * other replaced it. More than {@link ReplacementWatchOptions.threshold}
 * replacements within the window is said: an error log line (once per
 * window per zone) and the zone's status (`inspect zones`, the status page).
 *
 * @module
 */
import type { Logger } from "../log.ts";
import type { ZoneReplacements } from "../observe/zone-status.ts";
import { systemClock, type Clock } from "../util/clock.ts";

/** The most replacement times kept per zone (the count shown saturates there). */
const MAX_KEPT = 1_000;

/** Options of {@link ReplacementWatch}. */
export interface ReplacementWatchOptions {
  /** Replacements of one zone within `windowMs` that are still normal. Default 3. */
  readonly threshold?: number;
  /** The window, in ms. Default 60,000. */
  readonly windowMs?: number;
  /** Where the error line goes. */
  readonly logger: Logger;
  /** Monotonic time. Default the system clock. */
  readonly clock?: Clock;
  /** Wall clock, for the status's `lastAt`. Default `Date.now`. */
  readonly now?: () => number;
}

/** Counts each zone's replaced sessions over a sliding window (see the module description). */
export class ReplacementWatch {
  readonly #threshold: number;
  readonly #windowMs: number;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #now: () => number;
  /** Per zone: the clock times of its recent replacements (at most {@link MAX_KEPT}), the wall time of the last, when it was last logged. */
  readonly #zones = new Map<string, { times: number[]; lastAt: number; loggedAt?: number }>();

  /** @param options - threshold, window, logger */
  constructor(options: ReplacementWatchOptions) {
    this.#threshold = options.threshold ?? 3;
    this.#windowMs = options.windowMs ?? 60_000;
    this.#logger = options.logger;
    this.#clock = options.clock ?? systemClock;
    this.#now = options.now ?? Date.now;
  }

  /** Records that a newer session of `zone` replaced an older one. */
  note(zone: string): void {
    const now = this.#clock.now();
    let entry = this.#zones.get(zone);
    if (entry === undefined) {
      entry = { times: [], lastAt: 0 };
      this.#zones.set(zone, entry);
    }
    entry.times.push(now);
    entry.lastAt = this.#now();
    this.#prune(entry.times, now);
    if (entry.times.length <= this.#threshold) return;
    if (entry.loggedAt !== undefined && now - entry.loggedAt < this.#windowMs) return;
    entry.loggedAt = now;
    this.#logger.error(
      `two processes are using zone name \`${zone}\`: its session was replaced by a newer one more than ${this.#threshold} times in the last ${Math.round(this.#windowMs / 1000)} s, each new session closing the older one (goaway REPLACED) and both reconnecting. Give each process its own zone name, or run them as replicas of the zone on one shared store (kds-mux zone --store postgres://...), where only the leader dials`,
      { zone, replaced: entry.times.length, windowMs: this.#windowMs },
    );
  }

  /** The zone's recent replacements when there were more than the threshold; undefined otherwise. */
  status(zone: string): ZoneReplacements | undefined {
    const entry = this.#zones.get(zone);
    if (entry === undefined) return undefined;
    this.#prune(entry.times, this.#clock.now());
    if (entry.times.length === 0) {
      this.#zones.delete(zone);
      return undefined;
    }
    if (entry.times.length <= this.#threshold) return undefined;
    return { count: entry.times.length, windowMs: this.#windowMs, lastAt: entry.lastAt };
  }

  /** Drops times out of the window, and keeps at most {@link MAX_KEPT}. */
  #prune(times: number[], now: number): void {
    let drop = 0;
    while (drop < times.length && now - (times[drop] as number) >= this.#windowMs) drop++;
    const excess = times.length - drop - MAX_KEPT;
    if (excess > 0) drop += excess;
    if (drop > 0) times.splice(0, drop);
  }
}
