/**
 * Who holds a listener's connections: every accepted connection starts
 * unauthenticated and must carry a request whose credentials are proven
 * (a zone stream admitted, a half-duplex call or an admin call authorized on
 * its headers) within the authentication timeout, or it is closed whatever
 * its streams are doing. At the listener's cap, the oldest unauthenticated
 * connection is closed to make room, so a peer with valid credentials always
 * gets in while others merely hold sockets; only when every connection is
 * authenticated is a new one refused. An identity (a zone, or an admin
 * token) may hold a bounded number of authenticated connections; beyond it
 * its oldest one is closed, so no one identity fills the cap. Connections are matched by their remote address and port, which a
 * TLS socket shares with the TCP socket under it.
 *
 * @module
 */
import type * as net from "node:net";
import type { Logger } from "../../log.ts";
import type { ListenerName, Metrics } from "../../metrics.ts";
import { BurstLog } from "../../util/burst-log.ts";

/** Options of {@link ConnectionGuard}. */
export interface ConnectionGuardOptions {
  /** Which listener this is, for logs and metrics. */
  readonly listener: ListenerName;
  /** Most connections open at once (see the module description for who is closed at the cap). */
  readonly maxConnections: number;
  /** How long a connection may stay without an authenticated request before it is closed. */
  readonly authTimeoutMs: number;
  /** Most authenticated connections one identity holds; beyond it its oldest is closed. Default: no bound. */
  readonly maxConnectionsPerIdentity?: number;
  /** How the cap is set, named in the log line when it is reached (for example "--max-connections"). */
  readonly setting?: string;
  /** Where closures are logged (once per burst). */
  readonly logger?: Logger;
  /** Where opened, closed, refused, evicted and unauthenticated-closed connections are counted. */
  readonly metrics?: Pick<Metrics, "connection">;
}

/** What a request handler may tell the guard about its request's connection. */
export interface GuardedConnection {
  /**
   * The connection carried a request whose credentials were proven as
   * `identity` (undefined: trusted without one, as a loopback admin
   * listener trusts local clients). It is no longer closed for not
   * authenticating nor evicted at the cap.
   */
  authenticated(identity: string | undefined): void;
  /** Holds off the authentication timeout while `work` (an authentication) runs; resolves or rejects as it does. */
  authenticating<T>(work: Promise<T>): Promise<T>;
}

/** One accepted connection. */
interface Tracked {
  readonly socket: net.Socket;
  readonly key: string;
  authenticated: boolean;
  identity: string | undefined;
  /** Authentications in progress on it. */
  pending: number;
  /** The authentication timeout passed while one was in progress: check again when none is. */
  overdue: boolean;
  timer: NodeJS.Timeout | undefined;
}

/** A handle that does nothing, for a request whose connection the guard does not know (it was already closed). */
const untracked: GuardedConnection = {
  authenticated: () => undefined,
  authenticating: (work) => work,
};

/** Keeps a listener's connections (see the module description). */
export class ConnectionGuard {
  readonly #options: ConnectionGuardOptions;
  /** Every open connection, oldest first. */
  readonly #all = new Map<string, Tracked>();
  /** The unauthenticated ones, oldest first. */
  readonly #unauthenticated = new Set<Tracked>();
  /** Authenticated connections per identity, oldest first. */
  readonly #byIdentity = new Map<string, Set<Tracked>>();
  readonly #refusedLog: BurstLog;
  readonly #evictedLog: BurstLog;
  readonly #timeoutLog: BurstLog;
  readonly #identityLog: BurstLog;
  /** Connections admitted without a remote address so far (their keys). */
  #unknown = 0;

