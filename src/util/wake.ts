/**
 * The wake-ups of the code base, one idea each:
 * - {@link Waker}: level-triggered, one waiting loop; a wake while nobody
 *   waits is remembered (once), never queued.
 * - {@link Turns}: the same for a loop that runs in turns of a callback and
 *   waits between them on nothing (no promise per wait).
 * - {@link Pulse}: edge-triggered, any number of waiters; a notification
 *   wakes those waiting now and is not remembered.
 * - {@link timer}: a cancellable delay on a {@link Clock}.
 * - {@link Ticker}: periodic calls of many owners (one per session) from one
 *   timer per period instead of an interval each.
 *
 * Every wait can be given an `AbortSignal`; an abort resolves the wait (the
 * waiter then looks at the signal) and leaves no listener behind.
 *
 * @module
 */
import { systemClock, type Clock } from "./clock.ts";
import { isAborted } from "./abort.ts";

/** Wakes one waiting loop. */
export class Waker {
  #pending = false;
  #resolve: (() => void) | undefined;

  /** Wakes the waiter, or marks that a wake happened. */
  wake(): void {
    const resolve = this.#resolve;
    this.#resolve = undefined;
    if (resolve !== undefined) resolve();
    else this.#pending = true;
  }

  /** Resolves at the next wake (at once if one happened since the last wait), or when `signal` aborts. */
  wait(signal?: AbortSignal): Promise<void> {
    if (this.#pending) {
      this.#pending = false;
      return Promise.resolve();
    }
    if (isAborted(signal)) return Promise.resolve();
    return new Promise<void>((resolve) => {
      if (signal === undefined) {
        this.#resolve = resolve;
        return;
      }
      const done = (): void => {
        signal.removeEventListener("abort", done);
        if (this.#resolve === done) this.#resolve = undefined;
        resolve();
      };
      this.#resolve = done;
      signal.addEventListener("abort", done, { once: true });
    });
  }
}

/**
 * Runs a loop in turns of one callback, and wakes it as a {@link Waker}
 * would, without a promise per wait: a loop that waits long (a stream
 * between two changes) would otherwise hold one all that time. A wake while
 * the loop is parked queues a turn (a microtask, as a resolved wait would);
 * a wake while a turn runs, or while the loop waits on something else, is
 * remembered (once), and the turn's {@link Turns.park} then says to go round
 * again.
 */
export class Turns {
  readonly #turn: () => void;
  #parked = false;
  #woken = false;
  #stopped = false;

  /** @param turn - one turn of the loop; it ends by calling {@link Turns.park}, or by waiting on something that calls it again */
  constructor(turn: () => void) {
    this.#turn = turn;
  }

  /** The loop waits for a wake, holding nothing. */
  get parked(): boolean {
    return this.#parked;
  }

  /** Wakes the loop. */
  wake(): void {
    if (this.#stopped) return;
    if (this.#parked) {
      this.#parked = false;
      queueMicrotask(this.#turn);
    } else this.#woken = true;
  }

  /**
   * Ends a turn: parks the loop and returns true, or returns false when a
   * wake came since the last call (the turn goes round again).
   */
  park(): boolean {
    if (this.#woken) {
      this.#woken = false;
      return false;
    }
    this.#parked = !this.#stopped;
    return true;
  }

  /** No turn is queued from now on (a turn already queued still runs: it should look whether the loop ended). */
  stop(): void {
    this.#stopped = true;
    this.#parked = false;
  }
}

/** Wakes everyone waiting at the moment of {@link Pulse.notify}. */
export class Pulse {
  #waiters = new Set<() => void>();

  /** How many waits are pending. */
  get waiting(): number {
    return this.#waiters.size;
  }

  /** Resolves every pending wait. */
  notify(): void {
    if (this.#waiters.size === 0) return;
    const waiting = this.#waiters;
    this.#waiters = new Set();
    for (const done of waiting) done();
  }

  /**
   * Resolves at the next {@link Pulse.notify}, when `signal` aborts, or (with
   * `ms`) after that long on `clock`, whichever comes first.
   */
  next(signal?: AbortSignal, ms = Infinity, clock: Clock = systemClock): Promise<void> {
    if (isAborted(signal)) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let cancelTimer: () => void = () => undefined;
      const done = (): void => {
        cancelTimer();
        signal?.removeEventListener("abort", done);
        this.#waiters.delete(done);
        resolve();
      };
      this.#waiters.add(done);
      signal?.addEventListener("abort", done, { once: true });
      if (Number.isFinite(ms)) cancelTimer = clock.setTimer(done, ms);
    });
  }
}

/** Resolves after `ms` of `clock` (or never for Infinity); the returned cancel clears the timer. */
export function timer(
  ms: number,
  clock: Clock = systemClock,
): { promise: Promise<void>; cancel(): void } {
  if (!Number.isFinite(ms))
    return { promise: new Promise<void>(() => undefined), cancel: () => undefined };
  let cancel: () => void = () => undefined;
  const promise = new Promise<void>((resolve) => {
    cancel = clock.setTimer(resolve, ms);
  });
  return { promise, cancel };
}

/** Most slots a period is divided into (see {@link Ticker}). */
const TICK_SLOTS = 8;
/** Shortest time between two slots: a short period (tests use tens of ms) gets fewer slots, down to one. */
const MIN_SLOT_MS = 100;

interface Wheel {
  /** The owners' callbacks, each in one slot; slot i is called at step i of every turn. */
  readonly slots: Set<() => void>[];
  /** Time between two slots: the period over the slots. */
  readonly stepMs: number;
  /** The slot the armed timer calls. */
  next: number;
  /** When the armed timer fires (on the ticker's clock). */
  at: number;
  /** Callbacks in all slots. */
  size: number;
  /** Cancels the armed timer. */
  cancel: () => void;
}

/**
 * Calls periodic callbacks from one timer per period, however many owners
 * ask for that period: a thousand sessions ticking every 7.5 s cost one timer
 * that fires every 7.5 s / 8 and calls an eighth of them, not a thousand
 * intervals, each a timer of its own that wakes the process (about a third
 * of the global's idle CPU went with them). A callback is put in the slot with the
 * fewest, so the calls stay spread over the period in eight groups; empty
 * slots are skipped, so one owner costs one wake-up per period, as its own
 * interval would.
 *
 * A callback is called every `periodMs` (as an interval would: late when the
 * loop is busy, never early once started); its first call comes within
 * `periodMs` of {@link Ticker.every}, not exactly `periodMs` after it (an
 * owner that acts on elapsed time, as the sessions do, is not affected). The
 * timer runs while the period has callbacks and keeps the process alive as an
 * interval would.
 */
export class Ticker {
  readonly #clock: Clock;
  readonly #wheels = new Map<number, Wheel>();

