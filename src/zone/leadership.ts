/**
 * One leader among a zone's replicas, through a lease in their shared store
 * (store/lease.ts). The leader alone runs its term's work (the zone's dialer
 * and sync); the others stand by, poll the lease, and take it once it is
 * free or expired.
 *
 * Timing, for a lease of duration D (default 10 s):
 * - the leader renews every D/5 and leads until its **renew deadline**,
 *   2D/3 after it sent the last request the store granted; it keeps no term
 *   past that, renewed or not (a timer aborts the term's work then, and
 *   {@link Leadership.fence} reads the clock itself, so a process paused
 *   past it and resumed writes and dials nothing, before any timer runs);
 * - the store grants D from when it handled that request, which is later:
 *   a standby can take over D/3 after the leader stopped at the earliest;
 * - a standby polls every D/10 (sooner when the term ends sooner), so it
 *   leads within about D + D/10 of the leader's last renewal.
 *
 * Every write of the leader carries the term's fence, so even a write sent
 * before the deadline and delivered after a takeover is refused by the store.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { Lease, LeaseRecord, LeaseStore, WriteFence } from "../store/lease.ts";
import { anySignal, sleep } from "../util/abort.ts";
import { BurstLog } from "../util/burst-log.ts";
import { systemClock, type Clock } from "../util/clock.ts";

/** The default lease duration: 10 s. */
export const DEFAULT_LEASE_DURATION_MS = 10_000;

/** Where a replica stands. */
export type LeadershipState =
  | { readonly kind: "standby"; readonly leader: LeaseRecord | undefined }
  | {
      readonly kind: "leader";
      readonly lease: Lease;
      /** The renew deadline, on this process's clock: the term's work stops then unless renewed. */
      readonly until: number;
    }
  | { readonly kind: "stopped" };

/** What moves a replica from one state to another. */
export type LeadershipEvent =
  /** The store granted (or renewed) the term; `sentAt` is when the request was sent. */
  | { readonly type: "granted"; readonly lease: Lease; readonly sentAt: number }
  /** Another replica holds the lease. */
  | { readonly type: "refused"; readonly holder: LeaseRecord }
  /** The store said the term is over (renewal refused). */
  | { readonly type: "lost" }
  /** The renew deadline passed. */
  | { readonly type: "deadline" }
  /** The replica stops. */
  | { readonly type: "stop" };

/** The renew deadline of a term renewed at `sentAt`: two thirds of the lease. */
export function renewDeadline(sentAt: number, durationMs: number): number {
  return sentAt + Math.floor((durationMs * 2) / 3);
}

/** The one transition function of {@link LeadershipState}. */
export function nextLeadership(state: LeadershipState, event: LeadershipEvent): LeadershipState {
  if (state.kind === "stopped") return state;
  switch (event.type) {
    case "stop":
      return { kind: "stopped" };
    case "granted":
      return {
        kind: "leader",
        lease: event.lease,
        until: renewDeadline(event.sentAt, event.lease.durationMs),
      };
    case "refused":
      return { kind: "standby", leader: event.holder };
    case "lost":
    case "deadline":
      return { kind: "standby", leader: undefined };
  }
}

/** Options of {@link Leadership}. */
export interface LeadershipOptions {
  /** Where the lease lives: the store the replicas share. */
  readonly store: LeaseStore;
  /** The lease's name (the zone's name). */
  readonly name: string;
  /** This replica's id, unique among them. */
  readonly holder: string;
  /** The lease's duration, in ms. Default {@link DEFAULT_LEASE_DURATION_MS}. */
  readonly durationMs?: number;
  /** What others are told of this replica (its admin API's address), read at each claim. */
  readonly address?: () => string | undefined;
  /** Where to log. */
  readonly logger: Logger;
  /** Default {@link systemClock}. */
  readonly clock?: Clock;
}

/** Checks a lease duration (ms); throws `invalid_argument` naming `what`. */
export function checkLeaseDuration(ms: number, what: string): number {
  if (!Number.isInteger(ms) || ms < 30)
    throw new KdsError(
      "invalid_argument",
      `\`${what}\` must be a whole number of milliseconds of at least 30, got ${String(ms)}`,
    );
  return ms;
}

/** A replica's part in its zone's election. */
export class Leadership {
  readonly #options: LeadershipOptions;
  readonly #clock: Clock;
  readonly #durationMs: number;
  #state: LeadershipState = { kind: "standby", leader: undefined };
  /** Aborts the running term's work. */
  #term: AbortController | undefined;
  #cancelDeadline: (() => void) | undefined;
  readonly #failures: BurstLog;
  #lastFailure: unknown;

