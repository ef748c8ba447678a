/**
 * When to tell a zone refused as `overloaded` to come back: the global
 * measures how fast its handshake slots free up (streams that said hello, or
 * ended before it), and gives each refused zone its own later moment, one
 * slot's worth of time after the previous refused zone's, with a jitter
 * inside that slot. The refused zones are so spread over the time the
 * global needs to admit them, instead of all retrying together (or, with
 * their exponential backoff, long after the global could have taken them).
 *
 * @module
 */
import { KdsError } from "../errors.ts";

/** The default of {@link AdmissionPacerOptions.windowMs}. */
export const DEFAULT_PACER_WINDOW_MS = 5_000;

/** The default of {@link AdmissionPacerOptions.minRatePerSecond}. */
export const DEFAULT_PACER_MIN_RATE = 20;

/** The default of {@link AdmissionPacerOptions.maxRetryAfterMs}. */
export const DEFAULT_PACER_MAX_RETRY_AFTER_MS = 60_000;

/** Options of {@link AdmissionPacer}. */
export interface AdmissionPacerOptions {
  /** Over how long the rate at which slots free up is measured. Default {@link DEFAULT_PACER_WINDOW_MS}. */
  readonly windowMs?: number;
  /**
   * The rate assumed when fewer slots freed up than this in a second (a
   * global that just started, or one whose streams all hang until their
   * handshake timeout). Default {@link DEFAULT_PACER_MIN_RATE} a second.
   */
  readonly minRatePerSecond?: number;
  /** The longest wait told to a zone; more refused zones than fit get this. Default {@link DEFAULT_PACER_MAX_RETRY_AFTER_MS}. */
  readonly maxRetryAfterMs?: number;
  /** Monotonic clock in milliseconds. Default `performance.now`. */
  readonly now?: () => number;
  /** Random source in [0, 1) for the jitter. Default `Math.random`. */
  readonly random?: () => number;
}

/** Number of buckets the measuring window is cut into. */
const BUCKETS = 10;

/** Measures the admission rate and hands out retry moments to refused zones; O(1) memory. */
export class AdmissionPacer {
  readonly #windowMs: number;
  readonly #bucketMs: number;
  readonly #minRate: number;
  readonly #maxRetryAfterMs: number;
  readonly #now: () => number;
  readonly #random: () => number;
  /** Slots freed per bucket; bucket `i` covers [#bucketStart(i), +bucketMs). */
  readonly #counts = new Array<number>(BUCKETS).fill(0);
  /** Index (time / bucketMs, floored) of the newest bucket written. */
  #newest = 0;
  /** When the first slot freed (the window is shorter before a full window passed). */
  #firstAt: number | undefined;
  /** The moment the next refused zone is given (moves one slot on per refusal, never behind now). */
  #next = 0;

  /** @param options - window, floor, ceiling, clock, randomness */
  constructor(options: AdmissionPacerOptions = {}) {
    this.#windowMs = options.windowMs ?? DEFAULT_PACER_WINDOW_MS;
    this.#minRate = options.minRatePerSecond ?? DEFAULT_PACER_MIN_RATE;
    this.#maxRetryAfterMs = options.maxRetryAfterMs ?? DEFAULT_PACER_MAX_RETRY_AFTER_MS;
    for (const [k, v] of [
      ["windowMs", this.#windowMs],
      ["minRatePerSecond", this.#minRate],
      ["maxRetryAfterMs", this.#maxRetryAfterMs],
    ] as const) {
      if (!Number.isFinite(v) || v <= 0)
        throw new KdsError("invalid_argument", `admission pacer ${k} must be positive, got ${v}`);
    }
    this.#bucketMs = this.#windowMs / BUCKETS;
    this.#now = options.now ?? (() => performance.now());
    this.#random = options.random ?? Math.random;
  }

  /** Records that a handshake slot freed up (a stream said hello, or ended before it). */
  freed(): void {
    const now = this.#now();
    this.#firstAt ??= now;
    this.#advance(now);
    this.#counts[this.#newest % BUCKETS] = (this.#counts[this.#newest % BUCKETS] ?? 0) + 1;
  }

  /** Slots freed per second, as measured over the window (at least the floor). */
  ratePerSecond(): number {
    const now = this.#now();
    this.#advance(now);
    if (this.#firstAt === undefined) return this.#minRate;
    const total = this.#counts.reduce((a, b) => a + b, 0);
    // Before a full window passed, divide by the time since the first slot freed (at least one bucket).
    const spanMs = Math.min(this.#windowMs, Math.max(this.#bucketMs, now - this.#firstAt));
    return Math.max(this.#minRate, (total * 1000) / spanMs);
  }

  /**
   * Reserves a moment for one refused zone and returns how long it should
   * wait, in whole milliseconds: the next free moment (one slot, 1 / rate,
   * after the previous refused zone's), plus a uniform jitter within that
   * slot; at most `maxRetryAfterMs`.
   */
  retryAfterMs(): number {
    const now = this.#now();
    const slotMs = 1000 / this.ratePerSecond();
    if (this.#next < now) this.#next = now;
    const at = this.#next + this.#random() * slotMs;
    this.#next += slotMs;
    // Past the ceiling the reservations stop growing, so a long storm does not push later zones ever further out.
    if (this.#next - now > this.#maxRetryAfterMs) this.#next = now + this.#maxRetryAfterMs;
    return Math.min(this.#maxRetryAfterMs, Math.round(at - now));
  }

  /** Moves the window to `now`, zeroing the buckets that fell out of it. */
  #advance(now: number): void {
    const index = Math.floor(now / this.#bucketMs);
    if (index <= this.#newest) return;
    const stale = Math.min(BUCKETS, index - this.#newest);
    for (let i = 1; i <= stale; i++) this.#counts[(this.#newest + i) % BUCKETS] = 0;
    this.#newest = index;
  }
}
