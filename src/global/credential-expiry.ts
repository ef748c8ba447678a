/**
 * Credentials that expire during a session: the global ends a zone's session
 * when the zone token (or client certificate) it was admitted with expires,
 * with goaway TOKEN_EXPIRED and a log line, warns in the log a while before
 * (an error line, so an operator renews it in time), and keeps the earliest
 * expiry among the sessions it holds for the `kds_zone_token_earliest_expiry_seconds`
 * gauge. Timers run on a {@link Clock}; expiries are wall-clock times, read
 * against `now` (default `Date.now`), so tests step both.
 *
 * @module
 */
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import type { Session } from "../mux/views.ts";
import type { ZoneIdentity } from "../auth/zone-authenticator.ts";
import { KdsError } from "../errors.ts";
import { systemClock, type Clock } from "../util/clock.ts";

/** The default of {@link CredentialExpiryOptions.warnBeforeMs}: 24 hours. */
export const DEFAULT_TOKEN_EXPIRY_WARNING_MS = 24 * 60 * 60 * 1000;

/** The longest a timer is armed for at once: setTimeout's limit (about 24.8 days); a later deadline re-arms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Options of {@link CredentialExpiry}. */
export interface CredentialExpiryOptions {
  /** Where the warning and the end are logged. */
  readonly logger: Logger;
  /** Where the earliest expiry goes (`zoneTokenEarliestExpiry`). Default: nowhere. */
  readonly metrics?: Metrics;
  /** Timers. Default {@link systemClock}. */
  readonly clock?: Clock;
  /** Wall clock in ms since the epoch, against which expiries are read. Default `Date.now`. */
  readonly now?: () => number;
  /** How long before expiry the error line warns. Default {@link DEFAULT_TOKEN_EXPIRY_WARNING_MS}. */
  readonly warnBeforeMs?: number;
  /** This global's name, for messages. */
  readonly global: string;
  /** How an operator renews a zone's token, for messages (the command). */
  readonly renewHint?: (zone: string) => string;
}

/**
 * One tracked session, and where its credential stands: the warning is due
 * next, or only the end. One object per session, and no timer or closure of
 * its own: every session's next deadline waits in one heap under one timer.
 */
interface Tracked {
  readonly session: Session;
  readonly zone: string;
  readonly expiresAt: Date;
  readonly proof: ZoneIdentity["proof"];
  /** What falls due next: the warning, then the end; after the end fired, nothing (out of the heap). */
  next: "warning" | "end";
  /** When `next` falls due, in ms since the epoch. */
  dueAt: number;
  /** Arming order, so entries due at the same time fire in the order they were armed, as separate timers would. */
  order: number;
  /** Where it sits in the heap; -1 when it is out. */
  index: number;
}

/** Throws `invalid_argument` unless `ms` is a usable warning time. */
export function assertTokenExpiryWarning(ms: number): void {
  if (!Number.isFinite(ms) || ms < 0)
    throw new KdsError(
      "invalid_argument",
      `tokenExpiryWarningMs must be a non-negative number of milliseconds (how long before a zone's credential expires the global warns), got ${String(ms)}`,
    );
}

/** Ends sessions whose credential expired, warns before, and reports the earliest expiry. */
export class CredentialExpiry {
  readonly #options: CredentialExpiryOptions;
  readonly #clock: Clock;
  readonly #now: () => number;
  readonly #warnBeforeMs: number;
  readonly #tracked = new Map<Session, Tracked>();
  /** Tracked sessions whose warning or end is still due, as a binary min-heap by `dueAt` (then `order`). */
  readonly #heap: Tracked[] = [];
  /** The next `order`. */
  #order = 0;
  /** Cancels the one timer, while it is armed. */
  #cancelTimer: (() => void) | undefined;
  /** The deadline the armed timer is for (it may fire before, at the timer limit, and re-arm). */
  #timerDueAt = 0;
  /** The earliest expiry reported last (ms since the epoch), so the gauge is set only when it changes. */
  #reported: number | undefined;

