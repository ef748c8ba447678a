/**
 * `kds-mux global` and `kds-mux zone`: the two control planes as processes.
 * The global has two listeners: the zone-facing one (mux and half-duplex
 * only) and the admin API's; a zone has its admin API's.
 *
 * @module
 */
import { startTracing } from "./tracing.ts";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import type { Transport } from "@connectrpc/connect";
import {
  adminListenerAuthorizer,
  adminListenerInterceptor,
  authorizedReads,
  registerAdminRoutes,
} from "../admin/admin-routes.ts";
import type { AdminBackend } from "../admin/admin-service.ts";
import { registerAdmin } from "../admin/admin-service.ts";
import { serveGlobal, serveRoutes, type ServedGlobal } from "../adapters/node/serve-global.ts";
import type { ConnectionLimits } from "../adapters/node/connection-limits.ts";
import { windowedSessionManager } from "../adapters/node/http2-windows.ts";
import { fetchFallback, type OptionalFetchHandler } from "../adapters/node/fetch-fallback.ts";
import { isLoopback } from "../auth/admin-authorizer.ts";
import { TokenAuthority } from "../auth/token-authority.ts";
import { insecureZoneAuthenticator } from "../auth/zone-authenticator.ts";
import { observeHandler } from "../observe/http.ts";
import { fanOutMetrics, type Metrics } from "../metrics.ts";
import { PrometheusMetrics } from "../observe/prometheus.ts";
import { StatusFeed } from "../observe/status-feed.ts";
import { STATUS_PAGE_HTML } from "../observe/status-page-html.ts";
import type { ZoneStatus } from "../observe/zone-status.ts";
import { KdsError } from "../errors.ts";
import { GlobalControlPlane } from "../global/global-control-plane.ts";
import type { Logger } from "../log.ts";
import {
  grpcMuxTransport,
  type GrpcMuxTransportOptions,
} from "../adapters/node/grpc-mux-client.ts";
import { connectMuxTransport } from "../transport/connect.ts";
import { failoverMuxTransport } from "../transport/failover.ts";
import { halfDuplexMuxTransport } from "../transport/half-duplex/client.ts";
import type { MuxTransport } from "../transport/transport.ts";
import { ZoneControlPlane } from "../zone/zone-control-plane.ts";
import { parseByteSize, parseListen } from "./address.ts";
import { refuseZoneStreamOnAdmin } from "./zone-stream-paths.ts";
import { DEFAULT_MEMORY_BUDGET_BYTES, MemoryBudget } from "../mux/budget.ts";
import { MAX_WINDOW_BYTES, resolveSessionOptions, type SessionOptions } from "../mux/options.ts";
import { resolveConnectionLimits, type ConnectionFlags } from "./connection-flags.ts";
import { globalKinds, zoneKinds } from "./kinds-file.ts";
import { aborted } from "./signals.ts";
import { drainRoute, drainWithin } from "./drain.ts";
import { isDialable, rebalanceOption, type RebalanceFlags } from "./rebalance-flags.ts";
import { resetGuardOption, type OfflineFlags, type ResetGuardFlags } from "./offline-flags.ts";
import {
  probeHandler,
  readinessOf,
  StoreHealth,
  PROBE_PATHS,
  type Readiness,
} from "../observe/probes.ts";
import { anySignal } from "../util/abort.ts";
import { isSharedStore, openCliStore, type StoreChoice } from "./store-option.ts";
import { readTokenFile, writeSecretFile } from "./secret-files.ts";
import { isLeaseStore } from "../store/lease.ts";
import { hostname } from "node:os";
import type { TokenExpiryFlags } from "./token-expiry-flag.ts";
import { heartbeatSession, type HeartbeatFlags } from "./heartbeat-flags.ts";
import { ignoreHangup, ReloadingTls, type TlsMaterial } from "./tls-reload.ts";
import { globalAdminBackend, zoneAdminBackend } from "../admin/role-backends.ts";

/** How long a stopping global waits for the offline records of the zones it held before it closes its store. */
const RELEASE_WAIT_MS = 10_000;

