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
import type { ResetGuardOptions } from "../sync/reset-guard.ts";
import type { Clock } from "../util/clock.ts";
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
import type { LeaseStore } from "../store/lease.ts";
import { fencedStore } from "./fenced-store.ts";
import { Leadership } from "./leadership.ts";

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
  /**
   * The reset guard the other way (reset-guard.ts): when the global's first
   * exchange of a kind after connecting would delete more than `threshold`
   * (default 0.5) and at least `minimum` (default 10) of what this zone holds
   * of it from the global (a global whose store was lost, say), those
   * deletions are held and the zone keeps its copies until {@link
   * ZoneControlPlane.acceptReset} or `holdForMs`. Default: off.
   */
  readonly resetGuard?: ResetGuardOptions;
  /** Timers of the reset guard and of the lease. Default: the system clock. */
  readonly clock?: Clock;
  /**
   * Zone replicas: several processes of this zone on one shared store (the
   * same {@link PostgresStore}'s database, or one {@link InMemoryStore} in a
   * process) elect one leader through this lease store, usually the store
   * itself. Only the leader dials the global and writes what comes from it;
   * the others stand by, serve reads, refuse writes with `not_leader` naming
   * the leader's address, and take over when its lease expires. Every write
   * through {@link ZoneControlPlane.store} carries the leader's fence. Default:
   * none (this process always leads).
   */
  readonly lease?: LeaseStore;
  /**
   * The lease's duration in ms (default 10,000): a standby takes over within
   * about 1.1 times it of the leader's last renewal, and a leader that cannot
   * renew stops at two thirds of it (see leadership.ts).
   */
  readonly leaseDurationMs?: number;
  /** This replica's id among the zone's replicas. Default: a random UUID. */
  readonly leaseHolder?: string;
  /** The address published to the other replicas (this replica's admin API), read at each claim. */
  readonly leaseAddress?: () => string | undefined;
}

/** A zone control plane: dialing, reconnects and sync. */
export class ZoneControlPlane {
  /** Registered types. */
  readonly types: TypeRegistry;
  /** The zone's store (with a `lease`: a view whose writes carry the leader's fence, refused on a standby). */
  readonly store: ResourceStore;
  /** This replica's part in the zone's election; undefined without a `lease` (it always leads). */
  readonly leadership: Leadership | undefined;
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
    const measured =
      options.metrics === undefined ? store : instrumentStore(store, options.metrics);
    this.leadership =
      options.lease === undefined
        ? undefined
        : new Leadership({
            store: options.lease,
            name: options.name,
            holder: options.leaseHolder ?? crypto.randomUUID(),
            durationMs: options.leaseDurationMs,
            address: options.leaseAddress,
            logger,
            clock: options.clock,
          });
    this.store = this.leadership === undefined ? measured : fencedStore(measured, this.leadership);
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
      resetGuard: options.resetGuard,
      acceptResetHint: (zone) => `acceptReset(); kds-mux zone accept-reset ${zone}`,
      clock: options.clock,
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
      mayDial: this.leadership === undefined ? undefined : () => this.leadership?.leads() === true,
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

  /** This zone's name. */
  get name(): string {
    return this.#name;
  }

  /** This zone's connection and sync status (with a `lease`, this replica's part). */
  status(): ZoneStatus {
    const status = this.sync.status(this.#name);
    const state = this.leadership?.state;
    if (state === undefined || state.kind === "stopped") return status;
    return {
      ...status,
      leadership:
        state.kind === "leader"
          ? { role: "leader", term: state.lease.revision, leader: undefined }
          : {
              role: "standby",
              term: state.leader?.revision,
              leader:
                state.leader === undefined
                  ? undefined
                  : { holder: state.leader.holder, address: state.leader.address },
            },
    };
  }

  /** "leader" or "standby" with a `lease`; "leader" without one (this process always leads). */
  get role(): "leader" | "standby" {
    return this.leadership === undefined || this.leadership.leads() ? "leader" : "standby";
  }

  /**
   * Applies the deletions of global resources the reset guard holds in this
   * zone now; resolves with how many were deleted; throws `not_found` when
   * none are held.
   */
  acceptReset(signal?: AbortSignal): Promise<number> {
    return this.sync.acceptReset(this.#name, signal ?? new AbortController().signal);
  }

  /**
   * Syncs with the global, reconnecting after every end, until `signal`
   * aborts. With a `lease`: campaigns, and dials only while it leads.
   */
  async run(signal: AbortSignal): Promise<void> {
    this.sync.start(signal);
    if (this.leadership === undefined) await this.client.run(signal);
    else await this.leadership.run(signal, (term) => this.client.run(term));
  }
}
