/**
 * The PostgreSQL store's leases (see ../lease.ts), in the table
 * `kds_leases` (migration 3): one row per lease name, kept after a term ends
 * so the fencing revision only ever goes up. Every statement judges expiry
 * by the server's `clock_timestamp()`, never by a client's clock.
 *
 * A fenced write reads the lease's row `FOR SHARE` inside its transaction
 * (after the store's write lock), so an acquisition (an UPDATE of that row)
 * waits for the write to commit, and a write checked after the acquisition
 * sees the new term and is refused: terms and their writes never overlap.
 *
 * @module
 */
import type { Sql, TransactionSql } from "postgres";
import type { Lease, LeaseAttempt, LeaseClaim, LeaseRecord, WriteFence } from "../lease.ts";
import type { Runner } from "./guard.ts";

/** A row of `kds_leases` as the statements below return it. */
interface LeaseRow {
  readonly name: string;
  readonly holder: string;
  readonly address: string;
  readonly revision: string;
  readonly remaining_ms: string;
}

const RECORD = `name, holder, address, revision::text AS revision,
  (extract(epoch FROM (expires_at - clock_timestamp())) * 1000)::bigint::text AS remaining_ms`;

function toRecord(row: LeaseRow): LeaseRecord {
  return {
    name: row.name,
    holder: row.holder,
    address: row.address,
    revision: Number(row.revision),
    remainingMs: Number(row.remaining_ms),
  };
}

/** Takes the lease when free or expired (a new term), keeps it for its holder, or answers who holds it. */
export async function acquireLease(
  sql: Sql,
  run: Runner,
  claim: LeaseClaim,
): Promise<LeaseAttempt> {
  const address = claim.address ?? "";
  const ms = String(claim.durationMs);
  // A new term when free or expired; the same holder's unexpired term is extended, revision kept.
  const [taken] = await run(sql<Array<{ revision: string }>>`
    INSERT INTO kds_leases (name, holder, address, revision, expires_at, acquired_at, renewed_at)
    VALUES (${claim.name}, ${claim.holder}, ${address}, 1,
      clock_timestamp() + ${ms}::bigint * interval '1 millisecond', clock_timestamp(), clock_timestamp())
    ON CONFLICT (name) DO UPDATE SET
      holder = excluded.holder, address = excluded.address, expires_at = excluded.expires_at,
      renewed_at = excluded.renewed_at,
      revision = CASE WHEN kds_leases.holder = excluded.holder AND kds_leases.expires_at > clock_timestamp()
        THEN kds_leases.revision ELSE kds_leases.revision + 1 END,
      acquired_at = CASE WHEN kds_leases.holder = excluded.holder AND kds_leases.expires_at > clock_timestamp()
        THEN kds_leases.acquired_at ELSE excluded.acquired_at END
    WHERE kds_leases.expires_at <= clock_timestamp() OR kds_leases.holder = excluded.holder
    RETURNING revision::text AS revision`);
  if (taken !== undefined) {
    const lease: Lease = {
      name: claim.name,
      holder: claim.holder,
      revision: Number(taken.revision),
      durationMs: claim.durationMs,
      address,
    };
    return { acquired: true, lease };
  }
  const holder = await readLease(sql, run, claim.name);
  if (holder === undefined)
    // Only a row deleted by hand between the two statements gets here: report it as held by nobody, expired.
    return {
      acquired: false,
      holder: { name: claim.name, holder: "", address: "", revision: 0, remainingMs: 0 },
    };
  return { acquired: false, holder };
}

/** Extends the term of `lease` from now; false when it expired or another term began. */
export async function renewLease(sql: Sql, run: Runner, lease: Lease): Promise<boolean> {
  const rows = await run(sql`
    UPDATE kds_leases SET
      expires_at = clock_timestamp() + ${String(lease.durationMs)}::bigint * interval '1 millisecond',
      renewed_at = clock_timestamp()
    WHERE name = ${lease.name} AND revision = ${String(lease.revision)}::int8
      AND holder = ${lease.holder} AND expires_at > clock_timestamp()
    RETURNING name`);
  return rows.length > 0;
}

/** Ends the term of `lease` now, if it is current. */
export async function releaseLease(sql: Sql, run: Runner, lease: Lease): Promise<void> {
  await run(sql`
    UPDATE kds_leases SET expires_at = clock_timestamp()
    WHERE name = ${lease.name} AND revision = ${String(lease.revision)}::int8
      AND holder = ${lease.holder} AND expires_at > clock_timestamp()`);
}

/** The lease's current (or last) term. */
export async function readLease(
  sql: Sql,
  run: Runner,
  name: string,
): Promise<LeaseRecord | undefined> {
  const [row] = await run(
    sql<LeaseRow[]>`SELECT ${sql.unsafe(RECORD)} FROM kds_leases WHERE name = ${name}`,
  );
  return row === undefined ? undefined : toRecord(row);
}

/**
 * Inside a write transaction: the current term of each lease `fences` name,
 * locked `FOR SHARE` until the transaction ends (so no new term begins
 * before it commits); a lease missing from the map is unknown or expired.
 */
export async function lockFences(
  tx: TransactionSql,
  run: Runner,
  fences: readonly WriteFence[],
): Promise<Map<string, { revision: number; holder: string }>> {
  const names = [...new Set(fences.map((f) => f.lease))];
  const rows = await run(tx<Array<{ name: string; revision: string; holder: string }>>`
    SELECT name, revision::text AS revision, holder FROM kds_leases
    WHERE name = ANY(${names}::text[]) AND expires_at > clock_timestamp()
    FOR SHARE`);
  return new Map(rows.map((r) => [r.name, { revision: Number(r.revision), holder: r.holder }]));
}
