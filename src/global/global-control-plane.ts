/**
 * A global control plane in one object: the mux endpoint ({@link GlobalServer})
 * admitting zones that prove their name with a zone token (or a client
 * certificate) and are registered as Zone resources, the token authority
 * that issues and revokes those tokens (keys and revocations in the store,
 * shared by every instance), resource sync ({@link SyncEngine}) over every
 * admitted session, and the Zone lifecycle (a disabled or deleted zone loses
 * its session; a deleted one its resources).
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { TokenAuthority } from "../auth/token-authority.ts";
import { TokenZoneAuthenticator, type ZoneAuthenticator } from "../auth/zone-authenticator.ts";
import { assertZoneName } from "../names.ts";
import type { DiscoveryOptions } from "../discovery/types.ts";
import { ZoneSpecSchema } from "../gen/kds/v1/resource_pb.ts";
import { consoleLogger, type Logger } from "../log.ts";
import type { MemoryBudget } from "../mux/budget.ts";
import type { SessionOptions } from "../mux/options.ts";
import type { SessionEnd } from "../mux/state.ts";
import type { Session } from "../mux/views.ts";
import type { ResourceStore } from "../store/contract.ts";
import { InMemoryStore } from "../store/memory.ts";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  GLOBAL_INSTANCE_KIND,
  ZONE_INSIGHT_KIND,
  ZONE_KIND,
  authTypes,
  createTypeRegistry,
  globalInstanceType,
  zoneInsightType,
} from "../kinds/builtin-types.ts";
import { SyncEngine } from "../sync/engine.ts";
import type { StoredResource, TypeRegistry } from "../kinds/resource-types.ts";
import type { ZoneStatus } from "../observe/zone-status.ts";
import { zoneMapping } from "../sync/store-sink.ts";
import type { BackoffOptions } from "../util/backoff.ts";
import { GlobalServer, type DrainOptions } from "./global-server.ts";
import { Rebalancer, type RebalanceOptions } from "./rebalancer.ts";
import { StoreZoneRegistry } from "./store-zone-registry.ts";
import { muxJsonRegistry } from "../kinds/json-registry.ts";
import { ZoneLifecycle } from "./zone-lifecycle.ts";
import { ZoneOwnership } from "./zone-ownership.ts";
import { ReplacementWatch } from "./zone-replacements.ts";
import { OfflineZones, type ZonePresence } from "./offline-zones.ts";
import type { ResetGuardOptions } from "../sync/reset-guard.ts";
import type { Clock } from "../util/clock.ts";
import { isAborted, raceAbort } from "../util/abort.ts";
import type { Metrics } from "../metrics.ts";
import { instrumentStore } from "../observe/store.ts";
import { readinessOf, StoreHealth, type Readiness } from "../observe/probes.ts";

/** Options of {@link GlobalControlPlane}. */
export interface GlobalControlPlaneOptions {
  /**
   * Registered types (`createTypeRegistry(yourKinds)`). Default: Zone only,
   * which syncs nothing. Read once: the kinds synced and announced to zones
   * are those registered when the control plane is created.
   */
  readonly types?: TypeRegistry;
  /** The store. Default: an {@link InMemoryStore}. */
  readonly store?: ResourceStore;
  /** This global's name (shown to zones). Default "global". */
  readonly id?: string;
  /**
   * This instance's id, unique among global instances sharing one store.
   * Default: the name and a random suffix.
   */
  readonly instance?: string;
  /**
   * How often this instance announces itself in the store (its
   * GlobalInstance record, one write per period however many zones it
   * holds). The leases of the zones it holds read online while that record
   * is renewed: once it is 3 periods old (a crashed instance), they read
   * offline. Default 10 s; instances sharing a store should use the same
   * period. (A lease itself is written when its session starts and ends,
   * and its details refreshed every 30 periods, at most 100 leases a period:
   * see `ZoneOwnership`.)
   */
  readonly leaseRenewMs?: number;
  /**
   * Evening out zones across the instances sharing the store (see
   * `Rebalancer`): on by default; `false` turns it off.
   */
  readonly rebalance?: RebalanceOptions | false;
  /**
   * The address zones dial to reach this instance, once known: announced in
   * its GlobalInstance record, and named by rebalancing to the zones it
   * moves here (an instance without one is sent none). It is announced at
   * start and every `leaseRenewMs`; when it becomes known later (once the
   * listener is open), call `ownership.announce()` to publish it at once.
   */
  readonly zoneUrl?: () => string | undefined;
  /** The admin API address shown to refused zones (a function when known only once listening). */
  readonly adminUrl?: string | (() => string);
  /**
   * Proves dialing zones. Default: zone tokens issued by {@link GlobalControlPlane.tokens}
   * (and client certificates when `clientCertificates` is set).
   */
  readonly authenticator?: ZoneAuthenticator;
  /** Also admit a zone by a verified client certificate that names it (mutual TLS; the rule of `certificateZone`), unless revoked. Default false. */
  readonly clientCertificates?: boolean;
  /**
   * Which global resources a zone receives. Default: all. Zone-to-zones
   * resources pass it only after their own rules: a zone never gets its own
   * back, nor those of a disabled zone.
   */
  readonly filter?: (zone: string, resource: StoredResource) => boolean;
  /** How the global subscribes to zone resources. Default "delta". */
  readonly mode?: "delta" | "sotw";
  /** Session tunables (their byte windows are each session's ceiling on buffered inbound bytes; `handshakeTimeoutMs`: how long an admitted zone stream may stay silent before its hello). */
  readonly session?: SessionOptions;
  /** The ceiling on inbound bytes all zone sessions buffer together. Default: 256 MiB (see `GlobalServerOptions.memoryBudget`). */
  readonly memoryBudget?: MemoryBudget;
  /** How many zone streams may be in admission or waiting for their hello at once (see `GlobalServerOptions.maxHandshakes`). */
  readonly maxHandshakes?: number;
  /** How many of those one zone may hold at once (see `GlobalServerOptions.maxHandshakesPerZone`). */
  readonly maxHandshakesPerZone?: number;
  /** Discovery tunables. */
  readonly discovery?: DiscoveryOptions;
  /** Delays between retries of a failed store read. */
  readonly storeRetry?: BackoffOptions;
  /** Called when a zone's session is ready, after sync attached to it. A throw is logged and changes nothing. */
  readonly onSession?: (session: Session) => void;
  /** Called when a zone's session ends. A throw is logged and changes nothing. */
  readonly onSessionEnded?: (session: Session, end: SessionEnd) => void;
  /** Where to log. */
  readonly logger?: Logger;
  /**
   * Where admissions, sessions, frames, discovery events, sync lag and store
   * latency are reported (for example a `PrometheusMetrics`). Default: nowhere.
   */
  readonly metrics?: Metrics;
  /**
   * A zone offline this long (ms) has its resources marked stale: they carry
   * `kds.io/origin-last-online`, shown on the global and (zone-to-zones
   * kinds) in the other zones, which keep getting them unless the kind's
   * `whenStale` is "withhold". Cleared when the zone connects again.
   * Default: never.
   */
  readonly zoneStaleAfterMs?: number;
  /** A zone offline this long (ms) has its resources deleted on the global (and so in the other zones). Default: never. */
  readonly zoneExpireAfterMs?: number;
  /**
   * The reset guard (reset-guard.ts): a zone whose first exchange of a kind
   * after connecting would delete more than `threshold` (default 0.5) and at
   * least `minimum` (default 10) of its resources of that kind here has those
   * deletions held, and the old copies served, until {@link
   * GlobalControlPlane.acceptReset} or `holdForMs` (default: never). On by
   * default; `false` turns it off.
   */
  readonly resetGuard?: ResetGuardOptions | false;
  /** Durations and timers of stale, expiry, the reset guard and credential expiry. Default: the system clock. */
  readonly clock?: Clock;
  /**
   * How long before a zone's credential (zone token, client certificate)
   * expires the global logs an error line about it; the session ends at
   * expiry (goaway TOKEN_EXPIRED), and the zone dials again with its renewed
   * credential. Default 24 hours.
   */
  readonly tokenExpiryWarningMs?: number;
  /** Wall clock in ms since the epoch, against which credentials expire (tests step it with `clock`). Default `Date.now`. */
  readonly now?: () => number;
}

