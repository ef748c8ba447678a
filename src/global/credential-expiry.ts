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

/** One tracked session. */
interface Tracked {
  readonly zone: string;
  readonly expiresAt: Date;
  readonly proof: ZoneIdentity["proof"];
  cancel: () => void;
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
   * Follows `session` (ready, admitted as `identity`) until it ends: warns
   * `warnBeforeMs` before its credential expires (at once when that is
   * already past) and ends it at expiry. A credential without an expiry is
   * not followed.
   */
  track(session: Session, identity: ZoneIdentity): void {
    const expiresAt = identity.expiresAt;
    if (expiresAt === undefined || session.end !== undefined) return;
    const tracked: Tracked = {
      zone: identity.zone,
      expiresAt,
      proof: identity.proof,
      cancel: () => undefined,
    };
    this.#tracked.set(session, tracked);
    this.#report();
    const warnAt = expiresAt.getTime() - this.#warnBeforeMs;
    const expire = (): void => {
      tracked.cancel = this.#at(expiresAt.getTime(), () => {
        this.#expire(session, tracked).catch((error: unknown) =>
          this.#options.logger.error(`ending zone "${tracked.zone}"'s expired session failed`, {
            zone: tracked.zone,
            error,
          }),
        );
      });
    };
    if (this.#warnBeforeMs > 0 && warnAt < expiresAt.getTime()) {
      tracked.cancel = this.#at(warnAt, () => {
        if (this.#tracked.get(session) !== tracked) return;
        this.#warn(tracked);
        expire();
      });
    } else expire();
    void session.closed.then(() => {
      if (this.#tracked.get(session) !== tracked) return;
      tracked.cancel();
      this.#tracked.delete(session);
      this.#report();
    });
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

  /** Calls `fire` once the wall clock reaches `atMs` (at once when it has), re-arming past the timer limit. */
  #at(atMs: number, fire: () => void): () => void {
    let cancel: () => void = () => undefined;
    let cancelled = false;
    const arm = (): void => {
      const left = atMs - this.#now();
      if (left <= 0) {
        cancel = this.#clock.setTimer(() => {
          if (!cancelled) fire();
        }, 0);
        return;
      }
      cancel = this.#clock.setTimer(
        () => {
          if (!cancelled) arm();
        },
        Math.min(left, MAX_TIMER_MS),
      );
    };
    arm();
    return () => {
      cancelled = true;
      cancel();
    };
  }

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

  async #expire(session: Session, t: Tracked): Promise<void> {
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
