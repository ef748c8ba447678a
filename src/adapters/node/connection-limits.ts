/**
 * Bounds on the connections a node listener holds, so idle, silent or
 * unauthenticated clients cannot exhaust the process's file descriptors nor
 * lock out clients with valid credentials: a cap on open connections (at the
 * cap the oldest unauthenticated connection is closed to make room; only
 * when all are authenticated is a new one refused), a deadline to
 * authenticate (see `connection-guard.ts`), a deadline on request bodies
 * (see `request-gate.ts`), an idle timeout for HTTP/2 connections without a
 * stream and HTTP/1.1 keep-alive sockets without a request, a bound on
 * concurrent streams per HTTP/2 connection, and defaults derived from the
 * soft `RLIMIT_NOFILE`. Reaching the cap is logged once per burst and
 * counted in metrics.
 *
 * @module
 */
import { readFileSync } from "node:fs";
import type * as http from "node:http";
import type * as http2 from "node:http2";
import { constants as http2constants } from "node:http2";
import type * as net from "node:net";
import { KdsError } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import type { ListenerName, Metrics } from "../../metrics.ts";
import { ConnectionGuard } from "./connection-guard.ts";

/** How many connections a listener holds and for how long an idle one stays. */
export interface ConnectionLimits {
  /** Which listener this is, for logs and metrics. */
  readonly listener: ListenerName;
  /**
   * Most connections open at once. At the cap, the oldest connection that
   * has not authenticated is closed for each new one (when the listener
   * authenticates, see `authTimeoutMs`); when every connection has, a new
   * one is closed as soon as it is accepted.
   */
  readonly maxConnections: number;
  /**
   * How long a connection may stay open without carrying a request whose
   * credentials were proven (by the listener's gate, or a zone stream the
   * global admitted); it is then closed, whatever its streams are doing.
   * Only on a listener that authenticates (one with a gate: `serveGlobal`'s,
   * or an admin listener given one); elsewhere every connection counts as
   * authenticated. Default {@link DEFAULT_AUTH_TIMEOUT_MS}.
   */
  readonly authTimeoutMs?: number;
  /**
   * How long a request may take to send its body, plus one second per 64 KiB
   * it sends (see `guardRequestBody`); the zone mux stream, whose body is the
   * session itself, is exempt. Default {@link DEFAULT_REQUEST_TIMEOUT_MS}.
   */
  readonly requestTimeoutMs?: number;
  /**
   * Most authenticated connections one identity (a zone, or an admin token)
   * holds at once; beyond it its oldest is closed, so one identity cannot
   * fill `maxConnections` with connections that all count as authenticated.
   * A caller trusted without an identity (a loopback admin listener's
   * tokenless client) has no share. Default: no bound; `serveGlobal`
   * defaults it to {@link DEFAULT_MAX_CONNECTIONS_PER_ZONE}, the CLI's
   * admin listeners use {@link DEFAULT_MAX_CONNECTIONS_PER_ADMIN_TOKEN}.
   */
  readonly maxConnectionsPerIdentity?: number;
  /**
   * An HTTP/2 connection with no open stream, an HTTP/1.1 connection between
   * requests (keep-alive) or still sending its request head, and a connection
   * that has not finished its TLS handshake or said which protocol it speaks,
   * is closed after this long.
   */
  readonly idleTimeoutMs: number;
  /** Most concurrent streams a client may open on one HTTP/2 connection (its SETTINGS). Default {@link DEFAULT_MAX_STREAMS_PER_CONNECTION}. */
  readonly maxStreamsPerConnection?: number;
  /** How the cap is set, named in the log line when it is reached (for example "--max-connections"). */
  readonly setting?: string;
  /** Where reaching the cap is logged (once per burst). */
  readonly logger?: Logger;
  /** Where opened, closed, refused and idle-closed connections are counted. */
  readonly metrics?: Pick<Metrics, "connection">;
}

/** The default of {@link ConnectionLimits.authTimeoutMs}. */
export const DEFAULT_AUTH_TIMEOUT_MS = 5_000;
/** The default of {@link ConnectionLimits.requestTimeoutMs}. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 10_000;
/** The zone listener's default {@link ConnectionLimits.maxConnectionsPerIdentity}: a zone needs one (a browser zone over HTTP/1.1 a few). */
export const DEFAULT_MAX_CONNECTIONS_PER_ZONE = 8;

/**
 * The admin listener's {@link ConnectionLimits.maxConnectionsPerIdentity},
 * per admin token: a CLI call needs one connection, the status page a few
 * (one per open event stream over HTTP/1.1), a Prometheus scrape one.
 */
export const DEFAULT_MAX_CONNECTIONS_PER_ADMIN_TOKEN = 16;

/** The default of {@link ConnectionLimits.maxStreamsPerConnection} (HTTP/2's customary 100). */
export const DEFAULT_MAX_STREAMS_PER_CONNECTION = 100;

