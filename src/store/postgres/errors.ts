/**
 * How PostgreSQL failures become {@link KdsError}s: a connection that cannot
 * be made or was lost is `store_unavailable` naming the server (never its
 * password) and what to check; anything else the server refuses is
 * `store_unavailable` carrying the server's message.
 *
 * @module
 */
import { KdsError } from "../../errors.ts";

/** Where a store's database lives, for messages: `host:port/database`, no credentials. */
export function describeTarget(url: string): string {
  try {
    const u = new URL(url);
    const db = u.pathname.replace(/^\//, "") || "(default database)";
    return `${decodeURIComponent(u.hostname) || "localhost"}:${u.port || "5432"}/${decodeURIComponent(db)}`;
  } catch {
    // Not a URL we can parse: say so instead of echoing it (it may hold a password).
    return "(an unparsable database URL)";
  }
}

/** Node socket error codes that mean "the server could not be reached or the connection broke". */
const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ETIMEDOUT",
  "EPIPE",
  "CONNECT_TIMEOUT",
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
]);

/** The error's `code` property, if it has a string one. */
function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/**
 * Whether `error` means the connection to the server failed or was lost (as
 * opposed to the server refusing a statement): such a call may be retried on
 * a new connection. SQLSTATE class 08 is a connection exception, 57P0x an
 * operator or crash shutdown of the backend.
 */
export function isConnectionError(error: unknown): boolean {
  const code = codeOf(error);
  if (code === undefined) return false;
  return (
    NETWORK_CODES.has(code) ||
    code.startsWith("08") ||
    code === "57P01" ||
    code === "57P02" ||
    code === "57P03"
  );
}

/**
 * Whether `error` (or its cause) is postgres.js's `CONNECT_TIMEOUT`: a new
 * connection did not become ready in time, so the statement waiting for it
 * was never sent and a retry cannot run anything twice. It is also what a
 * process whose event loop was busy for longer than the timeout sees while
 * a connection starts, however quickly the server answered.
 */
export function isConnectTimeout(error: unknown): boolean {
  return (
    codeOf(error) === "CONNECT_TIMEOUT" ||
    codeOf((error as { cause?: unknown } | null)?.cause) === "CONNECT_TIMEOUT"
  );
}

/**
 * Turns any failure of a PostgreSQL call into a {@link KdsError}: a
 * KdsError passes through; a connection failure becomes `store_unavailable`
 * saying which server and what to check; a refused statement becomes
 * `store_unavailable` with the server's message.
 */
export function storeError(error: unknown, target: string, what: string): KdsError {
  if (error instanceof KdsError) return error;
  const code = codeOf(error);
  const detail = error instanceof Error ? error.message : String(error);
  if (isConnectionError(error)) {
    return new KdsError(
      "store_unavailable",
      `${what}: cannot reach PostgreSQL at ${target} (${detail}); check that the server runs, that the host and port are right and that this machine can reach it`,
      { cause: error },
    );
  }
  if (code === "3D000") {
    return new KdsError(
      "store_unavailable",
      `${what}: PostgreSQL at ${target}: ${detail}; create the database (CREATE DATABASE) or fix the URL`,
      { cause: error },
    );
  }
  if (code === "28000" || code === "28P01") {
    return new KdsError(
      "store_unavailable",
      `${what}: PostgreSQL at ${target} refused the login (${detail}); check the user and password in the URL`,
      { cause: error },
    );
  }
  return new KdsError(
    "store_unavailable",
    `${what}: PostgreSQL at ${target} failed (${code ?? "no code"}: ${detail})`,
    { cause: error },
  );
}
