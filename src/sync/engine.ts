/**
 * The one sync engine of both roles. Over every session it serves the kinds
 * this side owns (from a shared {@link SnapshotCache}) and subscribes to the
 * kinds the peer owns (into the local store through a {@link StoreSink}).
 * The global runs one per process and attaches every zone's session; a zone
 * runs one and attaches each session it dials. Every session starts with the
 * global's kind catalog: the global serves it, the zone learns the kinds it
 * lacks from it or refuses it (kinds-exchange.ts), and the global requests
 * the zone's kinds only once the zone has settled it (catalog-gate.ts).
 *
 * @module
 */
import { DiscoveryClient } from "../discovery/client.ts";
import { DiscoveryServer } from "../discovery/server.ts";
import { mergeLaidOut, SourceLayout } from "../discovery/static-source.ts";
import {
  defaultDiscoveryOptions,
  type DiscoveryOptions,
  type SnapshotSource,
} from "../discovery/types.ts";
import type { Logger } from "../log.ts";
import type { Session } from "../mux/views.ts";
import type { Metrics } from "../metrics.ts";
import { StreamMetrics } from "./sync-observers.ts";
import { streamObserver, type StreamObserverContext } from "./stream-observer.ts";
import type { ResourceStore } from "../store/contract.ts";
import type { BackoffOptions } from "../util/backoff.ts";
import { CatalogGate } from "./catalog-gate.ts";
import { KindAgreement } from "./kind-agreement.ts";
import { catalogSource, learnKinds } from "./kinds-exchange.ts";
import { crossZoneSends, KnownZones, zoneServes } from "./cross-zone.ts";
import { SelectorMemo, ZONES_LABEL, selectedFor } from "../kinds/zone-selector.ts";
import {
  sentBy,
  type ResourceType,
  type StoredResource,
  type TypeRegistry,
} from "../kinds/resource-types.ts";
import { SnapshotCache, type ServedKindState } from "./snapshot-cache.ts";
import {
  ALWAYS_NEEDS_ZONES,
  NEEDS_ZONES_WHEN_SELECTIVE,
  ZoneCacheSource,
} from "./zone-cache-source.ts";
import { ChangeTraces } from "./change-traces.ts";
import { ReceiveTraces, ServeTraces } from "./stream-traces.ts";
import { activeTracer } from "../observe/tracing.ts";
import type { ZoneStatus } from "../observe/zone-status.ts";
import { ZoneStatusRecord } from "./status.ts";
import { StoreSink, type SinkMapping } from "./store-sink.ts";
import {
  ResetGuard,
  resolveResetGuard,
  type ResetGuardOptions,
  type ResolvedResetGuardOptions,
} from "./reset-guard.ts";
import { KdsError } from "../errors.ts";
import { BurstLog } from "../util/burst-log.ts";
import { systemClock, type Clock } from "../util/clock.ts";

/** Bytes the mux adds around a discovery message in one frame (oneof tag and length, with room to spare). */
const MUX_FRAME_OVERHEAD = 64;

/** Options of {@link SyncEngine}. */
export interface SyncEngineOptions {
  /** This side's store. */
  readonly store: ResourceStore;
  /**
   * Registered types. The global reads them once (its catalog and served
   * kinds are fixed from then on); a zone registers the kinds it learns from
   * the global's catalog here.
   */
  readonly types: TypeRegistry;
  /**
   * Which side this is: the global serves global-to-zone kinds and the
   * zone-to-zones resources of the other zones; a zone serves zone-to-global
   * kinds and the zone-to-zones resources it made.
   */
  readonly role: "global" | "zone";
  /** This side's name, sent as the discovery node id. */
  readonly name: string;
  /** How this side subscribes to the peer's kinds. Default "delta". */
  readonly mode?: "delta" | "sotw";
  /** Discovery tunables. */
  readonly discovery?: DiscoveryOptions;
  /** Delays between retries of a failed store list or watch. */
  readonly storeRetry?: BackoffOptions;
  /** Where to log. */
  readonly logger: Logger;
  /** Where discovery events and sync lag are reported. Default: nowhere. */
  readonly metrics?: Metrics;
  /**
   * The reset guard over what this side receives (reset-guard.ts): a peer
   * whose first exchange of a kind after connecting would delete most of
   * what this side holds of it for the peer has those deletions held until
   * {@link SyncEngine.acceptReset} (or `holdForMs`). `false` or undefined: off.
   */
  readonly resetGuard?: ResetGuardOptions | false;
  /** How an operator accepts a held reset, for the log line. Default "acceptReset". */
  readonly acceptResetHint?: (zone: string) => string;
  /** Timers of the reset guard. Default {@link systemClock}. */
  readonly clock?: Clock;
}

