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
  let inFlight: Cancellable | undefined;
  const onAbort = (): void => {
    if (inFlight !== undefined) cancels.send(inFlight);
  };
  signal?.addEventListener("abort", onAbort, { once: true });
  const run: Runner = async (query) => {
    if (signal?.aborted) throw abortError(signal, what);
    inFlight = query;
    try {
      return await query;
    } finally {
      inFlight = undefined;
    }
  };
  try {
    return await body(run);
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
}
