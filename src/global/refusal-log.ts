/**
 * Logging of refused zone credentials, rate-limited per reason: a flood of
 * tokenless or forged streams writes one line per reason and burst (see
 * {@link BurstLog}), however many zone names or key ids it varies.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { BurstLog } from "../util/burst-log.ts";

/** How many distinct refusal reasons are rate-limited separately at once. */
const MAX_REASONS = 64;

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

/** Logs credential refusals, at most one line per reason and burst (10 s). */
export class RefusalLog {
  readonly #logger: Logger;
  readonly #reasons = new Map<string, Reason>();

  /** @param logger - where the lines go */
  constructor(logger: Logger) {
    this.#logger = logger;
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
        log: new BurstLog((count, windowMs) => {
          if (count === 1 && windowMs === 0) {
            this.#logger.warn(`${created.current.text} (more refusals for this reason are logged at most every 10 s, with their count)`, { zone: created.current.zone, code });
            return;
          }
          const sample = created.sample ?? created.current;
          this.#logger.warn(`refused ${count} more zone streams in the last ${Math.round(windowMs / 1000)} s for the same reason; the latest: ${sample.text}`, {
            zone: sample.zone,
            code,
            refused: count,
          });
        }),
      };
      entry = created;
      this.#reasons.set(key, entry);
    }
    entry.current = refusal;
    entry.log.note();
    entry.sample = refusal;
  }
}
