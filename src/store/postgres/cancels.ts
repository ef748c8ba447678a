/**
 * Cancel requests that cannot crash the process, and that closing waits for.
 *
 * PostgreSQL cancels a statement through a request on a connection of its
 * own. postgres.js 3.4.9 (the newest release) opens that connection in
 * `query.cancel()` and drops the promise that settles when it ends, so a
 * request whose connection fails (the server stopping under it: ECONNRESET;
 * or unreachable: ECONNREFUSED) rejects with nobody to handle it, and an
 * unhandled rejection ends the process. Nor does `sql.end()` wait for these
 * connections. A SIGTERMed `kds-mux global` on the embedded engine hit both
 * (issue 20): its watches' statements in flight were cancelled when it
 * stopped, the store closed, the embedded server stopped under the cancel
 * requests, and the process exited 1 with an uncaught `read ECONNRESET`.
 *
 * Here the request is sent by the same function `query.cancel()` calls, but
 * its promise is kept: a failure is logged (nothing is lost: the caller has
 * its abort error already, and the statement ends on its own or with its
 * connection), and {@link CancelRequests.settled} lets `close()` wait until
 * every request has ended before the server may be stopped. At most one
 * request per statement in flight is pending, so the set stays as small as
 * the pool.
 *
 * @module
 */
import type { Logger } from "../../log.ts";
import { raceAbort } from "../../util/abort.ts";

/** A postgres.js pending query as far as cancelling goes. */
export interface Cancellable {
  cancel(): void;
}

/**
 * What a postgres.js 3.4.9 query holds beside its typings: the function
 * `cancel()` calls (and then clears), which returns the request's promise.
 */
interface WithCanceller extends Cancellable {
  canceller?: ((query: unknown) => Promise<void>) | null;
}

/** The cancel requests a store sent that have not ended yet. */
export class CancelRequests {
  readonly #pending = new Set<Promise<void>>();
  readonly #logger: Logger;
  readonly #target: string;

  /**
   * @param logger - where a failed request is reported (debug level)
   * @param target - the server, for that report (`host:port/db`)
   */
  constructor(logger: Logger, target: string) {
    this.#logger = logger;
    this.#target = target;
  }

  /** How many requests have not ended yet. */
  get pending(): number {
    return this.#pending.size;
  }

  /** Asks the server to cancel `query`'s statement; never rejects or throws. */
  send(query: Cancellable): void {
    const sent: Promise<void> = request(query)
      .catch((error: unknown) => {
        this.#logger.debug(
          "PostgreSQL store: a cancel request failed; the statement ends on its own or with its connection",
          { target: this.#target, error: error instanceof Error ? error.message : String(error) },
        );
      })
      .finally(() => this.#pending.delete(sent));
    this.#pending.add(sent);
  }

  /** Resolves once every request sent so far has ended, or when `signal` aborts (it never rejects). */
  async settled(signal: AbortSignal): Promise<void> {
    if (this.#pending.size === 0) return;
    try {
      await raceAbort(Promise.all(this.#pending), signal, "waiting for cancel requests");
    } catch {
      // Only the abort rejects (each request's failure is caught in send): the caller stops waiting, as asked.
    }
  }
}

/** Sends the cancel request of `query` and returns the promise postgres.js's `cancel()` would drop. */
function request(query: Cancellable): Promise<void> {
  const q = query as WithCanceller;
  const canceller = q.canceller;
  if (typeof canceller !== "function") {
    // Cancelled before (postgres.js clears the canceller, and a second call sends nothing), or a postgres.js
    // whose internals differ: cancel as documented (test/store/postgres-cancel.test.ts catches the latter).
    q.cancel();
    return Promise.resolve();
  }
  q.canceller = null; // as cancel() does: one request per query
  try {
    return canceller(q);
  } catch (error) {
    return Promise.reject(error);
  }
}