  /** @param options - the cap, the authentication timeout, where to report */
  constructor(options: ConnectionGuardOptions) {
    this.#options = options;
    const { listener, logger, maxConnections } = options;
    const setting = options.setting ?? "maxConnections";
    const burst = (
      first: string,
      more: (count: number, seconds: number) => string,
      fields: Record<string, unknown>,
    ): BurstLog =>
      new BurstLog((count, windowMs) =>
        logger?.warn(
          count === 1 && windowMs === 0 ? first : more(count, Math.round(windowMs / 1000)),
          { listener, ...fields, count },
        ),
      );
    this.#refusedLog = burst(
      `the ${listener} listener holds ${maxConnections} connections (${setting}), all authenticated: new connections are closed at once until some close. Further refusals are logged at most every 10 s and counted in kds_connections_refused_total{listener="${listener}"}`,
      (count, s) =>
        `the ${listener} listener refused ${count} more connections in the last ${s} s at its cap of ${maxConnections} (${setting}), all held by authenticated clients`,
      { limit: maxConnections },
    );
    this.#evictedLog = burst(
      `the ${listener} listener holds ${maxConnections} connections (${setting}): closing the oldest unauthenticated one for each new connection, so clients with valid credentials still get in. Further evictions are logged at most every 10 s and counted in kds_connections_evicted_total{listener="${listener}"}`,
      (count, s) =>
        `the ${listener} listener closed ${count} more unauthenticated connections in the last ${s} s to make room at its cap of ${maxConnections} (${setting})`,
      { limit: maxConnections },
    );
    this.#timeoutLog = burst(
      `closed a connection on the ${listener} listener that presented no valid credentials within ${options.authTimeoutMs} ms; more are logged at most every 10 s and counted in kds_connections_unauthenticated_closed_total{listener="${listener}"}`,
      (count, s) =>
        `closed ${count} more connections on the ${listener} listener in the last ${s} s that presented no valid credentials within ${options.authTimeoutMs} ms`,
      { timeoutMs: options.authTimeoutMs },
    );
    this.#identityLog = burst(
      `an identity on the ${listener} listener opened more than ${String(options.maxConnectionsPerIdentity)} authenticated connections: its oldest was closed; more are logged at most every 10 s and counted in kds_connections_evicted_total{listener="${listener}"}`,
      (count, s) =>
        `closed ${count} more connections on the ${listener} listener in the last ${s} s of identities over ${String(options.maxConnectionsPerIdentity)} connections each`,
      { limit: options.maxConnectionsPerIdentity },
    );
  }

  /** Open connections. */
  get size(): number {
    return this.#all.size;
  }

  /** Open connections without an authenticated request yet. */
  get unauthenticated(): number {
    return this.#unauthenticated.size;
  }

  /**
   * Takes an accepted connection: at the cap, closes the oldest
   * unauthenticated one (not one whose authentication is in progress) to
   * make room, or, when there is none, closes `socket` itself. Returns
   * whether `socket` was kept.
   */
  admit(socket: net.Socket): boolean {
    const { metrics, listener } = this.#options;
    metrics?.connection(listener, "opened");
    // `on` (here and below): a socket closes once, and `once` would hold a wrapper for the connection's life.
    socket.on("close", () => metrics?.connection(listener, "closed"));
    if (this.#all.size >= this.#options.maxConnections) {
      const victim = this.#oldestEvictable();
      if (victim === undefined) {
        metrics?.connection(listener, "refused");
        this.#refusedLog.note();
        socket.destroy();
        return false;
      }
      metrics?.connection(listener, "evicted");
      this.#evictedLog.note();
      this.#close(victim);
    }
    // A runtime that tells no remote address (or a socket already gone) cannot be matched to its requests: it counts toward
    // the cap but is trusted as before, rather than closed for a check it could never pass.
    const key = keyOf(socket) ?? `unknown|${++this.#unknown}`;
    const tracked: Tracked = {
      socket,
      key,
      authenticated: false,
      identity: undefined,
      pending: 0,
      overdue: false,
      timer: undefined,
    };
    this.#all.get(key)?.socket.destroy(); // a stale entry for a reused address and port
    this.#forget(this.#all.get(key));
    this.#all.set(key, tracked);
    this.#unauthenticated.add(tracked);
    tracked.timer = setTimeout(
      () => setImmediate(() => this.#deadline(tracked)),
      this.#options.authTimeoutMs,
    );
    tracked.timer.unref();
    socket.on("close", () => this.#forget(tracked));
    if (key.startsWith("unknown|")) this.#authenticated(tracked, undefined);
    return true;
  }

  /** What a request on `socket` (the accepted socket, the TLS socket over it, or an HTTP/2 request's socket proxy) may tell the guard. */
  connection(socket: Pick<net.Socket, "remoteAddress" | "remotePort">): GuardedConnection {
    const key = keyOf(socket);
    const tracked = key === undefined ? undefined : this.#all.get(key);
    if (tracked === undefined) return untracked;
    return {
      authenticated: (identity) => this.#authenticated(tracked, identity),
      authenticating: async (work) => {
        tracked.pending += 1;
        try {
          return await work;
        } finally {
          tracked.pending -= 1;
          if (tracked.pending === 0 && tracked.overdue) this.#deadline(tracked);
        }
      },
    };
  }

  #authenticated(tracked: Tracked, identity: string | undefined): void {
    if (tracked.authenticated || this.#all.get(tracked.key) !== tracked) return;
    tracked.authenticated = true;
    tracked.identity = identity;
    this.#unauthenticated.delete(tracked);
    clearTimeout(tracked.timer);
    const cap = this.#options.maxConnectionsPerIdentity;
    if (identity === undefined || cap === undefined) return;
    let held = this.#byIdentity.get(identity);
    if (held === undefined) {
      held = new Set();
      this.#byIdentity.set(identity, held);
    }
    held.add(tracked);
    while (held.size > cap) {
      const oldest = held.values().next().value as Tracked;
      this.#options.metrics?.connection(this.#options.listener, "evicted");
      this.#identityLog.note();
      this.#close(oldest);
    }
  }

  /** The authentication timeout of `tracked` passed (its authentication may still be in progress). */
  #deadline(tracked: Tracked): void {
    if (tracked.authenticated || this.#all.get(tracked.key) !== tracked) return;
    if (tracked.pending > 0) {
      // The server is still checking its credentials: that is the server's time, not the client's.
      tracked.overdue = true;
      return;
    }
    this.#options.metrics?.connection(this.#options.listener, "unauthenticated_timeout");
    this.#timeoutLog.note();
    this.#close(tracked);
  }

  #oldestEvictable(): Tracked | undefined {
    for (const tracked of this.#unauthenticated) if (tracked.pending === 0) return tracked;
    return undefined;
  }

  #close(tracked: Tracked): void {
    this.#forget(tracked);
    tracked.socket.destroy();
  }

  #forget(tracked: Tracked | undefined): void {
    if (tracked === undefined || this.#all.get(tracked.key) !== tracked) return;
    this.#all.delete(tracked.key);
    this.#unauthenticated.delete(tracked);
    clearTimeout(tracked.timer);
    if (tracked.identity !== undefined) {
      const held = this.#byIdentity.get(tracked.identity);
      held?.delete(tracked);
      if (held?.size === 0) this.#byIdentity.delete(tracked.identity);
    }
  }
}

/** The key of a connection: its remote address and port (undefined once the socket is gone). */
function keyOf(socket: Pick<net.Socket, "remoteAddress" | "remotePort">): string | undefined {
  const address = socket.remoteAddress;
  const port = socket.remotePort;
  return address === undefined || port === undefined ? undefined : `${address}|${port}`;
}