  /** @param options - store, names, duration */
  constructor(options: LeadershipOptions) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#durationMs = checkLeaseDuration(
      options.durationMs ?? DEFAULT_LEASE_DURATION_MS,
      "leaseDurationMs",
    );
    this.#failures = new BurstLog(
      (count) =>
        options.logger.warn(
          `zone "${options.name}": the lease could not be read or renewed in the store${count > 1 ? ` (${count} times)` : ""}; retrying`,
          { zone: options.name, error: this.#lastFailure },
        ),
      10_000,
      this.#clock,
    );
  }

  /** The lease's duration, in ms. */
  get durationMs(): number {
    return this.#durationMs;
  }

  /** Where this replica stands now (a leader past its renew deadline reads as a standby). */
  get state(): LeadershipState {
    if (this.#state.kind === "leader" && this.#clock.now() >= this.#state.until)
      return { kind: "standby", leader: undefined };
    return this.#state;
  }

  /** True while this replica leads, by its own clock read now. */
  leads(): boolean {
    return this.state.kind === "leader";
  }

  /** The fence of this replica's writes while it leads; undefined when it does not. */
  fence(): WriteFence | undefined {
    const state = this.state;
    return state.kind === "leader"
      ? { lease: state.lease.name, revision: state.lease.revision }
      : undefined;
  }

  /** The `not_leader` error for a write made on this replica now, naming the leader when known. */
  refusal(what: string): KdsError {
    const state = this.state;
    const leader = state.kind === "standby" ? state.leader : undefined;
    const where =
      leader === undefined
        ? "the leader is not known yet (an election is under way); retry in a few seconds"
        : leader.address === ""
          ? `replica "${leader.holder}" leads (it published no admin address)`
          : `send it to the leader's admin API at ${leader.address} (replica "${leader.holder}")`;
    return new KdsError(
      "not_leader",
      `${what} was refused: this replica of zone "${this.#options.name}" is a standby, which serves reads only; ${where}`,
    );
  }

  /**
   * Campaigns until `signal` aborts: whenever this replica wins the lease,
   * runs `lead` with a signal that aborts when the term ends (lost, past its
   * renew deadline, or stopping), and waits for it to return before it
   * campaigns again. Releases the lease on the way out.
   */
  async run(signal: AbortSignal, lead: (term: AbortSignal) => Promise<void>): Promise<void> {
    const { store, name, logger } = this.#options;
    let running: Promise<void> | undefined;
    let announcedLeader = "";
    try {
      while (!signal.aborted) {
        const state = this.#state;
        if (state.kind === "leader") {
          // Renew every fifth of the lease, and give up at the deadline.
          const wait = Math.min(
            Math.floor(this.#durationMs / 5),
            Math.max(0, state.until - this.#clock.now()),
          );
          // A term that ends meanwhile (its deadline, its work stopping) wakes the loop at once.
          const term = this.#term?.signal;
          await this.#pause(wait, term === undefined ? signal : anySignal([signal, term]));
          if (signal.aborted) break;
          if (this.#state.kind !== "leader") continue; // the term ended meanwhile
          const sentAt = this.#clock.now();
          try {
            const renewed = await this.#bounded(
              (s) => store.renewLease(state.lease, { signal: s }),
              signal,
            );
            if (this.#state !== state) continue; // the deadline passed while renewing
            if (renewed) this.#grant(state.lease, sentAt);
            else this.#end("lost", "the store says its term is over");
          } catch (error) {
            if (signal.aborted) break;
            this.#failed(error);
          }
          continue;
        }
        if (running !== undefined) {
          // A term ended: its work stops before this replica campaigns again.
          await running;
          running = undefined;
        }
        const sentAt = this.#clock.now();
        let pauseMs = Math.max(1, Math.floor(this.#durationMs / 10));
        try {
          const attempt = await this.#bounded(
            (s) =>
              store.acquireLease(
                {
                  name,
                  holder: this.#options.holder,
                  durationMs: this.#durationMs,
                  address: this.#options.address?.() ?? "",
                },
                { signal: s },
              ),
            signal,
          );
          if (attempt.acquired) {
            this.#grant(attempt.lease, sentAt);
            logger.info(
              `zone "${name}": this replica leads (term ${attempt.lease.revision} of a ${this.#durationMs} ms lease); it dials the global and writes what comes from it`,
              { zone: name, term: attempt.lease.revision },
            );
            announcedLeader = "";
            const term = new AbortController();
            this.#term = term;
            running = lead(term.signal)
              .catch((error: unknown) => {
                logger.error(`zone "${name}": the leader's work failed`, { zone: name, error });
              })
              .finally(() => {
                // Work that ended on its own (it found the term past its deadline before the timer said so) ends the
                // term too, so a leader never holds the lease with nothing running: it campaigns again and restarts it.
                if (this.#term === term && !term.signal.aborted)
                  this.#end("lost", "its work stopped before its term ended");
              });
            continue;
          }
          this.#state = nextLeadership(this.#state, { type: "refused", holder: attempt.holder });
          const key = `${attempt.holder.holder}@${attempt.holder.revision}`;
          if (key !== announcedLeader) {
            announcedLeader = key;
            logger.info(
              `zone "${name}": this replica is a standby; replica "${attempt.holder.holder}"${attempt.holder.address === "" ? "" : ` (admin API ${attempt.holder.address})`} leads (term ${attempt.holder.revision}); this one serves reads and takes over if the leader stops renewing for ${this.#durationMs} ms`,
              { zone: name, leader: attempt.holder.holder, term: attempt.holder.revision },
            );
          }
          // Poll sooner when the leader's term ends sooner.
          if (attempt.holder.remainingMs < pauseMs)
            pauseMs = Math.max(1, attempt.holder.remainingMs + 5);
        } catch (error) {
          if (signal.aborted) break;
          this.#failed(error);
        }
        await this.#pause(pauseMs, signal);
      }
    } finally {
      const state = this.#state;
      this.#end("stop", "the zone stops");
      await running;
      if (state.kind === "leader") {
        // A clean stop hands over at once rather than after the lease runs out (best effort: it expires anyway).
        try {
          await store.releaseLease(state.lease, { signal: AbortSignal.timeout(2_000) });
        } catch (error) {
          logger.warn(
            `zone "${name}": releasing the lease failed; a standby takes over once it expires`,
            { zone: name, error },
          );
        }
      }
    }
  }

  /** Leads (again) until the renew deadline of a request sent at `sentAt`; arms the deadline. */
  #grant(lease: Lease, sentAt: number): void {
    this.#state = nextLeadership(this.#state, { type: "granted", lease, sentAt });
    this.#cancelDeadline?.();
    this.#armDeadline();
  }

  /**
   * Ends the term at its renew deadline. A timer may fire a little before its
   * time by this clock (Node's timers count from the loop's cached time), so
   * one that fires early is armed again for the rest.
   */
  #armDeadline(): void {
    const state = this.#state;
    if (state.kind !== "leader") return;
    this.#cancelDeadline = this.#clock.setTimer(
      () => {
        if (this.#state !== state) return; // renewed (a new deadline is armed) or ended
        if (this.#clock.now() >= state.until)
          this.#end("deadline", "it could not renew its lease before the renew deadline");
        else this.#armDeadline();
      },
      Math.max(1, state.until - this.#clock.now()),
    );
  }

  /** Ends the term (if any): its work is aborted now. */
  #end(type: "lost" | "deadline" | "stop", why: string): void {
    const was = this.#state;
    this.#state = nextLeadership(was, { type });
    this.#cancelDeadline?.();
    this.#cancelDeadline = undefined;
    if (was.kind === "leader" && type !== "stop")
      this.#options.logger.warn(
        `zone "${this.#options.name}": this replica no longer leads (${why}); it stopped dialing the global and writing, and stands by`,
        { zone: this.#options.name, term: was.lease.revision },
      );
    this.#term?.abort(new KdsError("not_leader", `this replica no longer leads: ${why}`));
    this.#term = undefined;
  }

  #failed(error: unknown): void {
    this.#lastFailure = error;
    this.#failures.note();
  }

  /** Runs a store call, cancelled at `signal` and, while leading, at the renew deadline. */
  async #bounded<T>(call: (signal: AbortSignal) => Promise<T>, signal: AbortSignal): Promise<T> {
    const controller = new AbortController();
    const onAbort = (): void => controller.abort(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    const state = this.#state;
    const limit =
      state.kind === "leader"
        ? Math.max(0, state.until - this.#clock.now())
        : Math.floor(this.#durationMs / 2);
    const cancel = this.#clock.setTimer(
      () => controller.abort(new KdsError("store_unavailable", "the lease call took too long")),
      limit,
    );
    try {
      return await call(controller.signal);
    } finally {
      cancel();
      signal.removeEventListener("abort", onAbort);
    }
  }

  async #pause(ms: number, signal: AbortSignal): Promise<void> {
    try {
      await sleep(ms, signal, this.#clock);
    } catch {
      // Only an abort rejects sleep: the loop sees `signal.aborted` and stops.
    }
  }
}
