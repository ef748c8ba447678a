/**
 * Cancellation of PostgreSQL statements through an AbortSignal.
 *
 * @module
 */
import type { PendingQuery, Row } from "postgres";
import { abortError } from "../../errors.ts";

/** Runs one statement so that an abort cancels it on the server. */
export type Runner = <T extends readonly (object | undefined)[] = Row[]>(
  query: PendingQuery<T>,
) => Promise<T>;

/** A statement in flight that an abort cancels. */
interface Cancellable {
  cancel(): void;
}

/**
 * The statements in flight under each signal, behind one abort listener per
 * signal. A global's watchers, leases and sweeps share its stop signal, so a
 * listener per statement would put dozens on it at once (and Node warns of a
 * leak past 10); one per signal keeps it at one, whatever the concurrency.
 */
const inFlightBySignal = new WeakMap<AbortSignal, Set<Cancellable>>();

function inFlightUnder(signal: AbortSignal): Set<Cancellable> {
  let statements = inFlightBySignal.get(signal);
  if (statements === undefined) {
    const set = new Set<Cancellable>();
    statements = set;
    inFlightBySignal.set(signal, set);
    signal.addEventListener(
      "abort",
      () => {
        for (const statement of set) statement.cancel();
        set.clear();
      },
      { once: true },
    );
  }
  return statements;
}

/**
 * Calls `body` with a statement runner bound to `signal`: an abort cancels
 * the statement in flight (a transaction around it then rolls back), and no
 * further statement starts.
 */
export async function guarded<T>(
  signal: AbortSignal | undefined,
  what: string,
  body: (run: Runner) => Promise<T>,
): Promise<T> {
  if (signal?.aborted) throw abortError(signal, what);
  const run: Runner = async (query) => {
    if (signal === undefined) return await query;
    if (signal.aborted) throw abortError(signal, what);
    const statements = inFlightUnder(signal);
    statements.add(query);
    try {
      return await query;
    } finally {
      statements.delete(query);
    }
  };
  return await body(run);
}