/** TLS flags of a listener: PEM files. */
export interface TlsFlags {
  /** --tls-cert: the server's certificate chain. */
  readonly tlsCert?: string;
  /** --tls-key: its private key. */
  readonly tlsKey?: string;
}

/** Options of `kds-mux global`. */
export interface GlobalCommandOptions
  extends TlsFlags,
    StoreChoice,
    ConnectionFlags,
    RebalanceFlags,
    OfflineFlags,
    ResetGuardFlags,
    TokenExpiryFlags,
    HeartbeatFlags {
  /** Zone-facing address (mux and half-duplex). */
  readonly listen: string;
  /** Admin API address. */
  readonly adminListen: string;
  /** Where to write a first admin token when the admin listener is not loopback. */
  readonly adminTokenFile?: string;
  /** --client-ca: admit zones by client certificates this CA signed (mutual TLS). */
  readonly clientCa?: string;
  /** --insecure-no-zone-auth: trust client-id (development only). */
  readonly insecureNoZoneAuth?: boolean;
  /** A kinds file (see kinds-file.ts); the example kinds when omitted. */
  readonly kinds?: string;
  /** --max-session-buffer-bytes: the most inbound bytes one zone's session buffers (a byte size; default 16MiB). */
  readonly maxSessionBufferBytes?: string;
  /** --max-buffer-bytes: the most inbound bytes all sessions buffer together (a byte size; default 256MiB). */
  readonly maxBufferBytes?: string;
  /** --drain-timeout, in ms: how long a drain (SIGTERM, POST /drain) spreads the zones' reconnects over (drain.ts). Default 30 s. */
  readonly drainTimeout?: number;
  /** --otlp-endpoint: export trace spans over OTLP/HTTP to this URL (tracing.ts). */
  readonly otlpEndpoint?: string;
  readonly name: string;
  readonly logger: Logger;
  readonly signal: AbortSignal;
}

/**
 * The listener's TLS files (--tls-cert, --tls-key and, for the global,
 * --client-ca), read now and reloaded when they change or on SIGHUP until
 * `signal` aborts; undefined without TLS.
 */
function serverTls(
  flags: TlsFlags,
  clientCa: string | undefined,
  what: string,
  context: { logger: Logger; signal: AbortSignal },
): ReloadingTls | undefined {
  if ((flags.tlsCert === undefined) !== (flags.tlsKey === undefined))
    throw new KdsError(
      "invalid_argument",
      "--tls-cert and --tls-key go together: pass both, or neither",
    );
  if (clientCa !== undefined && flags.tlsCert === undefined)
    throw new KdsError(
      "invalid_argument",
      "--client-ca needs TLS: pass --tls-cert and --tls-key too",
    );
  if (flags.tlsCert === undefined || flags.tlsKey === undefined) return undefined;
  return new ReloadingTls(
    {
      cert: { file: flags.tlsCert, flag: "--tls-cert" },
      key: { file: flags.tlsKey, flag: "--tls-key" },
      ca: clientCa === undefined ? undefined : { file: clientCa, flag: "--client-ca" },
    },
    { what, logger: context.logger, signal: context.signal },
  );
}

/** Gives a TLS listener new material for its new connections (Node's setSecureContext); throws where the runtime lacks it. */
function setSecureContext(served: ServedGlobal, material: TlsMaterial): void {
  const server = served.server as Partial<Pick<import("node:tls").Server, "setSecureContext">>;
  if (typeof server.setSecureContext !== "function")
    throw new KdsError(
      "transport",
      `the server on ${served.url} cannot change its TLS certificate while running on this runtime`,
    );
  server.setSecureContext({
    cert: material.cert,
    key: material.key,
    ...(material.ca === undefined ? {} : { ca: material.ca }),
  });
}

/** Refuses a non-loopback admin listener without a file for its first admin token (before anything starts). */
function checkAdminListen(listen: string, tokenFile: string | undefined, flag: string): void {
  if (!isLoopback(parseListen(listen).host) && tokenFile === undefined) {
    throw new KdsError(
      "invalid_argument",
      `${flag} ${listen} is not a loopback address, so every admin call needs an admin token; pass --admin-token-file FILE and a first admin token (role admin) is written there`,
    );
  }
}