/** Checks `limits`; throws `invalid_argument` naming the bad field. */
export function checkConnectionLimits(limits: ConnectionLimits): void {
  const check = (name: string, value: number | undefined, max: number): void => {
    if (value !== undefined && (!Number.isInteger(value) || value < 1 || value > max)) {
      throw new KdsError(
        "invalid_argument",
        `connection limit ${name} must be an integer from 1 to ${max}, got ${String(value)}`,
      );
    }
  };
  check("maxConnections", limits.maxConnections, 2 ** 31 - 1);
  check("idleTimeoutMs", limits.idleTimeoutMs, 2 ** 31 - 1);
  check("maxStreamsPerConnection", limits.maxStreamsPerConnection, 2 ** 31 - 1);
  check("authTimeoutMs", limits.authTimeoutMs, 2 ** 31 - 1);
  check("requestTimeoutMs", limits.requestTimeoutMs, 2 ** 31 - 1);
  check("maxConnectionsPerIdentity", limits.maxConnectionsPerIdentity, 2 ** 31 - 1);
}

/**
 * The soft limit on open file descriptors (`RLIMIT_NOFILE`) of this process,
 * read from /proc/self/limits; undefined where that file does not exist (not
 * Linux) or says "unlimited". Node exposes no getrlimit.
 */
export function openFilesSoftLimit(
  read: () => string = () => readFileSync("/proc/self/limits", "utf8"),
): number | undefined {
  let text: string;
  try {
    text = read();
  } catch {
    // No /proc (macOS, Windows, a sandbox): the caller falls back to a conservative assumption.
    return undefined;
  }
  const m = /^Max open files\s+(\S+)\s+(\S+)/m.exec(text);
  if (m === null) return undefined;
  const soft = Number(m[1]);
  return Number.isInteger(soft) && soft > 0 ? soft : undefined;
}

/** The default connection caps of a process and how they were chosen. */
export interface DefaultConnectionCaps {
  /** For the listener zones dial. */
  readonly zones: number;
  /** For each admin API listener. */
  readonly admin: number;
  /** The soft descriptor limit they were derived from (or the assumed one). */
  readonly softLimit: number;
  /** Whether `softLimit` was read (true) or assumed because it could not be (false). */
  readonly measured: boolean;
}

/** The soft limit assumed when it cannot be read: the common Linux and macOS default. */
const ASSUMED_SOFT_LIMIT = 1024;
/** The zone listener's default cap never exceeds this, however high the descriptor limit. */
const MAX_DEFAULT_ZONE_CONNECTIONS = 10_000;
/** The admin listener's default cap (CLI calls, browsers, Prometheus) never exceeds this. */
const MAX_DEFAULT_ADMIN_CONNECTIONS = 128;

/**
 * Caps that keep both listeners together below the soft descriptor limit,
 * with headroom (an eighth of it, at least 64) for the store's connections,
 * files, outgoing calls and the listening sockets themselves. `softLimit` is
 * what {@link openFilesSoftLimit} read; undefined assumes 1024.
 */
export function defaultConnectionCaps(softLimit: number | undefined): DefaultConnectionCaps {
  const soft = softLimit ?? ASSUMED_SOFT_LIMIT;
  const headroom = Math.max(64, Math.ceil(soft / 8));
  const usable = Math.max(2, soft - headroom);
  const admin = Math.max(1, Math.min(MAX_DEFAULT_ADMIN_CONNECTIONS, Math.floor(usable / 8)));
  const zones = Math.max(1, Math.min(MAX_DEFAULT_ZONE_CONNECTIONS, usable - admin));
  return { zones, admin, softLimit: soft, measured: softLimit !== undefined };
}

/** The servers of one listener, as `serveRoutes` builds them. */
export interface LimitedServers {
  /** The server that accepts connections (it may hand them to `h1` or `h2`). */
  readonly accepting: net.Server;
  readonly h1?: http.Server;
  readonly h2?: http2.Http2Server | http2.Http2SecureServer;
}

/** Options for `http2.createServer` / `createSecureServer` that enforce `limits`. */
export function http2ServerOptions(
  limits: ConnectionLimits | undefined,
): http2.ServerOptions & { handshakeTimeout?: number } {
  if (limits === undefined) return {};
  return {
    settings: {
      maxConcurrentStreams: limits.maxStreamsPerConnection ?? DEFAULT_MAX_STREAMS_PER_CONNECTION,
    },
    // TLS: a client that never finishes its handshake.
    handshakeTimeout: Math.min(limits.idleTimeoutMs, 120_000),
  };
}

/** Options for `http.createServer` that enforce `limits` (how often idle request heads are checked). */
export function http1ServerOptions(limits: ConnectionLimits | undefined): http.ServerOptions {
  if (limits === undefined) return {};
  const shortest = Math.min(
    limits.idleTimeoutMs,
    limits.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
  );
  return { connectionsCheckingInterval: Math.max(100, Math.min(30_000, Math.floor(shortest / 4))) };
}