  /** @param clock - whose timers drive the steps (tests step a manual one) */
  constructor(clock: Clock = systemClock) {
    this.#clock = clock;
  }

  /**
   * Calls `fire` every `periodMs` (at least 1) until the returned function is
   * called. Give each owner a function of its own: one function given twice
   * for one period is one callback (called once per period, stopped by either
   * returned function).
   */
  every(periodMs: number, fire: () => void): () => void {
    const period = Math.max(1, periodMs);
    let wheel = this.#wheels.get(period);
    let index = 0;
    if (wheel === undefined) {
      const count = Math.max(1, Math.min(TICK_SLOTS, Math.floor(period / MIN_SLOT_MS)));
      const slots = Array.from({ length: count }, () => new Set<() => void>());
      const stepMs = period / count;
      wheel = { slots, stepMs, next: 0, at: 0, size: 0, cancel: () => undefined };
      this.#wheels.set(period, wheel);
      this.#arm(period, wheel, 0, this.#clock.now() + period);
    } else {
      for (const [i, s] of wheel.slots.entries())
        if (s.size < (wheel.slots[index] as Set<() => void>).size) index = i;
    }
    const slot = wheel.slots[index] as Set<() => void>;
    if (slot.size === 0 && index !== wheel.next) {
      // An empty slot is skipped by the timer: bring the timer forward when this slot comes due before it.
      const count = wheel.slots.length;
      let due = wheel.at - ((wheel.next - index + count) % count) * wheel.stepMs;
      if (due <= this.#clock.now()) due += period;
      if (due < wheel.at) {
        wheel.cancel();
        this.#arm(period, wheel, index, due);
      }
    }
    if (!slot.has(fire)) {
      slot.add(fire);
      wheel.size++;
    }
    const owner = wheel;
    return () => {
      if (!slot.delete(fire)) return;
      owner.size--;
      if (owner.size === 0 && this.#wheels.get(period) === owner) {
        owner.cancel();
        this.#wheels.delete(period);
      }
    };
  }

  /** Periods with a running timer (for tests). */
  get periods(): number {
    return this.#wheels.size;
  }

  /** Arms `wheel`'s timer to call slot `next` at `at`. */
  #arm(period: number, wheel: Wheel, next: number, at: number): void {
    wheel.next = next;
    wheel.at = at;
    wheel.cancel = this.#clock.setTimer(() => {
      if (this.#wheels.get(period) !== wheel) return;
      const slots = wheel.slots;
      const slot = slots[next] as Set<() => void>;
      // The next slot with callbacks (this one again after a whole period when it is the only one); armed
      // before the calls, so a callback that throws does not stop the others' next turns.
      let skip = 1;
      while (
        skip < slots.length &&
        (slots[(next + skip) % slots.length] as Set<() => void>).size === 0
      )
        skip++;
      this.#arm(
        period,
        wheel,
        (next + skip) % slots.length,
        this.#clock.now() + skip * wheel.stepMs,
      );
      for (const fire of slot) fire();
    }, at - this.#clock.now());
  }
}

/** The process's {@link Ticker} on the system clock (the sessions' ticks). */
export const sharedTicker = new Ticker();