  /** @param options - logger, clock, warning time */
  constructor(options: CredentialExpiryOptions) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#now = options.now ?? Date.now;
    this.#warnBeforeMs = options.warnBeforeMs ?? DEFAULT_TOKEN_EXPIRY_WARNING_MS;
    assertTokenExpiryWarning(this.#warnBeforeMs);
  }

  /**
   * Follows `session` (ready, admitted as `identity`) until {@link untrack}:
   * warns `warnBeforeMs` before its credential expires (at once when that is
   * already past) and ends it at expiry. A credential without an expiry is
   * not followed. The owner calls {@link untrack} once the session ended (the
   * global server does in its handler of the end it has anyway, rather than
   * a chain on `closed` here for every session).
   */
  track(session: Session, identity: ZoneIdentity): void {
    const expiresAt = identity.expiresAt;
    if (expiresAt === undefined || session.end !== undefined) return;
    const warns = this.#warnBeforeMs > 0;
    const tracked: Tracked = {
      session,
      zone: identity.zone,
      expiresAt,
      proof: identity.proof,
      next: warns ? "warning" : "end",
      dueAt: warns ? expiresAt.getTime() - this.#warnBeforeMs : expiresAt.getTime(),
      order: 0,
      index: -1,
    };
    this.#tracked.set(session, tracked);
    this.#report();
    this.#schedule(tracked);
  }

  /** Stops following `session` (it ended): no warning or end for it any more, and the gauge without it. */
  untrack(session: Session): void {
    const tracked = this.#tracked.get(session);
    if (tracked === undefined) return;
    this.#unschedule(tracked);
    this.#tracked.delete(session);
    this.#report();
  }

  /** When the credential of `zone`'s newest tracked session expires, and what it is; undefined when none. */
  expiry(
    zone: string,
  ): { readonly at: Date; readonly credential: "token" | "certificate" } | undefined {
    let found: Tracked | undefined;
    for (const t of this.#tracked.values()) if (t.zone === zone) found = t;
    if (found === undefined) return undefined;
    return {
      at: found.expiresAt,
      credential: found.proof === "certificate" ? "certificate" : "token",
    };
  }

  /** Puts `t` in the heap at its `dueAt` and re-arms the timer if it is now the earliest. */
  #schedule(t: Tracked): void {
    t.order = this.#order++;
    heapPush(this.#heap, t);
    this.#arm();
  }

  /** Takes `t` out of the heap (if in it) and re-arms the timer for what is earliest now. */
  #unschedule(t: Tracked): void {
    if (t.index < 0) return;
    heapRemove(this.#heap, t);
    this.#arm();
  }

  /**
   * Arms the one timer for the earliest deadline in the heap (at once when
   * it has passed, and at most {@link MAX_TIMER_MS} ahead: a later deadline
   * re-arms when that fires), or none when the heap is empty. A timer
   * already armed for that deadline stays.
   */
  #arm(): void {
    const first = this.#heap[0];
    if (first !== undefined && this.#cancelTimer !== undefined && this.#timerDueAt === first.dueAt)
      return;
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    if (first === undefined) return;
    const left = first.dueAt - this.#now();
    this.#timerDueAt = first.dueAt;
    this.#cancelTimer = this.#clock.setTimer(
      this.#fire,
      left <= 0 ? 0 : Math.min(left, MAX_TIMER_MS),
    );
  }

