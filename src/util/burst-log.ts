/**
 * Logging a flood once per burst: the first event of a quiet period is
 * reported at once; events in the next `intervalMs` are only counted, and the
 * first event after that interval reports how many there were. A flood of
 * refused connections thus writes one line per interval, not one per
 * connection (count every event in a metric beside it). Reporting is lazy, so
 * no timer keeps the process alive; the count of the last interval of a burst
 * is reported by the next event, whenever that comes.
 *
 * @module
 */
import { systemClock, type Clock } from "./clock.ts";

/**
 * Receives what a {@link BurstLog} decided to report: `count` events (1 for
 * the first of a burst) over the last `windowMs` milliseconds (0 for the first).
 */
export type BurstReport = (count: number, windowMs: number) => void;

/** Rate-limits the logging of one kind of event (see the module description). */
export class BurstLog {
  readonly #intervalMs: number;
  readonly #clock: Clock;
  readonly #report: BurstReport;
  /** When the current reporting window opened; undefined while quiet. */
  #windowStart: number | undefined;
  /** Events counted and not reported yet. */
  #pending = 0;

  /**
   * @param report - called with what to log
   * @param intervalMs - at most one report per interval. Default 10 s.
   * @param clock - default {@link systemClock}
   */
  constructor(report: BurstReport, intervalMs = 10_000, clock: Clock = systemClock) {
    this.#report = report;
    this.#intervalMs = intervalMs;
    this.#clock = clock;
  }

  /** Reports the events counted and not reported yet, now (before a stop, say); nothing when there are none. */
  flush(): void {
    if (this.#pending === 0 || this.#windowStart === undefined) return;
    const now = this.#clock.now();
    this.#report(this.#pending, now - this.#windowStart);
    this.#pending = 0;
    this.#windowStart = now;
  }

  /** Records one event, reporting it or the events counted before it when due. */
  note(): void {
    const now = this.#clock.now();
    if (this.#windowStart === undefined || now - this.#windowStart >= 2 * this.#intervalMs) {
      // Quiet for a whole interval (or never loud): a new burst starts, reported at once.
      const missed = this.#pending;
      this.#pending = 0;
      if (missed > 0 && this.#windowStart !== undefined)
        this.#report(missed, now - this.#windowStart);
      this.#windowStart = now;
      this.#report(1, 0);
      return;
    }
    this.#pending += 1;
    if (now - this.#windowStart >= this.#intervalMs) {
      this.#report(this.#pending, now - this.#windowStart);
      this.#pending = 0;
      this.#windowStart = now;
    }
  }
}
