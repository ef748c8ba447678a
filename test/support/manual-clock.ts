// A clock that moves only when the test says so, for code that takes a Clock
// (src/util/clock.ts): timers fire inside advance(), in deadline order, and
// never on their own. With it a test can say "nothing happens before the
// deadline" by stepping to just before it, instead of sleeping and hoping.
import type { Clock } from "../../src/util/clock.ts";

interface Timer {
  readonly at: number;
  readonly order: number;
  readonly fire: () => void;
}

/** A {@link Clock} stepped by hand. */
export class ManualClock implements Clock {
  #now: number;
  #order = 0;
  readonly #timers = new Set<Timer>();

  constructor(start = 1_000) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  setTimer(fire: () => void, ms: number): () => void {
    const timer: Timer = { at: this.#now + Math.max(0, ms), order: this.#order++, fire };
    this.#timers.add(timer);
    return () => void this.#timers.delete(timer);
  }

  /** Timers armed and not yet fired or cancelled. */
  get pending(): number {
    return this.#timers.size;
  }

  /**
   * Moves time forward by `ms`, firing every timer that falls due on the way,
   * each at its own deadline, earliest first (so a timer armed by a fired one
   * fires too if it falls due). Fires at most 10,000 timers per call.
   */
  advance(ms: number): void {
    const target = this.#now + ms;
    for (let fired = 0; ; fired++) {
      if (fired >= 10_000)
        throw new Error(
          "ManualClock.advance: more than 10,000 timers fired in one step; is something re-arming at 0 ms?",
        );
      let next: Timer | undefined;
      for (const t of this.#timers)
        if (
          t.at <= target &&
          (next === undefined || t.at < next.at || (t.at === next.at && t.order < next.order))
        )
          next = t;
      if (next === undefined) break;
      this.#timers.delete(next);
      this.#now = Math.max(this.#now, next.at);
      next.fire();
    }
    this.#now = target;
  }
}
