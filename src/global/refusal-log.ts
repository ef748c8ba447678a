/**
 * Logging of refused zone credentials, rate-limited per reason: a flood of
 * tokenless or forged streams writes a handful of lines per reason and
 * burst (see {@link RefusalLog}), however many zone names or key ids it
 * varies.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { BurstLog } from "../util/burst-log.ts";
import { systemClock, type Clock } from "../util/clock.ts";

/** How many distinct refusal reasons are rate-limited separately at once. */
const MAX_REASONS = 64;

/** How many zones a reason's refusals are named for in full per interval, before they are only counted. */
const ZONES_NAMED = 4;

/** The interval of a reason's burst log, and of its named zones. */
const INTERVAL_MS = 10_000;

/** One refusal, as logged. */
interface Refusal {
  readonly text: string;
  readonly zone: string;
}

/** One reason's burst log, with the refusals it reports. */
interface Reason {
  readonly log: BurstLog;
  /** The refusal being noted now (the first line of a burst names it). */
  current: Refusal;
  /** The last refusal noted before it (a burst summary names it as a sample). */
  sample: Refusal | undefined;
  /** Zones named in full in the interval that began at `namedSince`. */
  readonly named: Set<string>;
  namedSince: number;
}

/**
 * The class a refusal is rate-limited under: the error code and the reason
 * with every quoted value (zone names, which are checked to be plain names
 * before they reach a message, key ids) and every number (times, counts)
 * blanked, so that varying them does not start a new burst.
 */
export function refusalReason(code: string | undefined, reason: string): string {
  return `${code ?? "error"}: ${reason.replace(/"[^"]*"/g, '"…"').replace(/\d+/g, "N")}`;
}

/**
 * Logs credential refusals: per reason and 10 s, the first refusal of each
 * of the first {@link ZONES_NAMED} zones in full (so a few zones refused for
 * the same reason each see theirs), then one more in full and the rest
 * counted, summed in one line per interval.
 */
export class RefusalLog {
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #reasons = new Map<string, Reason>();

  /**
   * @param logger - where the lines go
   * @param clock - default {@link systemClock}
   */
  constructor(logger: Logger, clock: Clock = systemClock) {
    this.#logger = logger;
    this.#clock = clock;
  }

  /** Notes that zone `zone`'s stream was refused with `error`. */
  note(zone: string, error: unknown): void {
    const code = KdsError.is(error) ? error.code : undefined;
    const reason = error instanceof Error ? (error.message.split("\n")[0] ?? "") : String(error);
    const refusal = { text: `refused zone "${zone}": ${reason}`, zone };
    const key = refusalReason(code, reason);
    let entry = this.#reasons.get(key);
    if (entry === undefined) {
      // Bounded: reasons are a short fixed list once names and numbers are blanked; if
      // something still varies them, starting the bursts over only costs log lines.
      if (this.#reasons.size >= MAX_REASONS) this.#reasons.clear();
      const created: Reason = {
        current: refusal,
        sample: undefined,
        named: new Set(),
        namedSince: this.#clock.now(),
        log: new BurstLog(
          (count, windowMs) => {
            if (count === 1 && windowMs === 0) {
              this.#logger.warn(
                `${created.current.text} (more refusals for this reason are logged at most every 10 s, with their count)`,
                { zone: created.current.zone, code },
              );
              return;
            }
            const sample = created.sample ?? created.current;
            this.#logger.warn(
              `refused ${count} more zone streams in the last ${Math.round(windowMs / 1000)} s for the same reason; the latest: ${sample.text}`,
              {
                zone: sample.zone,
                code,
                refused: count,
              },
            );
          },
          INTERVAL_MS,
          this.#clock,
        ),
      };
      entry = created;
      this.#reasons.set(key, entry);
    }
    const now = this.#clock.now();
    if (now - entry.namedSince >= INTERVAL_MS) {
      entry.named.clear();
      entry.namedSince = now;
    }
    if (!entry.named.has(zone) && entry.named.size < ZONES_NAMED) {
      entry.named.add(zone);
      this.#logger.warn(refusal.text, { zone, code });
      return;
    }
    entry.current = refusal;
    entry.log.note();
    entry.sample = refusal;
  }
}