/** One peer attached over a session. */
export interface SyncPeer {
  /** The zone's name (on both sides: the zone syncs as itself). */
  readonly zone: string;
  /** How the peer's resources map onto the local store. */
  readonly mapping: SinkMapping;
  /**
   * Which served resources this peer receives. Default: all. On the global,
   * resources pass it only after the zone selectors (the kind's `zones`, the
   * resource's `kds.io/zones` label) and, for zone-to-zones kinds, the rules
   * of that direction (never the zone's own, none of a disabled zone): see
   * {@link SyncEngine.zones}.
   */
  readonly filter?: (resource: StoredResource) => boolean;
}

/** Resource sync over sessions, for either role. */
export class SyncEngine {
  readonly #options: SyncEngineOptions;
  /** The served kinds: the given ones, then one cache per batch of kinds a zone learned; zone-to-zones kinds in caches of their own. */
  readonly #caches: { readonly cache: SnapshotCache; readonly crossZone: boolean }[] = [];
  /**
   * On the global: the registered zones, enabled or not and with their
   * labels. A disabled zone's zone-to-zones resources are withheld from the
   * other zones; zone selectors match the labels. Nothing of a zone-to-zones
   * kind, nor of a kind with a selector, is served until it is first
   * {@link KnownZones.reset}; a change re-evaluates every stream. The global
   * control plane keeps it from the Zone resources.
   */
  readonly zones: KnownZones;
  readonly #selectors = new SelectorMemo();
  /** The global's kind catalog; undefined on a zone. */
  readonly #catalog: SnapshotSource | undefined;
  /** How a zone squares the global's catalog with its kinds; undefined on the global. */
  readonly #agreement: KindAgreement | undefined;
  #started: AbortSignal | undefined;
  readonly #records = new Map<string, ZoneStatusRecord>();
  /** Per zone, the last attachment: a new one starts only after it finished, so an old session's late writes never land after a new session's resume. */
  readonly #attached = new Map<string, Promise<void>>();
  /** The reset guard, resolved; undefined when off. */
  readonly #resetGuard: ResolvedResetGuardOptions | undefined;
  /** Per zone, the reset guard of its running session. */
  readonly #guards = new Map<string, ResetGuard>();
  /** Responses too large to send, logged once per burst (every session of a large set reports it). */
  readonly #oversizedLog: BurstLog;
  /** The `kds.change` spans of served changes, while a tracing SDK was registered when the engine was made. */
  readonly #changes: ChangeTraces | undefined;
  /** Whether an origin zone's zone-to-zones resources are withheld (one function for every stream's filter). */
  readonly #withheld = (origin: string): boolean => this.zones.withheld(origin);
  /** Whether a kind's stale zone-to-zones resources are withheld (one function for every stream's filter). */
  readonly #withholdsStale = (kind: string): boolean =>
    this.#options.types.find(kind)?.whenStale === "withhold";
  /** The last oversized response reported, for {@link #oversizedLog}'s line. */
  #oversized = { peer: "", kind: "", key: "", bytes: 0, limit: 0 };
  /** The kinds a kind depends on (one function for every stream). */
  readonly #dependsOn = (typeUrl: string): readonly string[] =>
    this.#options.types.dependenciesOf(typeUrl);
  /** {@link SyncEngine.served}, for the zone status records (one function for every zone). */
  readonly #served = (): ServedKindState[] => this.served();
  /** A type URL's kind (one function for every stream). */
  readonly #kindOf = (url: string): string => this.#options.types.byTypeUrl(url)?.kind ?? url;
  /** A response too large to send, from any stream: kept for {@link #oversizedLog}'s line (one function for every stream). */
  readonly #noteOversized = (
    peer: string,
    kind: string,
    key: string,
    bytes: number,
    limit: number,
  ): void => {
    this.#oversized = { peer, kind, key, bytes, limit };
    this.#oversizedLog.note();
  };
  /** See {@link #layout}; undefined before the first stream. */
  #laidOut: { readonly caches: number; readonly layout: SourceLayout } | undefined;
  /** See {@link #observerContext}; undefined before the first stream. */
  #observing: StreamObserverContext | undefined;

  /** @param options - store, types, role */
  constructor(options: SyncEngineOptions) {
    this.#options = options;
    const tracer = activeTracer();
    this.#changes = tracer === undefined ? undefined : new ChangeTraces(tracer, options.role);
    this.#resetGuard =
      options.resetGuard === undefined || options.resetGuard === false
        ? undefined
        : resolveResetGuard(options.resetGuard);
    this.#oversizedLog = new BurstLog((count, windowMs) => {
      const o = this.#oversized;
      const what =
        o.key === "*" ? `the whole ${o.kind} set (state of the world)` : `${o.kind} "${o.key}"`;
      this.#options.logger.warn(
        count === 1 && windowMs === 0
          ? `${what}, ${o.bytes} bytes, is not sent to ${o.peer}: ${
              o.key === "*"
                ? `one response may hold ${o.limit} bytes and at most maxResponseResources resources, and a state-of-the-world set cannot be split; raise the discovery options maxMessageBytes or maxResponseResources on both sides, or sync in delta mode, which splits a set`
                : `the resource alone exceeds the ${o.limit} bytes one response may hold; raise the discovery option maxMessageBytes (and the session's) on both sides, or make the resource smaller`
            }. It is sent once it fits; further cases are logged at most every 10 s and listed as oversized in the zone's status`
          : `${count} more responses were too large to send in the last ${Math.round(windowMs / 1000)} s (last: ${what} to ${o.peer}, ${o.bytes} bytes)`,
        { kind: o.kind, key: o.key, bytes: o.bytes, limit: o.limit, count },
      );
    });
    this.zones = new KnownZones(() => {
      for (const c of this.#caches) c.cache.touch();
    });
    this.#serve(options.types.sentBy(options.role));
    this.#catalog = options.role === "global" ? catalogSource(options.types) : undefined;
    const refused = (error: { code: string; message: string }): void =>
      this.#record(options.name).failed("kinds_refused", error.message);
    this.#agreement =
      options.role === "zone"
        ? new KindAgreement(options.types, `zone "${options.name}"`, refused)
        : undefined;
  }

  /** Loads and follows the served kinds until `signal` aborts. */
  start(signal: AbortSignal): void {
    this.#started = signal;
    for (const c of this.#caches) c.cache.start(signal);
  }

  /** The store-facing state of each served kind. */
  served(): ServedKindState[] {
    return this.#caches.flatMap((c) => c.cache.state());
  }

  /** Serves `types` from caches of their own, zone-to-zones kinds apart (started now if the engine runs). */
  #serve(types: readonly ResourceType[]): void {
    for (const crossZone of [false, true]) {
      const some = types.filter((t) => (t.direction === "zone-to-zones") === crossZone);
      if (some.length === 0) continue;
      const serves = crossZone && this.#options.role === "zone" ? zoneServes : undefined;
      const selective =
        this.#options.role === "global"
          ? (r: StoredResource): boolean => r.meta.labels[ZONES_LABEL] !== undefined
          : undefined;
      const cache = new SnapshotCache(this.#options.store, some, {
        logger: this.#options.logger,
        retry: this.#options.storeRetry,
        serves,
        selective,
        fanOut: this.#changes === undefined ? undefined : this.#changes.fanOut,
      });
      this.#caches.push({ cache, crossZone });
      if (this.#started !== undefined) cache.start(this.#started);
    }
  }

  /**
   * The source of each cache for `peer`. On the global: zone selectors, the
   * rules of zone-to-zones kinds, then the peer's filter; a kind that needs
   * the zones is served only once they are known, and the filter costs a
   * pass only for kinds that need it (see `SnapshotCache.source`).
   */
  #sources(peer: SyncPeer): SnapshotSource[] {
    const user = peer.filter;
    if (this.#options.role !== "global") return this.#caches.map((c) => c.cache.source(user));
    const zone = peer.zone;
    const types = this.#options.types;
    const selected = (r: StoredResource): boolean =>
      selectedFor(
        zone,
        this.zones.labels(zone),
        types.find(r.kind)?.zones,
        r.meta.labels,
        this.#selectors,
      ) &&
      (user === undefined || user(r));
    // One scope for both filters of the stream, and the zone-to-zones test inline: every idle zone holds them.
    const cross = this.#caches.some((c) => c.crossZone)
      ? (r: StoredResource): boolean =>
          crossZoneSends(zone, r, this.#withheld, this.#withholdsStale) && selected(r)
      : selected;
    return this.#caches.map((c) => {
      // Shared functions, not closures per stream: every idle zone holds a source per cache.
      const needsZones = c.crossZone ? ALWAYS_NEEDS_ZONES : NEEDS_ZONES_WHEN_SELECTIVE;
      const inner = c.cache.source(
        c.crossZone ? cross : selected,
        user !== undefined ? ALWAYS_NEEDS_ZONES : needsZones,
      );
      return new ZoneCacheSource(inner, c.cache, this.zones, types, needsZones);
    });
  }

  /**
   * Runs sync over `session` until it ends, after any earlier session of the
   * same zone finished. Never rejects: a sync failure is logged and closes
   * the session, so the zone reconnects.
   */
  attach(session: Session, peer: SyncPeer): Promise<void> {
    const previous = this.#attached.get(peer.zone) ?? Promise.resolve();
    const running = previous.then(() =>
      session.end === undefined ? this.#run(session, peer) : undefined,
    );
    this.#attached.set(peer.zone, running);
    // A promise chain, not an async function awaiting `running`: that one's suspended frame lived as long as the session,
    // in every idle zone's (as do #run's and DiscoveryClient.run's).
    return running.finally(() => {
      if (this.#attached.get(peer.zone) === running) this.#attached.delete(peer.zone);
    });
  }

  /** Resolves once the attachment of `zone` (if any) has finished. */
  async settled(zone: string): Promise<void> {
    await this.#attached.get(zone);
  }

  /** The status of `zone` (offline and empty when it never connected), with its held reset if any. */
  status(zone: string): ZoneStatus {
    const status = this.#record(zone).snapshot();
    const held = this.#guards.get(zone)?.snapshot();
    return held === undefined ? status : { ...status, heldReset: held };
  }

  /**
   * Applies the deletions the reset guard holds for `zone`'s session now (an
   * operator accepted the reset); resolves with how many were deleted.
   * Throws `not_found` when nothing is held for it on this side.
   */
  async acceptReset(zone: string, signal: AbortSignal): Promise<number> {
    const guard = this.#guards.get(zone);
    if (guard?.snapshot() === undefined)
      throw new KdsError(
        "not_found",
        this.#options.role === "global"
          ? `no reset of zone "${zone}" is held here (its session is not on this instance, or its last exchange deleted less than the reset guard's threshold)`
          : "no reset of the global is held in this zone",
      );
    return guard.accept(signal);
  }

  /** Drops what is known about `zone` (it was deleted). */
  forget(zone: string): void {
    this.#records.delete(zone);
  }

  #run(session: Session, peer: SyncPeer): Promise<void> {
    const { logger } = this.#options;
    const record = this.#record(peer.zone);
    // Numbered: a replaced session of the zone still finishes its work after the next connected, and counts apart.
    const number = record.connected(() => session.stats().heartbeatRttMs, session.peer);
    const where =
      this.#options.role === "global"
        ? `with zone "${peer.zone}"`
        : `in zone "${peer.zone}" with the global`;
    const work = this.#sync(session, peer, record, number).catch(async (error: unknown) => {
      logger.error(`sync ${where} failed; closing the session so the zone reconnects`, {
        zone: peer.zone,
        error,
      });
      record.failed(
        "sync_failed",
        `sync ${where} failed: ${error instanceof Error ? error.message : String(error)}`,
      );
      await session.close({
        message: `sync failed ${where}: ${error instanceof Error ? error.message : String(error)}`,
      });
    });
    return session.closed.then((end) => {
      record.disconnected(end, number);
      return work;
    });
  }

  async #sync(
    session: Session,
    peer: SyncPeer,
    record: ZoneStatusRecord,
    number: number,
  ): Promise<void> {
    const { store, types, mode, discovery, logger, name } = this.#options;
    const node = { id: name, cluster: this.#options.role, userAgentName: "kds-mux" };
    if (this.#agreement !== undefined) {
      const learned = await learnKinds(session, this.#agreement, { zone: peer.zone, node, logger });
      if (learned === undefined) return; // the session ended
      if (learned.length > 0)
        this.#serve(learned.filter((t) => sentBy(this.#options.role, t.direction)));
      for (const type of learned) record.add(type);
    }
    const own = discovery?.maxMessageBytes ?? defaultDiscoveryOptions.maxMessageBytes;
    // Responses must fit what the peer accepts, not only what this side would send: its largest frame, and its whole byte
    // window on the response lane (a frame larger than the window could never be sent), whichever is smaller.
    const peerMax =
      session.peer === undefined
        ? undefined
        : Math.min(session.peer.maxMessageBytes, session.peer.responseWindowBytes);
    const maxMessageBytes =
      peerMax === undefined ? own : Math.min(own, peerMax - MUX_FRAME_OVERHEAD);
    // Without metrics nothing reports the stream's events: no lag clocks to keep (per session, they cost memory and a map write per change).
    const metrics = this.#options.metrics;
    const observed =
      metrics === undefined
        ? undefined
        : new StreamMetrics(
            metrics,
            this.#options.role === "global" ? peer.zone : session.peerId,
            this.#kindOf,
          );
    // The global requests the zone's kinds only once the zone has settled the catalog.
    const gate = this.#catalog === undefined ? undefined : new CatalogGate();
    const sources = this.#sources(peer);
    if (this.#catalog !== undefined) sources.push(this.#catalog);
    const merged = mergeLaidOut(sources, this.#layout(sources));
    // Tracing (stream-traces.ts): only while a tracing SDK is registered; otherwise nothing is made or wrapped.
    const traces =
      this.#changes === undefined ? undefined : this.#traces(this.#changes, session, peer);
    const serving = traces?.serving;
    const receiving = traces?.receiving;
    const observedSource = observed === undefined ? merged : observed.source(merged);
    const source = serving === undefined ? observedSource : serving.source(observedSource);
    // One object observes both the server and the client of the session (stream-observer.ts).
    const observer = streamObserver({
      context: this.#observerContext(source.typeUrls),
      session,
      zone: peer.zone,
      status: record.serverObserver(number),
      statusClient: record.clientObserver(number),
      metrics: observed,
      serving: serving?.observer(),
      gate,
    });
    const serverView = gate?.watch(session.server) ?? session.server;
    const server = new DiscoveryServer({
      view: serving === undefined ? serverView : serving.view(serverView),
      source,
      options: { ...discovery, maxMessageBytes },
      // The zone fetches the catalog once: a late ACK must not bring it again (its NACK would end the session).
      fetchedOnce: this.#catalog === undefined ? [] : this.#catalog.typeUrls,
      // Kinds go after the kinds they depend on, removals before (docs/kinds.md, "Ordered delivery").
      dependsOn: this.#dependsOn,
      observer,
    });
    const guard = this.#guard(peer.zone, session.signal);
    const storeSink = new StoreSink(store, types, peer.mapping, {
      retry: this.#options.storeRetry,
      onRetry: (error, delay) =>
        logger.warn(
          `reading what this side holds failed; retrying in ${delay} ms before subscribing`,
          { zone: peer.zone, error },
        ),
      gate: guard,
    });
    const client = new DiscoveryClient({
      view: receiving === undefined ? session.client : receiving.view(session.client),
      // In the registry's order, each kind after those it depends on: the peer serves them in the order asked.
      typeUrls: types.receivedBy(this.#options.role).map((t) => t.typeUrl),
      mode: mode ?? "delta",
      sink: guard === undefined ? storeSink : guard.wrap(storeSink),
      node,
      maxResponseResources: discovery?.maxResponseResources,
      observer,
    });
    const done = (): void => {
      guard?.close();
      if (this.#guards.get(peer.zone) === guard) this.#guards.delete(peer.zone);
    };
    let running: Promise<unknown>;
    try {
      running = Promise.all([server.run(session.signal), subscribe(client, gate, session.signal)]);
    } catch (error) {
      done();
      throw error;
    }
    // Returned, not awaited: a suspended frame of this function would live as long as the session, in every idle zone's.
    return running.then(done, (error: unknown) => {
      done();
      throw error;
    });
  }

  /** The spans of one session's streams (made only while a tracing SDK is registered). */
  #traces(
    changes: ChangeTraces,
    session: Session,
    peer: SyncPeer,
  ): { readonly serving: ServeTraces; readonly receiving: ReceiveTraces } {
    const kindOf = this.#kindOf;
    return {
      serving: new ServeTraces(changes, peer.zone, kindOf, session.signal),
      receiving: new ReceiveTraces(
        changes.tracer,
        peer.zone,
        this.#options.role,
        kindOf,
        session.signal,
      ),
    };
  }

  /** A reset guard for a new session of `zone` (undefined when the guard is off). */
  #guard(zone: string, signal: AbortSignal): ResetGuard | undefined {
    const options = this.#resetGuard;
    if (options === undefined) return undefined;
    const global = this.#options.role === "global";
    const guard = new ResetGuard({
      options,
      peer: global ? `zone "${zone}"` : "the global",
      zone,
      kindOf: this.#kindOf,
      acceptHint: this.#options.acceptResetHint?.(zone) ?? "acceptReset",
      clock: this.#options.clock ?? systemClock,
      logger: this.#options.logger,
      metrics: this.#options.metrics,
      signal,
    });
    this.#guards.set(zone, guard);
    return guard;
  }

  /** What every session's observer shares, made at the first session (again only if the served types changed: a zone learned kinds). */
  #observerContext(served: readonly string[]): StreamObserverContext {
    if (this.#observing?.served === served) return this.#observing;
    this.#observing = {
      logger: this.#options.logger,
      kindOf: this.#kindOf,
      oversized: this.#noteOversized,
      served,
      role: this.#options.role,
    };
    return this.#observing;
  }

  /** How the sources of a stream merge: worked out at the first stream, again only once a cache was added (a zone learned kinds). */
  #layout(sources: readonly SnapshotSource[]): SourceLayout {
    if (this.#laidOut?.caches !== this.#caches.length)
      this.#laidOut = { caches: this.#caches.length, layout: new SourceLayout(sources) };
    return this.#laidOut.layout;
  }

  #record(zone: string): ZoneStatusRecord {
    let record = this.#records.get(zone);
    if (record === undefined) {
      record = new ZoneStatusRecord(zone, this.#options.types.list(), this.#served);
      this.#records.set(zone, record);
    }
    return record;
  }
}

/**
 * Runs `client` once `gate` (if any) has settled, until `signal` aborts. A
 * function of its own, not a closure in the engine's session code: that
 * one's context lives as long as the session, and would keep the gate.
 * A promise chain, not an async function: once the gate settled, nothing
 * of it stays pending for the session's life.
 */
function subscribe(
  client: DiscoveryClient,
  gate: CatalogGate | undefined,
  signal: AbortSignal,
): Promise<void> {
  if (gate === undefined) return client.run(signal);
  return gate.settled(signal).then((settled) => (settled ? client.run(signal) : undefined));
}
