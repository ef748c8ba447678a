/**
 * Leases: one holder at a time of a named lease, kept in the store, with a
 * fencing revision. Zone replicas sharing one store elect their leader with
 * one (`ZoneControlPlane`'s `lease` option), and every write of the leader
 * carries its {@link WriteFence}: the store refuses it with `not_leader`
 * unless the lease still has that revision and has not expired, checked in
 * the write's own transaction. So a holder that was paused past its lease
 * (and replaced) can never write again, whatever its own clock says.
 *
 * - {@link LeaseStore.acquireLease} takes a free or expired lease (its
 *   revision goes up by one: a new term), or answers who holds it.
 * - {@link LeaseStore.renewLease} extends the holder's term (same revision)
 *   while it has not expired; false once it has, or another holder took it.
 * - {@link LeaseStore.releaseLease} ends the term at once (a clean stop), so
 *   a standby need not wait out the duration.
 *
 * Expiry is judged by the store's clock alone (PostgreSQL's
 * `clock_timestamp()`; the memory store's injected `Clock`), so the clocks of
 * the processes sharing it need not agree. A holder counts its term from the
 * moment it SENT the request that granted or renewed it (its own monotonic
 * clock), which is never later than the store's start of the term.
 *
 * @module
 */
import { KdsError } from "../errors.ts";

/** Who asks for a lease, and for how long. */
export interface LeaseClaim {
  /** The lease's name (a zone's name, for zone replicas). */
  readonly name: string;
  /** The holder's id: unique per process (and per run of it). */
  readonly holder: string;
  /** How long a term lasts from its last grant or renewal, in ms (at least 1). */
  readonly durationMs: number;
  /** What others are told of the holder, for example its admin API's address ("" when none). */
  readonly address?: string;
}

/** A term of a lease, as its holder keeps it. */
export interface Lease {
  /** The lease's name. */
  readonly name: string;
  /** The holder's id. */
  readonly holder: string;
  /** The fencing revision: one more at each new term of this lease, never reused. */
  readonly revision: number;
  /** The term's duration, in ms. */
  readonly durationMs: number;
  /** What others are told of the holder. */
  readonly address: string;
}

/** A lease as any reader sees it. */
export interface LeaseRecord {
  /** The lease's name. */
  readonly name: string;
  /** The holder of the current (or last) term. */
  readonly holder: string;
  /** The holder's address ("" when it gave none). */
  readonly address: string;
  /** The fencing revision of that term. */
  readonly revision: number;
  /** How long the term still runs, in ms, by the store's clock when read (0 or less: expired). */
  readonly remainingMs: number;
}

/** What {@link LeaseStore.acquireLease} got: the lease, or who holds it. */
export type LeaseAttempt =
  | { readonly acquired: true; readonly lease: Lease }
  | { readonly acquired: false; readonly holder: LeaseRecord };

/** Condition of a write: the lease `lease` is still in the term of `revision`, unexpired. */
export interface WriteFence {
  /** The lease's name. */
  readonly lease: string;
  /** The term's fencing revision. */
  readonly revision: number;
}

/** Options of every lease call. */
export interface LeaseCallOptions {
  /** Cancels the call. */
  readonly signal?: AbortSignal;
}

/**
 * Named leases kept in a store (the PostgreSQL and memory stores implement
 * it); writes of the store take a {@link WriteFence} (`WriteOptions.fence`).
 */
export interface LeaseStore {
  /**
   * Takes the lease when it is free or expired (a new term: the revision
   * goes up by one), or returns the holder's term when `claim.holder` holds
   * it already; otherwise answers who holds it.
   */
  acquireLease(claim: LeaseClaim, options?: LeaseCallOptions): Promise<LeaseAttempt>;
  /**
   * Extends the term of `lease` by its duration from now (the store's now);
   * false when it expired or another term began (the lease is lost: acquire
   * again).
   */
  renewLease(lease: Lease, options?: LeaseCallOptions): Promise<boolean>;
  /** Ends the term of `lease` now, if it is still current (a clean stop); others may take it at once. */
  releaseLease(lease: Lease, options?: LeaseCallOptions): Promise<void>;
  /** The lease's current (or last) term, or undefined when it was never taken. */
  readLease(name: string, options?: LeaseCallOptions): Promise<LeaseRecord | undefined>;
}

/** True when `store` implements {@link LeaseStore}. */
export function isLeaseStore(store: unknown): store is LeaseStore {
  const s = store as Partial<LeaseStore> | null;
  return (
    typeof s === "object" &&
    s !== null &&
    typeof s.acquireLease === "function" &&
    typeof s.renewLease === "function" &&
    typeof s.releaseLease === "function" &&
    typeof s.readLease === "function"
  );
}

/** Checks a claim; throws `invalid_argument`. */
export function checkClaim(claim: LeaseClaim): void {
  if (claim.name === "" || claim.holder === "")
    throw new KdsError("invalid_argument", "a lease claim needs a name and a holder");
  if (!Number.isInteger(claim.durationMs) || claim.durationMs < 1)
    throw new KdsError(
      "invalid_argument",
      `a lease's duration is a positive whole number of milliseconds, got ${claim.durationMs}`,
    );
}

/** The `not_leader` error of a fenced write whose term is over. */
export function fencedOut(fence: WriteFence, current: string): KdsError {
  return new KdsError(
    "not_leader",
    `the write was refused: it was made under term ${fence.revision} of lease "${fence.lease}", which is over (${current}); nothing was written`,
  );
}