/**
 * Serves `backend`'s admin API on `listen`. Not loopback: every call needs
 * an admin token, and a first one is written to `tokenFile`.
 */
async function serveAdminApi(
  backend: AdminBackend,
  listen: string,
  options: {
    tls?: { key: string; cert: string };
    tokenFile?: string;
    flag: string;
    logger: Logger;
    observe?: OptionalFetchHandler;
    limits: ConnectionLimits;
    /** /livez and /readyz (observe/probes.ts), answered without credentials. */
    readiness: () => Readiness;
    /** POST /drain (admins only) calls it. */
    drain?: () => void;
  },
): Promise<ServedGlobal> {
  const { host, port } = parseListen(listen);
  const open = !isLoopback(host);
  checkAdminListen(listen, options.tokenFile, options.flag);
  const authorizer = adminListenerAuthorizer(backend, host);
  const served = await serveRoutes((router) => registerAdminRoutes(router, backend), {
    host,
    port,
    tls: options.tls,
    // h2c for the CLI; HTTP/1.1 beside it for browsers and Prometheus (TLS offers both by itself).
    httpVersion: "both",
    interceptors: [adminListenerInterceptor(backend, host)],
    // The same rule on the headers of every request (calls, pages, /metrics) before its body is read, so a caller without a valid
    // admin token (non-loopback) holds nothing: its connection is closed after --auth-timeout, and first at the cap.
    gate: async (request, signal) => {
      // Probes carry no credentials (a load balancer's or kubelet's); their bodies reveal only which condition is unmet.
      if (PROBE_PATHS.has(request.path)) return { authenticated: false };
      refuseZoneStreamOnAdmin(request.path, backend.role); // a zone that dialed the admin port learns which port to dial
      const principal = await authorizer.authorize(request.headers, signal);
      return { authenticated: true, identity: principal.tokenId };
    },
    // Its own cap: a flood on the zone listener never takes the admin API's connections.
    limits: options.limits,
    // The status page and /metrics follow the admin API's rules: any role may read them.
    fallback: fetchFallback(
      firstAnswer([
        probeHandler(options.readiness),
        ...(options.drain === undefined ? [] : [drainRoute(authorizer, options.drain)]),
        ...(options.observe === undefined ? [] : [authorizedReads(options.observe, backend, host)]),
      ]),
    ),
  });
  if (open && options.tokenFile !== undefined && backend.tokens !== undefined) {
    const issued = await backend.tokens.issueAdminToken("bootstrap", "admin");
    writeSecretFile(options.tokenFile, issued.token); // no whitespace: readers strip it, but the CLI writes none
    options.logger.info(
      `the admin API listens on ${served.url}, not loopback: every call needs an admin token; a first one (role admin, id ${issued.tokenId}) is in ${options.tokenFile}`,
    );
    if (options.tls === undefined)
      options.logger.warn(
        `the admin API on ${served.url} has no TLS: admin tokens cross the network in clear text; pass --tls-cert and --tls-key`,
      );
  }
  return served;
}

/** The first answer of `handlers`, asked in order (undefined when none owns the request). */
function firstAnswer(handlers: readonly OptionalFetchHandler[]): OptionalFetchHandler {
  return async (request) => {
    for (const handler of handlers) {
      const response = await handler(request);
      if (response !== undefined) return response;
    }
    return undefined;
  };
}

/**
 * The session byte windows and the memory budget of `--max-session-buffer-bytes`
 * and `--max-buffer-bytes`: each lane gets half the session's bytes, which must
 * hold the largest frame, and the budget must hold one session.
 */
