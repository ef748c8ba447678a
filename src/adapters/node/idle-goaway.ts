/**
 * A workaround for a race in @connectrpc/connect-node 2.2.0: when an idle
 * pooled HTTP/2 connection (no open stream) receives GOAWAY, its session
 * manager destroys the connection with a ConnectError "received GOAWAY
 * without any open streams", sometimes after its own 'error' listener is gone,
 * so Node raises it as an uncaught exception and would end the process. No
 * stream was open on that connection, so nothing is lost: the next call dials
 * a new one.
 *
 * @module
 */

const RACE_MESSAGE = "received GOAWAY without any open streams";

/** True for exactly the error of that race (also in its serialized form, as a test runner passes it on). */
export function isIdleGoawayRace(error: unknown): boolean {
  if (typeof error !== "object" || error === null) return false;
  const e = error as { name?: unknown; rawMessage?: unknown };
  return e.name === "ConnectError" && e.rawMessage === RACE_MESSAGE;
}

/**
 * Keeps the process alive through that race: the error is logged as a
 * warning. Any other uncaught exception is printed and ends the process with
 * exit code 1, as Node would.
 */
export function tolerateIdleGoaway(warn: (message: string) => void): void {
  process.on("uncaughtException", (error) => {
    if (isIdleGoawayRace(error)) {
      warn(
        "an idle HTTP/2 connection to the peer received GOAWAY (connect-node race, nothing was in flight); the next call dials again",
      );
      return;
    }
    console.error(error);
    process.exit(1);
  });
}
