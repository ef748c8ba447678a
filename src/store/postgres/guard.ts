/**
 * Cancellation of PostgreSQL statements through an AbortSignal.
 *
 * @module
 */
import type { PendingQuery, Row } from "postgres";
import { abortError } from "../../errors.ts";
import type { Cancellable, CancelRequests } from "./cancels.ts";

/** Runs one statement so that an abort cancels it on the server. */
export type Runner = <T extends readonly (object | undefined)[] = Row[]>(
  query: PendingQuery<T>,
) => Promise<T>;

/**
 * The statements in flight under each signal, each with the store's cancel
 * requests that sends its cancel, behind one abort listener per signal. A
 * global's watchers, leases and sweeps share its stop signal, so a listener
 * per statement would put dozens on it at once (and Node warns of a leak past
 * 10); one per signal keeps it at one, whatever the concurrency.
 */
const inFlightBySignal = new WeakMap<AbortSignal, Map<Cancellable, CancelRequests>>();

function inFlightUnder(signal: AbortSignal): Map<Cancellable, CancelRequests> {
  let statements = inFlightBySignal.get(signal);
  if (statements === undefined) {
    const map = new Map<Cancellable, CancelRequests>();
    statements = map;
    inFlightBySignal.set(signal, map);
    signal.addEventListener(
      "abort",
      () => {
        for (const [statement, cancels] of map) cancels.send(statement);
        map.clear();
      },
      { once: true },
    );
  }
  return statements;
}

/**
 * Calls `body` with a statement runner bound to `signal`: an abort cancels
 * the statement in flight (a transaction around it then rolls back), and no
 * further statement starts. The cancel request goes through `cancels`, which
 * keeps its failure from escaping and lets closing the store wait for it.
 */
export async function guarded<T>(
  signal: AbortSignal | undefined,
  what: string,
  cancels: CancelRequests,
  body: (run: Runner) => Promise<T>,
): Promise<T> {
  if (signal?.aborted) throw abortError(signal, what);
  const run: Runner = async (query) => {
    if (signal === undefined) return await query;
    if (signal.aborted) throw abortError(signal, what);
    const statements = inFlightUnder(signal);
    statements.set(query, cancels);
    try {
      return await query;
    } finally {
      statements.delete(query);
    }
  };
  return await body(run);
}