export function bufferLimits(flags: { maxSessionBufferBytes?: string; maxBufferBytes?: string }): {
  session: SessionOptions;
  budget: MemoryBudget;
} {
  const perSession =
    flags.maxSessionBufferBytes === undefined
      ? undefined
      : parseByteSize(flags.maxSessionBufferBytes, "--max-session-buffer-bytes");
  const total =
    flags.maxBufferBytes === undefined
      ? DEFAULT_MEMORY_BUDGET_BYTES
      : parseByteSize(flags.maxBufferBytes, "--max-buffer-bytes");
  const defaults = resolveSessionOptions();
  const lane = perSession === undefined ? undefined : Math.floor(perSession / 2);
  if (lane !== undefined && lane < defaults.maxMessageBytes) {
    throw new KdsError(
      "invalid_argument",
      `--max-session-buffer-bytes ${flags.maxSessionBufferBytes ?? ""} is too small: each of a session's two lanes gets half, and a half must hold the largest frame (${defaults.maxMessageBytes} bytes), so pass at least ${2 * defaults.maxMessageBytes} (8MiB)`,
    );
  }
  if (lane !== undefined && lane > MAX_WINDOW_BYTES) {
    throw new KdsError(
      "invalid_argument",
      `--max-session-buffer-bytes ${flags.maxSessionBufferBytes ?? ""} is too large: at most ${2 * MAX_WINDOW_BYTES} (2GiB)`,
    );
  }
  const session: SessionOptions =
    lane === undefined ? {} : { requestWindowBytes: lane, responseWindowBytes: lane };
  const resolved = resolveSessionOptions(session);
  const sessionBytes = resolved.requestWindowBytes + resolved.responseWindowBytes;
  if (total < sessionBytes) {
    throw new KdsError(
      "invalid_argument",
      `--max-buffer-bytes ${flags.maxBufferBytes ?? ""} is smaller than one session's buffers (${sessionBytes} bytes, --max-session-buffer-bytes); pass at least that, ideally several times it`,
    );
  }
  return { session, budget: new MemoryBudget(total) };
}