  /** The timer's callback: one function for the instance. Handles every deadline that has passed, then re-arms. */
  readonly #fire = (): void => {
    this.#cancelTimer = undefined;
    const now = this.#now();
    for (;;) {
      const t = this.#heap[0];
      if (t === undefined || t.dueAt > now) break;
      heapRemove(this.#heap, t);
      // A session tracked again since holds a newer entry; this one is done (as its own timers would have found).
      if (this.#tracked.get(t.session) !== t) continue;
      if (t.next === "warning") {
        this.#warn(t);
        t.next = "end";
        t.dueAt = t.expiresAt.getTime();
        t.order = this.#order++;
        heapPush(this.#heap, t);
      } else {
        this.#expire(t).catch((error: unknown) =>
          this.#options.logger.error(`ending zone "${t.zone}"'s expired session failed`, {
            zone: t.zone,
            error,
          }),
        );
      }
    }
    this.#arm();
  };

  #warn(t: Tracked): void {
    const what = t.proof === "certificate" ? "client certificate" : "zone token";
    const left = Math.max(0, t.expiresAt.getTime() - this.#now());
    this.#options.logger.error(
      `zone "${t.zone}"'s ${what} expires at ${t.expiresAt.toISOString()} (in ${describeDuration(left)}); its session on global "${this.#options.global}" ends then. ${
        t.proof === "certificate"
          ? "Issue the zone a new client certificate before then"
          : `Issue a new token and write it to the zone's token file before then (the zone reads it again when it dials): ${this.#options.renewHint?.(t.zone) ?? "kds-mux generate zone-token"}`
      }`,
      { zone: t.zone, expiresAt: t.expiresAt.toISOString() },
    );
  }

  async #expire(t: Tracked): Promise<void> {
    const session = t.session;
    if (this.#tracked.get(session) !== t) return;
    const what = t.proof === "certificate" ? "client certificate" : "zone token";
    const message = `zone "${t.zone}"'s ${what} expired at ${t.expiresAt.toISOString()}; global "${this.#options.global}" ended its session (token expired). ${
      t.proof === "certificate"
        ? "Give the zone a renewed client certificate; it dials again"
        : "Write a renewed token to the zone's token file; the zone reads it again and dials again"
    }`;
    this.#options.logger.warn(message, { zone: t.zone, expiresAt: t.expiresAt.toISOString() });
    await session.close({ code: "token_expired", message });
  }

  /** Sets the gauge to the earliest expiry among tracked sessions when it changed (none: no value). */
  #report(): void {
    let earliest: number | undefined;
    for (const t of this.#tracked.values()) {
      const at = t.expiresAt.getTime();
      if (earliest === undefined || at < earliest) earliest = at;
    }
    if (earliest === this.#reported) return;
    this.#reported = earliest;
    this.#options.metrics?.zoneTokenEarliestExpiry?.(
      earliest === undefined ? undefined : earliest / 1000,
    );
  }
}

/** Whether `a` falls due before `b`. */
function before(a: Tracked, b: Tracked): boolean {
  return a.dueAt < b.dueAt || (a.dueAt === b.dueAt && a.order < b.order);
}

/** Adds `t` to the min-heap `heap`. */
function heapPush(heap: Tracked[], t: Tracked): void {
  t.index = heap.length;
  heap.push(t);
  siftUp(heap, t.index);
}

/** Takes `t`, which is in the min-heap `heap`, out of it. */
function heapRemove(heap: Tracked[], t: Tracked): void {
  const i = t.index;
  const last = heap.pop() as Tracked; // `t` is in the heap, so it is not empty
  t.index = -1;
  if (last === t) return;
  heap[i] = last;
  last.index = i;
  siftUp(heap, i);
  siftDown(heap, last.index);
}

function siftUp(heap: Tracked[], i: number): void {
  const t = heap[i] as Tracked;
  while (i > 0) {
    const parentAt = (i - 1) >> 1;
    const parent = heap[parentAt] as Tracked;
    if (!before(t, parent)) break;
    heap[i] = parent;
    parent.index = i;
    i = parentAt;
  }
  heap[i] = t;
  t.index = i;
}

function siftDown(heap: Tracked[], i: number): void {
  const t = heap[i] as Tracked;
  const n = heap.length;
  for (;;) {
    let child = 2 * i + 1;
    if (child >= n) break;
    const right = heap[child + 1];
    if (right !== undefined && before(right, heap[child] as Tracked)) child++;
    const c = heap[child] as Tracked;
    if (!before(c, t)) break;
    heap[i] = c;
    c.index = i;
    i = child;
  }
  heap[i] = t;
  t.index = i;
}

/** "23 h 59 min", "4 min 10 s", "3 s": a duration for log lines. */
export function describeDuration(ms: number): string {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} days ${h % 24} h`;
}
