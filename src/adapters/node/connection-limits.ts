/**
 * Bounds on the connections a node listener holds, so idle or silent clients
 * cannot exhaust the process's file descriptors: a cap on open connections
 * (new ones beyond it are closed at once; open ones are never evicted), an
 * idle timeout for HTTP/2 connections without a stream and HTTP/1.1
 * keep-alive sockets without a request, a bound on concurrent streams per
 * HTTP/2 connection, and defaults derived from the soft `RLIMIT_NOFILE`.
 * Reaching the cap is logged once per burst and counted in metrics.
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
import type { ListenerName, Metrics } from "../../observe/metrics.ts";
import { BurstLog } from "../../util/burst-log.ts";

/** How many connections a listener holds and for how long an idle one stays. */
export interface ConnectionLimits {
  /** Which listener this is, for logs and metrics. */
  readonly listener: ListenerName;
  /** Most connections open at once; a connection beyond it is closed as soon as it is accepted. */
  readonly maxConnections: number;
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

/** The default of {@link ConnectionLimits.maxStreamsPerConnection} (HTTP/2's customary 100). */
export const DEFAULT_MAX_STREAMS_PER_CONNECTION = 100;

/** Checks `limits`; throws `invalid_argument` naming the bad field. */
export function checkConnectionLimits(limits: ConnectionLimits): void {
  const check = (name: string, value: number | undefined, max: number): void => {
    if (value !== undefined && (!Number.isInteger(value) || value < 1 || value > max)) {
      throw new KdsError("invalid_argument", `connection limit ${name} must be an integer from 1 to ${max}, got ${String(value)}`);
    }
  };
  check("maxConnections", limits.maxConnections, 2 ** 31 - 1);
  check("idleTimeoutMs", limits.idleTimeoutMs, 2 ** 31 - 1);
  check("maxStreamsPerConnection", limits.maxStreamsPerConnection, 2 ** 31 - 1);
}

/**
 * The soft limit on open file descriptors (`RLIMIT_NOFILE`) of this process,
 * read from /proc/self/limits; undefined where that file does not exist (not
 * Linux) or says "unlimited". Node exposes no getrlimit.
 */
export function openFilesSoftLimit(read: () => string = () => readFileSync("/proc/self/limits", "utf8")): number | undefined {
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
export function http2ServerOptions(limits: ConnectionLimits | undefined): http2.ServerOptions & { handshakeTimeout?: number } {
  if (limits === undefined) return {};
  return {
    settings: { maxConcurrentStreams: limits.maxStreamsPerConnection ?? DEFAULT_MAX_STREAMS_PER_CONNECTION },
    // TLS: a client that never finishes its handshake.
    handshakeTimeout: Math.min(limits.idleTimeoutMs, 120_000),
  };
}

/** Options for `http.createServer` that enforce `limits` (how often idle request heads are checked). */
export function http1ServerOptions(limits: ConnectionLimits | undefined): http.ServerOptions {
  if (limits === undefined) return {};
  return { connectionsCheckingInterval: Math.max(100, Math.min(30_000, Math.floor(limits.idleTimeoutMs / 4))) };
}

/**
 * Enforces `limits` on a listener's servers (created with
 * {@link http2ServerOptions} and {@link http1ServerOptions}): the cap, its
 * log line and metrics, and the idle timeouts.
 */
export function limitConnections(servers: LimitedServers, limits: ConnectionLimits): void {
  checkConnectionLimits(limits);
  const { accepting, h1, h2 } = servers;
  const { listener, idleTimeoutMs, metrics, logger } = limits;
  accepting.maxConnections = limits.maxConnections;
  const refusals = new BurstLog((count, windowMs) =>
    logger?.warn(
      count === 1 && windowMs === 0
        ? `the ${listener} listener holds ${limits.maxConnections} connections (${limits.setting ?? "maxConnections"}): new connections are closed at once until some close; open ones are kept. Further refusals are logged at most every 10 s and counted in kds_connections_refused_total{listener="${listener}"}`
        : `the ${listener} listener refused ${count} more connections in the last ${Math.round(windowMs / 1000)} s at its cap of ${limits.maxConnections} (${limits.setting ?? "maxConnections"})`,
      { listener, limit: limits.maxConnections, refused: count },
    ),
  );
  // Node closes a connection beyond maxConnections as soon as it accepts it, and says so with 'drop'.
  accepting.on("drop", () => {
    metrics?.connection(listener, "refused");
    refusals.note();
  });
  accepting.on("connection", (socket: net.Socket) => {
    metrics?.connection(listener, "opened");
    socket.once("close", () => metrics?.connection(listener, "closed"));
  });
  for (const server of [h1, h2]) {
    if (server === undefined) continue;
    // HTTP/1.1 (also the TLS server's HTTP/1.1 fallback): keep-alive sockets between requests, and slow request heads.
    const timeouts = server as { keepAliveTimeout?: number; headersTimeout?: number };
    timeouts.keepAliveTimeout = idleTimeoutMs;
    timeouts.headersTimeout = idleTimeoutMs;
  }
  h2?.on("session", (session: http2.Http2Session) => closeWhenIdle(session, idleTimeoutMs, () => metrics?.connection(listener, "idle_timeout")));
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
  stream.once("finish", () => {
    timer = setTimeout(check, FINISHED_STREAM_GRACE_MS).unref();
  });
  stream.once("close", () => clearTimeout(timer));
}

/** Closes `session` (GOAWAY, then cut) once it has had no open stream for `idleTimeoutMs`. */
function closeWhenIdle(session: http2.Http2Session, idleTimeoutMs: number, onIdle: () => void): void {
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
    if (left > 0) return wait(Math.ceil(left));
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
    stream.once("close", () => {
      open -= 1;
      if (open === 0 && !session.closed && !session.destroyed) arm();
    });
  });
  session.once("close", () => clearTimeout(timer));
}