/** Runs a global control plane until `signal` aborts. */
export async function runGlobal(options: GlobalCommandOptions): Promise<void> {
  const { host, port } = parseListen(options.listen);
  const buffers = bufferLimits(options);
  // Watched and reloaded while running (tls-reload.ts): new connections get the new files, established ones continue.
  const reloading = serverTls(options, options.clientCa, "the global's listeners", options);
  if (reloading === undefined) ignoreHangup(options.logger, options.signal);
  const tls =
    reloading === undefined
      ? undefined
      : { cert: reloading.current.cert as string, key: reloading.current.key as string };
  const clientCa = reloading?.current.ca;
  checkAdminListen(options.adminListen, options.adminTokenFile, "--admin-listen");
  let adminUrl = "<global-admin-url>";
  const types = globalKinds(options.kinds, options.logger);
  // The first SIGTERM (options.signal) or POST /drain starts the drain; the store and the control plane run until it is over.
  const running = new AbortController();
  const drainAsked = new AbortController();
  const stopping = anySignal([options.signal, drainAsked.signal]);
  let listening = false;
  let zoneUrl: string | undefined;
  // Before the control plane is made: its engine and sessions look for a tracer as they start.
  const tracing = await startTracing(options.otlpEndpoint, options.logger);
  const opened = await openCliStore(options, {
    name: options.name,
    types,
    logger: options.logger,
    signal: running.signal,
  });
  try {
    options.logger.info(`global "${options.name}" keeps its state in ${opened.description}`);
    const readiness = (): Readiness => {
      const state = global.readiness();
      return listening
        ? state
        : readinessOf(["starting: the zone listener is not open yet", ...state.reasons]);
    };
    const observe = observation("global", options.name, () => global.zoneStatuses(), {
      readiness,
      // kds_zones: the zones whose session this instance holds, and the offline ones (see PrometheusMetricsOptions.zones).
      counted: async () =>
        (await global.zoneStatuses()).filter(
          (z) => !z.online || z.instance === undefined || z.instance === global.ownership.instance,
        ),
    });
    const limits = resolveConnectionLimits(options, "global", options.logger, observe.metrics);
    const global: GlobalControlPlane = new GlobalControlPlane({
      id: options.name,
      types,
      store: opened.store,
      logger: options.logger,
      adminUrl: () => adminUrl,
      metrics: observe.metrics,
      authenticator: options.insecureNoZoneAuth === true ? insecureZoneAuthenticator() : undefined,
      clientCertificates: clientCa !== undefined,
      session: {
        ...buffers.session,
        handshakeTimeoutMs: options.helloTimeout,
        ...heartbeatSession(options),
      },
      memoryBudget: buffers.budget,
      maxHandshakes: options.maxHandshakes,
      maxHandshakesPerZone: options.maxHandshakesPerZone,
      // Only instances on one PostgreSQL server share zones; alone on memory or the embedded engine there is nothing to even out.
      rebalance: isSharedStore(options) ? rebalanceOption(options) : false,
      zoneUrl: () => zoneUrl,
      zoneStaleAfterMs: options.zoneStaleAfter,
      zoneExpireAfterMs: options.zoneExpireAfter,
      resetGuard: resetGuardOption(options, true) ?? false,
      tokenExpiryWarningMs: options.tokenExpiryWarning,
    });
    global.start(running.signal);
    const admin = await serveAdminApi(globalAdminBackend(global), options.adminListen, {
      tls,
      tokenFile: options.adminTokenFile,
      flag: "--admin-listen",
      logger: options.logger,
      observe: observe.handler,
      limits: limits.admin,
      readiness,
      drain: () => drainAsked.abort(new Error("POST /drain")),
    });
    adminUrl = admin.url;
    const served = await serveGlobal(global.server, {
      host,
      port,
      tls: tls === undefined ? undefined : { ...tls, clientCa },
      limits: limits.zones,
    });
    listening = true;
    zoneUrl = options.advertiseUrl ?? served.url;
    // Publish the address now rather than at the next lease period: until then no instance moves zones here.
    global.ownership.announce(running.signal).catch((error: unknown) => {
      if (!running.signal.aborted)
        options.logger.warn(
          "announcing this instance's zone address failed; the next announcement (every lease period) publishes it",
          { error },
        );
    });
    if (
      options.advertiseUrl === undefined &&
      isSharedStore(options) &&
      rebalanceOption(options) !== false &&
      !isDialable(served.url)
    )
      options.logger.warn(
        `rebalancing names this instance to zones by its listener's URL ${served.url}, which they cannot dial; set --advertise-url to the URL zones reach it by`,
      );
    reloading?.onReload((m) => {
      setSecureContext(served, { cert: m.cert, key: m.key, ca: m.ca });
      setSecureContext(admin, { cert: m.cert, key: m.key });
    });
    const proof =
      options.insecureNoZoneAuth === true
        ? "NOTHING (insecure)"
        : clientCa !== undefined
          ? "client certificates or zone tokens"
          : "zone tokens";
    options.logger.info(
      `global "${options.name}" listening on ${served.url} for zones (mux and half-duplex; zones prove themselves with ${proof}); admin API on ${admin.url} (status page at ${admin.url}/, metrics at ${admin.url}/metrics)`,
    );
    if (tls === undefined && !isLoopback(host))
      options.logger.warn(
        `zones dial ${served.url} without TLS: their tokens cross the network in clear text; pass --tls-cert and --tls-key`,
      );
    await aborted(stopping);
    const drainMs = options.drainTimeout ?? 30_000;
    options.logger.info(
      `draining (${stopping.reason instanceof Error ? stopping.reason.message : "stop"}): /readyz answers 503, no zone is admitted, and the zones are asked to reconnect to another instance over ${drainMs} ms; a second SIGTERM exits at once`,
    );
    await drainWithin(global, drainMs, options.logger);
    options.logger.info("shutting down: telling every zone left (goaway) and closing connections");
    await Promise.all([served.close(), admin.close()]);
    // The zones' leases say they went offline here before the store closes (each write failed or landed; bounded).
    const unwritten = await global.ownership.released(AbortSignal.timeout(RELEASE_WAIT_MS));
    if (unwritten > 0)
      options.logger.warn(
        `stopping with ${unwritten} zones' offline records not written after ${RELEASE_WAIT_MS} ms; their leases still say they are online here until another instance takes those zones, or until three lease periods after this instance's last announcement, when they read offline`,
      );
  } finally {
    running.abort(new Error("stopped"));
    await opened.close();
    await tracing?.stop();
  }
  options.logger.info("stopped");
}

