/**
 * Transactions that survive their connection dying under them.
 *
 * postgres.js 3.4.9 (the newest release) answers a failed transaction body
 * with a ROLLBACK on the same connection. When that connection has just been
 * closed (a terminated backend, a restarted server, a cut network), the
 * ROLLBACK is queued for a socket that is gone and throws from a
 * `setImmediate`, outside any promise, which ends the process
 * (porsager/postgres#1208, still open). Found by test/cli/churn-faults.test.ts,
 * which cuts a global's database connections while both sides write.
 *
 * The server has already rolled the transaction back when its connection
 * died, so nothing needs sending: on a connection error the body here never
 * settles (postgres.js then sends neither ROLLBACK nor COMMIT), and the caller
 * gets that error at once. The pending body and the connection object are
 * dropped by postgres.js's pool when it closes the dead connection.
 *
 * @module
 */
import type { Sql, TransactionSql } from "postgres";
import { isConnectionError } from "./errors.ts";

/** `sql.begin(mode, body)`, failing with the connection's error instead of sending a ROLLBACK down a dead connection. */
export function transaction<T>(
  sql: Sql,
  mode: string,
  body: (tx: TransactionSql) => Promise<T>,
): Promise<T> {
  let connectionGone: (error: unknown) => void = () => undefined;
  const gone = new Promise<never>((_, reject) => (connectionGone = reject));
  const begun = sql.begin(mode, async (tx) => {
    try {
      return await body(tx);
    } catch (error) {
      if (!isConnectionError(error)) throw error; // a live connection: postgres.js rolls back
      connectionGone(error);
      return new Promise<never>(() => undefined);
    }
  }) as Promise<T>;
  // Whichever settles first decides; race handles the other's later rejection (begin also fails once the pool sees the close).
  return Promise.race([begun, gone]);
}