/** A global control plane: admission, mux and sync. */
export class GlobalControlPlane {
  /** Registered types. */
  readonly types: TypeRegistry;
  /** The global's store. */
  readonly store: ResourceStore;
  /** The mux endpoint; mount it with `registerGlobal` or `serveGlobal`. */
  readonly server: GlobalServer;
  /** Resource sync over every zone session. */
  readonly sync: SyncEngine;
  /** Which instance holds each zone's session (shared through the store). */
  readonly ownership: ZoneOwnership;
  /** Issues, verifies and revokes zone and admin tokens; its keys and revocations live in the store. */
  readonly tokens: TokenAuthority;
  readonly #lifecycle: ZoneLifecycle;
  readonly #offline: OfflineZones;
  readonly #rebalancer: Rebalancer | undefined;
  /** Where this global logs (the `logger` option, or the console). */
  readonly logger: Logger;
  #started = false;
  readonly #storeHealth: StoreHealth;
  /** Zone names whose sessions keep replacing each other (zone-replacements.ts). */
  readonly #replacements: ReplacementWatch;

  /** @param options - types, store, names, callbacks */
  constructor(options: GlobalControlPlaneOptions = {}) {
    const logger = options.logger ?? consoleLogger();
    this.logger = logger;
    this.types = options.types ?? createTypeRegistry();
    this.types.get(ZONE_KIND);
    if (this.types.find(ZONE_INSIGHT_KIND) === undefined) this.types.register(zoneInsightType);
    if (this.types.find(GLOBAL_INSTANCE_KIND) === undefined)
      this.types.register(globalInstanceType);
    for (const t of authTypes) if (this.types.find(t.kind) === undefined) this.types.register(t);
    const store = options.store ?? new InMemoryStore(this.types);
    this.store = options.metrics === undefined ? store : instrumentStore(store, options.metrics);
    const id = options.id ?? "global";
    this.#replacements = new ReplacementWatch({ logger, clock: options.clock });
    this.tokens = new TokenAuthority({ store: this.store, issuer: id, logger });
    const adminUrl = options.adminUrl ?? "<global-admin-url>";
    this.sync = new SyncEngine({
      store: this.store,
      types: this.types,
      role: "global",
      name: id,
      mode: options.mode,
      discovery: options.discovery,
      storeRetry: options.storeRetry,
      logger,
      metrics: options.metrics,
      resetGuard: options.resetGuard ?? {},
      acceptResetHint: (zone) => `acceptReset("${zone}"); kds-mux zone accept-reset ${zone}`,
      clock: options.clock,
    });
    const filter = options.filter;
    this.ownership = new ZoneOwnership({
      store: this.store,
      instance: options.instance ?? `${id}-${crypto.randomUUID().slice(0, 8)}`,
      renewMs: options.leaseRenewMs,
      zoneUrl: options.zoneUrl,
      draining: () => this.server.draining,
      retry: options.storeRetry,
      logger,
    });
    this.server = new GlobalServer({
      registry: new StoreZoneRegistry(this.store, this.sync.zones),
      authenticator:
        options.authenticator ??
        new TokenZoneAuthenticator(this.tokens, {
          adminUrl: typeof adminUrl === "string" ? () => adminUrl : adminUrl,
          certificates: options.clientCertificates,
        }),
      id,
      adminUrl: options.adminUrl,
      session: options.session,
      memoryBudget: options.memoryBudget,
      maxHandshakes: options.maxHandshakes,
      maxHandshakesPerZone: options.maxHandshakesPerZone,
      logger,
      metrics: options.metrics,
      jsonRegistry: muxJsonRegistry(this.types),
      tokenExpiryWarningMs: options.tokenExpiryWarningMs,
      clock: options.clock,
      now: options.now,
      onSession: (session) => {
        // Sync first: a user callback that throws must not stop it.
        const zone = session.peerId;
        // Stale marks go before sync starts, so sync's own writes never race their removal.
        void this.#offline.connected(zone, session.signal).then(() =>
          this.sync.attach(session, {
            zone,
            mapping: zoneMapping(zone),
            filter: filter === undefined ? undefined : (r) => filter(zone, r),
          }),
        );
        this.ownership.claim(session).catch((error: unknown) => {
          logger.warn(
            `recording that this instance holds zone "${zone}" failed; the next renewal retries`,
            { zone, error },
          );
        });
        try {
          options.onSession?.(session);
        } catch (error) {
          logger.error(`the onSession callback failed for zone "${zone}"; sync goes on`, {
            zone,
            error,
          });
        }
      },
      onSessionEnded: (session, end) => {
        // A session closed for a newer one of its name, here or on another instance (zone-replacements.ts).
        // Noted here, for every session onSession saw, rather than by a chain on each session's `closed`.
        if (end.code === "replaced") this.#replacements.note(session.peerId);
        this.#offline.poke();
        options.onSessionEnded?.(session, end);
      },
    });
    this.#offline = new OfflineZones({
      store: this.store,
      types: this.types,
      staleAfterMs: options.zoneStaleAfterMs,
      expireAfterMs: options.zoneExpireAfterMs,
      clock: options.clock,
      metrics: options.metrics,
      logger,
      presence: (signal) => this.#presence(signal),
    });
    this.#storeHealth = new StoreHealth(this.store, (error) =>
      logger.warn(
        "readiness: the store did not answer a check; /readyz answers 503 until it does",
        { error },
      ),
    );
    this.#rebalancer =
      options.rebalance === false
        ? undefined
        : new Rebalancer({
            ...options.rebalance,
            instance: this.ownership.instance,
            instances: (signal) => this.ownership.instances(signal),
            leases: (signal) => this.ownership.holders(signal),
            sessions: () => this.server.sessions(),
            draining: () => this.server.draining,
            logger,
            metrics: options.metrics,
            clock: options.clock,
          });
    this.#lifecycle = new ZoneLifecycle({
      store: this.store,
      types: this.types,
      logger,
      retry: options.storeRetry,
      revoke: async (zone, reason) => {
        await this.server.revoke(
          zone,
          `zone "${zone}" was ${reason} on global "${this.server.id}"`,
        );
      },
      settled: (zone) => this.sync.settled(zone),
      zones: this.sync.zones,
      forgotten: (zone) => this.sync.forget(zone),
    });
  }

  /** Loads and follows the store (global resources, Zone changes, revocations) until `signal` aborts. */
  start(signal: AbortSignal): void {
    this.#started = true;
    this.#storeHealth.start(signal);
    this.sync.start(signal);
    this.#lifecycle.start(signal);
    this.#offline.start(signal);
    this.ownership.start(signal);
    void this.#rebalancer?.run(signal);
    this.server
      .followRevocations(signal)
      .catch((error: unknown) => this.logger.error("following revocations stopped", { error }));
  }

  /**
   * Whether this instance should get zones now: started, every kind loaded
   * from the store, the store answering, and not draining (see
   * `GlobalServer.drain`). The reasons name unmet conditions only (no
   * error details: probes answer without credentials); the store is checked
   * in the background (`StoreHealth`, a failure logged as a warning), so
   * this answers at once.
   */
  readiness(): Readiness {
    const kinds = this.sync.served();
    const unloaded = kinds.filter((k) => !k.loaded).length;
    return readinessOf([
      this.#started ? undefined : "starting: the control plane has not started",
      this.#started && unloaded > 0
        ? `starting: ${unloaded} of ${kinds.length} kinds not loaded from the store yet`
        : undefined,
      this.server.draining
        ? "draining: this instance hands its zones to other instances and admits none"
        : undefined,
      this.#started ? this.#storeHealth.reason() : undefined,
    ]);
  }

  /** Registers (or re-enables) zone `name`: writes its Zone resource, with `labels` (which zone selectors match). */
  registerZone(
    name: string,
    options: { enabled?: boolean; labels?: Record<string, string> } = {},
  ): Promise<StoredResource> {
    assertZoneName(name);
    return this.store.put({
      kind: ZONE_KIND,
      name,
      labels: options.labels,
      spec: create(ZoneSpecSchema, { enabled: options.enabled ?? true }),
    });
  }

  /**
   * Applies the deletions the reset guard holds for zone `zone` now (an
   * operator accepted the reset): the resources leave the global and the
   * zones it serves. Resolves with how many were deleted; throws `not_found`
   * when nothing is held for the zone on this instance (with several
   * instances, ask the one holding its session: `inspect zones` names it).
   */
  acceptReset(zone: string, signal?: AbortSignal): Promise<number> {
    return this.sync.acceptReset(zone, signal ?? new AbortController().signal);
  }

  /** Every registered zone: online anywhere (a session here, or a live lease of another instance), and when it was last online. */
  async #presence(signal: AbortSignal): Promise<Map<string, ZonePresence>> {
    const { resources } = await this.store.list(ZONE_KIND, { signal });
    const leases = await this.ownership.leases(signal);
    const out = new Map<string, ZonePresence>();
    for (const z of resources) {
      const name = z.meta.name;
      const lease = leases.get(name);
      const online = this.server.session(name) !== undefined || lease?.online === true;
      const gone = lease?.insight.disconnectedAt;
      out.set(name, {
        online,
        lastOnline: online || gone === undefined ? undefined : timestampDate(gone).getTime(),
      });
    }
    return out;
  }

  /** Status of one registered zone (undefined when not registered). */
  async zoneStatus(zone: string, signal?: AbortSignal): Promise<ZoneStatus | undefined> {
    return (await this.zoneStatuses(signal)).find((z) => z.zone === zone);
  }

  /**
   * Status of every registered zone, sorted by name, whichever instance
   * holds its session: full detail for zones connected here, the shared
   * lease (online, since when, heartbeat) for zones held by another instance.
   */
  async zoneStatuses(signal?: AbortSignal): Promise<ZoneStatus[]> {
    const { resources } = await this.store.list(ZONE_KIND, { signal });
    const leases = await this.ownership.leases(signal);
    return resources.map((z) => {
      const name = z.meta.name;
      const stale = this.#offline.stale(name);
      const synced = this.sync.status(name);
      const replaced = this.#replacements.status(name);
      // What rebalancing did with the zone here (asked to move, came back): see Rebalancer.zoneMoves.
      const moves = this.#rebalancer?.zoneMoves(name);
      const local = {
        ...synced,
        ...(stale === undefined ? {} : { stale }),
        ...(replaced === undefined ? {} : { replacements: replaced }),
        ...(moves === undefined ? {} : { moves }),
      };
      const credential = this.server.credentialExpiry(name);
      if (this.server.session(name) !== undefined)
        return {
          ...local,
          instance: this.ownership.instance,
          ...(credential === undefined ? {} : { credentialExpiry: credential }),
        };
      const lease = leases.get(name);
      if (lease === undefined) return local;
      const i = lease.insight;
      return {
        ...local,
        instance: lease.instance,
        online: lease.online,
        connectedAt: i.connectedAt === undefined ? local.connectedAt : timestampDate(i.connectedAt),
        disconnectedAt:
          i.disconnectedAt === undefined ? local.disconnectedAt : timestampDate(i.disconnectedAt),
        lastEnd:
          i.lastEndCode === "" ? local.lastEnd : { code: i.lastEndCode, message: i.lastEndMessage },
        heartbeatRttMs: i.heartbeatRttMs === 0 ? local.heartbeatRttMs : i.heartbeatRttMs,
        peer:
          i.protocolVersion === 0
            ? local.peer
            : {
                softwareVersion: i.softwareVersion,
                protocolVersion: i.protocolVersion,
                features: [...i.features],
              },
      };
    });
  }

  /**
   * Drains this instance (see `GlobalServer.drain`): it also tells the other
   * instances at once that it drains (its GlobalInstance record), so
   * rebalancing sends it no zones. It waits for that record to be written
   * until `options.signal` aborts at most; the write goes on after it, for
   * at most a lease period.
   */
  async drain(options: DrainOptions): Promise<number> {
    const drained = this.server.drain(options);
    // Bounded by a lease period, not by the drain's signal: that one ends the spread of the goaways, not the news of the drain
    // (under a storm of writes the announcement can wait in the store's write queue past it).
    const announced = this.ownership
      .announce(AbortSignal.timeout(this.ownership.renewMs))
      .catch((error: unknown) => {
        this.logger.warn(
          "telling the other instances that this one drains failed; its next announcement (every lease period) tells them",
          { error },
        );
      });
    // Waited for until the drain's deadline at most; past it, it goes on while the caller closes what is left.
    await raceAbort(announced, options.signal, "the drain's announcement").catch(
      (error: unknown) => {
        if (!isAborted(options.signal)) throw error;
      },
    );
    return drained;
  }

  /**
   * Ends every session; resolves when their transports are released and
   * the records that their zones went offline here are written or failed
   * (see `ZoneOwnership.released`), or when `signal` aborts. Close the store
   * after it.
   */
  async close(signal?: AbortSignal): Promise<void> {
    await this.server.close(signal);
    await this.ownership.released(signal);
  }
}