/**
 * What a control plane's admin listener adds beside the admin API: Prometheus
 * metrics at /metrics and the live status page at / (with /status/events).
 * The listener serves HTTP/1.1 beside h2c so browsers and Prometheus reach it.
 */
function observation(
  role: "global" | "zone",
  name: string,
  zones: () => Promise<readonly ZoneStatus[]>,
  gauges: { readiness: () => Readiness; counted?: () => Promise<readonly ZoneStatus[]> },
): { metrics: Metrics; handler: OptionalFetchHandler } {
  const prometheus = new PrometheusMetrics({
    labels: role === "zone" ? { role, zone: name } : { role },
    zones: gauges.counted ?? zones,
    readiness: gauges.readiness,
  });
  const status = new StatusFeed({ role, name, zones, zone: role === "zone" ? name : undefined });
  return {
    metrics: fanOutMetrics(prometheus, status.metrics),
    handler: observeHandler({ metrics: prometheus, status, page: STATUS_PAGE_HTML }),
  };
}

/** The transports `kds-mux zone --transport` offers. */
export const zoneTransports = [
  "grpc",
  "grpc-connect",
  "grpc-web",
  "connect",
  "half-duplex",
] as const;

/** Options of `kds-mux zone`. */
export interface ZoneCommandOptions
  extends TlsFlags,
    StoreChoice,
    ResetGuardFlags,
    HeartbeatFlags,
    Pick<
      ConnectionFlags,
      "adminMaxConnections" | "idleTimeout" | "authTimeout" | "requestTimeout"
    > {
  readonly name: string;
  readonly global: string;
  readonly transport: string;
  /** This zone's admin API address. */
  readonly adminListen: string;
  /** Where to write a first admin token when the admin listener is not loopback. */
  readonly adminTokenFile?: string;
  /** --token-file: the zone token, re-read before every dial. */
  readonly tokenFile?: string;
  /** --ca-cert: the CA that signed the global's certificate. */
  readonly caCert?: string;
  /** --client-cert / --client-key: a client certificate for mutual TLS. */
  readonly clientCert?: string;
  readonly clientKey?: string;
  /** A kinds file (see kinds-file.ts); learned from the global when omitted. */
  readonly kinds?: string;
  /** --lease-duration, in ms: the replicas' lease on a shared store (default 10 s). */
  readonly leaseDuration?: number;
  /** --otlp-endpoint: export trace spans over OTLP/HTTP to this URL (tracing.ts). */
  readonly otlpEndpoint?: string;
  readonly logger: Logger;
  readonly signal: AbortSignal;
}

/** TLS material the zone's HTTP client uses. */
interface ClientTls {
  readonly ca?: string;
  readonly cert?: string;
  readonly key?: string;
}

/**
 * The grpc transport's options with getters reading `tls` when called: the
 * transport reads them at each new connection, so a reloaded file is used
 * from the next dial on (a spread of `tls` would copy today's values).
 */
function reloadingClientTls(tls: ClientTls, signal: AbortSignal): GrpcMuxTransportOptions {
  return Object.defineProperties({ signal } as GrpcMuxTransportOptions, {
    ca: { enumerable: true, get: () => tls.ca },
    cert: { enumerable: true, get: () => tls.cert },
    key: { enumerable: true, get: () => tls.key },
  });
}

/**
 * The zone's Connect transport of `kind` to `baseUrl`. Its HTTP/2 windows
 * match the zone's mux byte window (the default session options), so the
 * global can stream what the mux allows while the zone is busy applying
 * (see http2-windows.ts).
 */
function connectTransport(
  kind: string,
  baseUrl: string,
  nodeOptions: ClientTls | undefined,
): Transport {
  const sessionManager = windowedSessionManager(baseUrl, nodeOptions);
  switch (kind) {
    case "grpc-connect":
      return createGrpcTransport({ baseUrl, sessionManager });
    case "grpc-web":
      return createGrpcWebTransport({ baseUrl, httpVersion: "2", sessionManager });
    case "connect":
      return createConnectTransport({ baseUrl, httpVersion: "2", sessionManager });
    default:
      throw new KdsError(
        "invalid_argument",
        `--transport must be one of ${zoneTransports.join(", ")}, got "${kind}"`,
      );
  }
}