/**
 * Enforces `limits` on a listener's servers (created with
 * {@link http2ServerOptions} and {@link http1ServerOptions}): the cap and
 * who is closed at it, the authentication deadline (when `authenticates`:
 * the listener's requests tell the returned guard when a connection
 * authenticated; otherwise every connection counts as authenticated), their
 * log lines and metrics, and the idle timeouts.
 */
export function limitConnections(
  servers: LimitedServers,
  limits: ConnectionLimits,
  authenticates: boolean,
): ConnectionGuard {
  checkConnectionLimits(limits);
  const { accepting, h1, h2 } = servers;
  const { listener, idleTimeoutMs, metrics } = limits;
  const guard = new ConnectionGuard({
    listener,
    maxConnections: limits.maxConnections,
    authTimeoutMs: limits.authTimeoutMs ?? DEFAULT_AUTH_TIMEOUT_MS,
    maxConnectionsPerIdentity: limits.maxConnectionsPerIdentity,
    setting: limits.setting,
    logger: limits.logger,
    metrics,
  });
  accepting.on("connection", (socket: net.Socket) => {
    if (guard.admit(socket) && !authenticates) guard.connection(socket).authenticated(undefined);
  });
  const headersTimeout = Math.min(
    idleTimeoutMs,
    limits.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
  );
  for (const server of [h1, h2]) {
    if (server === undefined) continue;
    // HTTP/1.1 (also the TLS server's HTTP/1.1 fallback): keep-alive sockets between requests, and slow request heads.
    const timeouts = server as { keepAliveTimeout?: number; headersTimeout?: number };
    timeouts.keepAliveTimeout = idleTimeoutMs;
    timeouts.headersTimeout = headersTimeout;
  }
  h2?.on("session", (session: http2.Http2Session) =>
    closeWhenIdle(session, idleTimeoutMs, () => metrics?.connection(listener, "idle_timeout")),
  );
  return guard;
}

/** How long an idle HTTP/2 connection told to close (GOAWAY) may take before it is cut. */
const IDLE_CLOSE_GRACE_MS = 1_000;
/** How long a client may keep sending on a stream whose response is complete before the stream is reset. */
const FINISHED_STREAM_GRACE_MS = 1_000;

/**
 * Resets `stream` (RST_STREAM NO_ERROR, RFC 9113 section 8.1) once its
 * response is complete and the client has not ended its side within a grace
 * period: a client that never ends its request (a zone stream that never
 * says hello, answered with goaway and trailers) would otherwise hold the
 * stream, and its connection, open forever.
 */
function resetWhenAnswered(stream: http2.ServerHttp2Stream): void {
  let timer: NodeJS.Timeout | undefined;
  const check = (): void => {
    if (stream.closed || stream.destroyed) return;
    // localClose: END_STREAM (the trailers) went out; until then the response is not complete.
    if (stream.state.localClose === 1) stream.close(http2constants.NGHTTP2_NO_ERROR);
    else timer = setTimeout(check, FINISHED_STREAM_GRACE_MS).unref();
  };
  // `on` (here and below): each fires once per stream or session, and `once` would hold a wrapper (about 110 bytes)
  // for the life of every zone's stream.
  stream.on("finish", () => {
    timer = setTimeout(check, FINISHED_STREAM_GRACE_MS).unref();
  });
  stream.on("close", () => clearTimeout(timer));
}

/** Closes `session` (GOAWAY, then cut) once it has had no open stream for `idleTimeoutMs`. */
function closeWhenIdle(
  session: http2.Http2Session,
  idleTimeoutMs: number,
  onIdle: () => void,
): void {
  let open = 0;
  /** When the session last became idle (no stream open). */
  let idleSince = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const wait = (ms: number): void => {
    // Timers run before the event loop reads sockets: setImmediate lets a lagging loop first read streams that already arrived.
    timer = setTimeout(() => setImmediate(closeIfIdle), ms);
    timer.unref();
  };
  const closeIfIdle = (): void => {
    if (open > 0 || session.closed || session.destroyed) return;
    // A timer may fire a fraction of a millisecond early (the loop's clock counts whole milliseconds).
    const left = idleTimeoutMs - (performance.now() - idleSince);
    if (left > 0) {
      wait(Math.ceil(left));
      return;
    }
    onIdle();
    session.close();
    setTimeout(() => {
      if (!session.destroyed) session.destroy();
    }, IDLE_CLOSE_GRACE_MS).unref();
  };
  const arm = (): void => {
    clearTimeout(timer);
    idleSince = performance.now();
    wait(idleTimeoutMs);
  };
  arm();
  session.on("stream", (stream: http2.ServerHttp2Stream) => {
    open += 1;
    clearTimeout(timer);
    resetWhenAnswered(stream);
    stream.on("close", () => {
      open -= 1;
      if (open === 0 && !session.closed && !session.destroyed) arm();
    });
  });
  session.on("close", () => clearTimeout(timer));
}
