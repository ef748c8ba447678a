/**
 * A zone control plane in one object: the dialer ({@link ZoneClient}) with
 * reconnects, and resource sync ({@link SyncEngine}) over every session.
 *
 * @module
 */
import { consoleLogger, type Logger } from "../log.ts";
import type { SessionOptions } from "../mux/options.ts";
import type { Session } from "../mux/views.ts";
import type { DiscoveryOptions } from "../discovery/types.ts";
import type { ResourceStore } from "../store/contract.ts";
import { InMemoryStore } from "../store/memory.ts";
import { authTypes, createTypeRegistry } from "../kinds/builtin-types.ts";
import { SyncEngine } from "../sync/engine.ts";
import type { TypeRegistry } from "../kinds/resource-types.ts";
import type { ZoneStatus } from "../observe/zone-status.ts";
import { mirrorMapping } from "../sync/store-sink.ts";
import type { MuxTransport } from "../transport/transport.ts";
import type { BackoffOptions } from "../util/backoff.ts";
import { ZoneClient, type RetryInfo } from "./zone-client.ts";
import type { Metrics } from "../metrics.ts";
import type { ConnectRouter } from "@connectrpc/connect";
import { instrumentStore } from "../observe/store.ts";

/** Options of {@link ZoneControlPlane}. */
export interface ZoneControlPlaneOptions {
  /** The zone's name. */
  readonly name: string;
  /** How to reach the global. */
  readonly transport: MuxTransport;
  /** The zone token presented to the global on every dial (see `ZoneClientOptions.token`). */
  readonly token?: string | (() => string | Promise<string>);
  /**
   * Registered types. Default: Zone only; the zone then learns the global's
   * kinds when it connects (and can store them only from then on). Kinds
   * given here must agree with the global's, or the zone is refused.
   */
  readonly types?: TypeRegistry;
  /** The store. Default: an {@link InMemoryStore}. */
  readonly store?: ResourceStore;
  /** How the zone subscribes to global resources. Default "delta". */
  readonly mode?: "delta" | "sotw";
  /** Session tunables. */
  readonly session?: SessionOptions;
  /** Discovery tunables. */
  readonly discovery?: DiscoveryOptions;
  /** Reconnect backoff. */
  readonly backoff?: BackoffOptions;
  /** The most a zone waits before it dials again when the global asked it to reconnect (see `ZoneClientOptions.reconnectJitterMs`). */
  readonly reconnectJitterMs?: number;
  /** Delays between retries of a failed store read. */
  readonly storeRetry?: BackoffOptions;
  /** Called with every new session, after sync attached to it. A throw is logged and changes nothing. */
  readonly onSession?: (session: Session) => void;
  /** Called before every retry. */
  readonly onRetry?: (info: RetryInfo) => void;
  /** Where to log. */
  readonly logger?: Logger;
  /** Random source for the backoff jitter. */
  readonly random?: () => number;
  /**
   * Where sessions, frames, discovery events, sync lag and store latency are
   * reported (for example a `PrometheusMetrics`). Default: nowhere.
   */
  readonly metrics?: Metrics;
  /**
   * Connect services the global may call inside the session (for example
   * `(router) => registerAdmin(router, zoneAdminBackend(zone))`, which `kds-mux zone`
   * does). Default: none.
   */
  readonly reverseCalls?: (router: ConnectRouter) => void;
}

/** A zone control plane: dialing, reconnects and sync. */
export class ZoneControlPlane {
  /** Registered types. */
  readonly types: TypeRegistry;
  /** The zone's store. */
  readonly store: ResourceStore;
  /** The dialer. */
  readonly client: ZoneClient;
  /** Resource sync over each session. */
  readonly sync: SyncEngine;
  readonly #name: string;
  /** Where this zone logs (the `logger` option, or the console). */
  readonly logger: Logger;

  /** @param options - name, transport, types, store */
  constructor(options: ZoneControlPlaneOptions) {
    const logger = options.logger ?? consoleLogger();
    this.logger = logger;
    this.types = options.types ?? createTypeRegistry();
    const store = options.store ?? new InMemoryStore(this.types);
    this.store = options.metrics === undefined ? store : instrumentStore(store, options.metrics);
    this.#name = options.name;
    // The store may hold this zone's admin-token keys and revocations (kds-mux zone keeps them there).
    for (const t of authTypes) if (this.types.find(t.kind) === undefined) this.types.register(t);
    this.sync = new SyncEngine({
      store: this.store,
      types: this.types,
      role: "zone",
      name: options.name,
      mode: options.mode,
      discovery: options.discovery,
      storeRetry: options.storeRetry,
      logger,
      metrics: options.metrics,
    });
    this.client = new ZoneClient({
      name: options.name,
      transport: options.transport,
      token: options.token,
      session: options.session,
      backoff: options.backoff,
      reconnectJitterMs: options.reconnectJitterMs,
      logger,
      random: options.random,
      metrics: options.metrics,
      reverseCalls: options.reverseCalls,
      onRetry: options.onRetry,
      onSession: (session) => {
        // Sync first: a user callback that throws must not stop it.
        void this.sync.attach(session, { zone: options.name, mapping: mirrorMapping() });
        try {
          options.onSession?.(session);
        } catch (error) {
          logger.error(`the onSession callback failed in zone "${options.name}"; sync goes on`, {
            error,
          });
        }
      },
    });
  }

  /** This zone's connection and sync status. */
  status(): ZoneStatus {
    return this.sync.status(this.#name);
  }

  /** Syncs with the global, reconnecting after every end, until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    this.sync.start(signal);
    await this.client.run(signal);
  }
}