/** Runs a zone control plane until `signal` aborts. */
export async function runZone(options: ZoneCommandOptions): Promise<void> {
  // Several global instances: "--global URL1,URL2" fails over between them.
  const urls = options.global
    .split(",")
    .map((u) => u.trim())
    .filter((u) => u !== "");
  const parsed = urls.map((url) => {
    try {
      return new URL(url);
    } catch {
      throw new KdsError(
        "invalid_argument",
        `--global "${url}" is not a URL; use for example https://global.example:5685 (or several, comma-separated)`,
      );
    }
  });
  if (urls.length === 0)
    throw new KdsError(
      "invalid_argument",
      "--global needs at least one URL, for example https://global.example:5685",
    );
  if ((options.clientCert === undefined) !== (options.clientKey === undefined))
    throw new KdsError(
      "invalid_argument",
      "--client-cert and --client-key go together: pass both, or neither",
    );
  const tlsFlags = options.caCert !== undefined || options.clientCert !== undefined;
  if (tlsFlags && parsed.some((u) => u.protocol !== "https:"))
    throw new KdsError(
      "invalid_argument",
      `--ca-cert and --client-cert need an https:// --global, got ${options.global}`,
    );
  // Watched and reloaded while running (tls-reload.ts); the grpc transport reads them at each new connection.
  const reloading = tlsFlags
    ? new ReloadingTls(
        {
          ca:
            options.caCert === undefined ? undefined : { file: options.caCert, flag: "--ca-cert" },
          cert:
            options.clientCert === undefined
              ? undefined
              : { file: options.clientCert, flag: "--client-cert" },
          key:
            options.clientKey === undefined
              ? undefined
              : { file: options.clientKey, flag: "--client-key" },
        },
        {
          what: `zone "${options.name}"'s connection to the global`,
          logger: options.logger,
          signal: options.signal,
        },
      )
    : undefined;
  const clientTls: ClientTls = {
    get ca() {
      return reloading?.current.ca;
    },
    get cert() {
      return reloading?.current.cert;
    },
    get key() {
      return reloading?.current.key;
    },
  };
  const nodeOptions = tlsFlags ? clientTls : undefined;
  if (options.tokenFile !== undefined) readTokenFile(options.tokenFile); // fail now on a missing file, not at the first dial
  const dial = (url: string): MuxTransport =>
    options.transport === "half-duplex"
      ? // Unary and server-streaming calls only: for proxies that break bidi streams.
        halfDuplexMuxTransport(
          createConnectTransport({
            baseUrl: url,
            httpVersion: "2",
            sessionManager: windowedSessionManager(url, nodeOptions),
          }),
          { target: url },
        )
      : options.transport === "grpc"
        ? // Plain gRPC on node:http2, without connect-node's client pipeline (grpc-connect is connect-node's); its HTTP/2 windows are the mux's byte window too.
          grpcMuxTransport(
            url,
            nodeOptions === undefined
              ? { signal: options.signal }
              : reloadingClientTls(nodeOptions, options.signal),
          )
        : connectMuxTransport(connectTransport(options.transport, url, nodeOptions), {
            name: options.transport,
            target: url,
          });
  // A goaway RECONNECT naming an instance outside --global is followed once, with the same TLS and token (see failover.ts).
  const transport = failoverMuxTransport(urls.map(dial), { targets: urls, follow: dial });
  const tokenFile = options.tokenFile;
  checkAdminListen(options.adminListen, options.adminTokenFile, "--admin-listen");
  // Replicas share a PostgreSQL server; the embedded engine and memory belong to one process, which always leads.
  const replicated = isSharedStore(options);
  if (options.leaseDuration !== undefined && !replicated)
    throw new KdsError(
      "invalid_argument",
      "--lease-duration is the lease of zone replicas on one PostgreSQL server (--store postgres://...); with the embedded or memory store one process is the zone and always leads: drop --lease-duration",
    );
  const types = zoneKinds(options.kinds, options.name, options.logger);
  // Before the control plane is made: its engine and sessions look for a tracer as they start.
  const tracing = await startTracing(options.otlpEndpoint, options.logger);
  const opened = await openCliStore(options, {
    name: options.name,
    types,
    logger: options.logger,
    signal: options.signal,
    owner: `kds-mux zone "${options.name}" with its admin API on ${options.adminListen}`,
  });
  try {
    options.logger.info(`zone "${options.name}" keeps its state in ${opened.description}`);
    let adminUrl: string | undefined;
    const lease = replicated && isLeaseStore(opened.store) ? opened.store : undefined;
    const zoneReadiness = (): Readiness => ({
      ...readinessOf([
        options.signal.aborted ? "stopping: the zone shuts down" : undefined,
        storeHealth.reason(),
      ]),
      ...(lease === undefined ? {} : { role: zone.role }),
    });
    const observe = observation("zone", options.name, () => Promise.resolve([zone.status()]), {
      readiness: zoneReadiness,
    });
    const zone: ZoneControlPlane = new ZoneControlPlane({
      lease,
      leaseDurationMs: options.leaseDuration,
      leaseHolder: `${hostname()}/${process.pid}/${crypto.randomUUID().slice(0, 8)}`,
      leaseAddress: () => adminUrl,
      name: options.name,
      transport,
      types,
      store: opened.store,
      token: tokenFile === undefined ? undefined : () => readTokenFile(tokenFile),
      logger: options.logger,
      metrics: observe.metrics,
      // The global may call the zone's own admin API inside the session (get --zone, inspect zone).
      reverseCalls: (router) => registerAdmin(router, zoneAdminBackend(zone)),
      resetGuard: resetGuardOption(options, false),
      session: heartbeatSession(options),
    });
    if (tokenFile === undefined && clientTls.cert === undefined) {
      options.logger.warn(
        `zone "${options.name}" presents no credential (no --token-file, no --client-cert): only a global started with --insecure-no-zone-auth admits it`,
      );
    }
    // The zone signs its own admin tokens, with a key kept in its own store (shared by its replicas, unfenced: any replica may issue).
    const backend = {
      ...zoneAdminBackend(zone),
      tokens: new TokenAuthority({
        store: opened.store,
        issuer: options.name,
        logger: options.logger,
      }),
    };
    const limits = resolveConnectionLimits(options, "zone", options.logger, observe.metrics);
    const storeHealth = new StoreHealth(zone.store, (error) =>
      options.logger.warn(
        "readiness: the store did not answer a check; /readyz answers 503 until it does",
        { error },
      ),
    );
    storeHealth.start(options.signal);
    const adminTls = serverTls(options, undefined, `zone "${options.name}"'s admin API`, options);
    if (adminTls === undefined && reloading === undefined)
      ignoreHangup(options.logger, options.signal);
    const served = await serveAdminApi(backend, options.adminListen, {
      tls:
        adminTls === undefined
          ? undefined
          : { cert: adminTls.current.cert as string, key: adminTls.current.key as string },
      tokenFile: options.adminTokenFile,
      flag: "--admin-listen",
      logger: options.logger,
      observe: observe.handler,
      limits: limits.admin,
      readiness: zoneReadiness,
    });
    adminUrl = served.url;
    adminTls?.onReload((m) => setSecureContext(served, m));
    options.logger.info(
      `zone "${options.name}" admin API listening on ${served.url} (status page at ${served.url}/, metrics at ${served.url}/metrics); ${lease === undefined ? "dialing" : "a replica on a shared store: it dials only while it leads,"} the global at ${options.global}`,
    );
    if (lease !== undefined && options.kinds === undefined)
      options.logger.warn(
        `zone "${options.name}" runs as a replica without --kinds: a standby knows only the kinds it learns from the global when it first leads, so until then its admin API cannot read them; pass --kinds (the same file on every replica)`,
      );
    await zone.run(options.signal);
    options.logger.info("shutting down");
    await served.close();
  } finally {
    await opened.close();
    await tracing?.stop();
  }
  options.logger.info("stopped");
}
