/**
 * The global's side of resource sync. Per zone session it serves the
 * global-to-zone kinds (through the per-zone filter) and subscribes to the
 * zone-to-global kinds, storing them attributed to the zone the session was
 * admitted as. A zone that disconnects keeps its resources (shown offline);
 * deleting the Zone deletes them.
 *
 * @module
 */
import { DiscoveryClient } from "../discovery/client.ts";
import { DiscoveryServer } from "../discovery/server.ts";
import type { DiscoveryOptions } from "../discovery/types.ts";
import { consoleLogger, type Logger } from "../log.ts";
import type { Session } from "../mux/views.ts";
import { ZONE_KIND } from "./builtin-types.ts";
import { LABELS, type StoredResource, type TypeRegistry } from "./resource-types.ts";
import { SnapshotCache } from "./snapshot-cache.ts";
import { ZoneStatusRecord, type ZoneStatus } from "./status.ts";
import type { ResourceStore } from "./store.ts";
import { StoreSink, zoneMapping } from "./store-sink.ts";

/** Options of {@link GlobalSync}. */
export interface GlobalSyncOptions {
  /** The global's store. */
  readonly store: ResourceStore;
  /** Registered types; must include Zone. */
  readonly types: TypeRegistry;
  /** Which global resources a zone receives. Default: all. */
  readonly filter?: (zone: string, resource: StoredResource) => boolean;
  /** How the global subscribes to zone resources. Default "delta". */
  readonly mode?: "delta" | "sotw";
  /** Discovery tunables. */
  readonly discovery?: DiscoveryOptions;
  /**
   * Called when a Zone is deleted or disabled, before its resources are
   * deleted; end the zone's session here (`GlobalServer.revoke`).
   */
  readonly onZoneRevoked?: (zone: string, reason: "deleted" | "disabled") => void | Promise<void>;
  /** Where to log. */
  readonly logger?: Logger;
}

/** Resource sync on the global. */
export class GlobalSync {
  readonly #options: GlobalSyncOptions;
  readonly #cache: SnapshotCache;
  readonly #logger: Logger;
  readonly #records = new Map<string, ZoneStatusRecord>();
  /** Per zone, the last attachment: a new one starts only after it finished, so an old session's late writes never land after a new session's resume. */
  readonly #attached = new Map<string, Promise<void>>();

  /** @param options - store, types, filter, callbacks */
  constructor(options: GlobalSyncOptions) {
    options.types.get(ZONE_KIND);
    this.#options = options;
    this.#logger = options.logger ?? consoleLogger();
    this.#cache = new SnapshotCache(options.store, options.types.flowing("global-to-zone"));
  }

  /** Follows the store (global resources, Zone deletions) until `signal` aborts. */
  start(signal: AbortSignal): void {
    this.#cache.start(signal);
    this.#options.store.watch((change) => {
      if (change.kind !== ZONE_KIND) return;
      void this.#onZoneChange(change.name, change.op).catch((error: unknown) =>
        this.#logger.error(`cleaning up after zone "${change.name}" failed`, { error }),
      );
    }, signal);
  }

  /** Runs sync over one zone session until it ends. */
  async attach(session: Session): Promise<void> {
    const zone = session.peerId;
    const previous = this.#attached.get(zone) ?? Promise.resolve();
    const running = previous.then(() => (session.end === undefined ? this.#run(zone, session) : undefined));
    this.#attached.set(zone, running);
    try {
      await running;
    } finally {
      if (this.#attached.get(zone) === running) this.#attached.delete(zone);
    }
  }

  /** Status of one zone: registered ones that never connected show offline. */
  async zoneStatus(zone: string): Promise<ZoneStatus | undefined> {
    const registered = await this.#options.store.get(ZONE_KIND, "", zone);
    if (registered === undefined) return undefined;
    return this.#record(zone).snapshot();
  }

  /** Status of every registered zone, sorted by name. */
  async zoneStatuses(): Promise<ZoneStatus[]> {
    const zones = await this.#options.store.list(ZONE_KIND);
    return zones.map((z) => this.#record(z.meta.name).snapshot());
  }

  async #run(zone: string, session: Session): Promise<void> {
    const { store, types, filter, mode, discovery } = this.#options;
    const record = this.#record(zone);
    record.connected(() => session.stats().heartbeatRttMs);
    const server = new DiscoveryServer({
      view: session.server,
      source: this.#cache.source(filter === undefined ? undefined : (r) => filter(zone, r)),
      options: discovery,
      observer: record.serverObserver(),
    });
    const client = new DiscoveryClient({
      view: session.client,
      typeUrls: types.flowing("zone-to-global").map((t) => t.typeUrl),
      mode: mode ?? "delta",
      sink: new StoreSink(store, types, zoneMapping(zone)),
      node: { id: "global", cluster: "global", userAgentName: "kds-mux" },
      observer: record.clientObserver(),
    });
    const work = Promise.all([server.run(session.signal), client.run(session.signal)]).catch(async (error: unknown) => {
      this.#logger.error(`sync with zone "${zone}" failed; closing its session so it reconnects`, { zone, error });
      await session.close({ message: `sync failed on the global: ${error instanceof Error ? error.message : String(error)}` });
    });
    const end = await session.closed;
    record.disconnected(end);
    await work;
  }

  #record(zone: string): ZoneStatusRecord {
    let record = this.#records.get(zone);
    if (record === undefined) {
      record = new ZoneStatusRecord(zone, this.#options.types.list());
      this.#records.set(zone, record);
    }
    return record;
  }

  async #onZoneChange(zone: string, op: "put" | "delete"): Promise<void> {
    const { store, types } = this.#options;
    if (op === "put") {
      const current = await store.get(ZONE_KIND, "", zone);
      if (current !== undefined && (current.spec as { enabled?: boolean }).enabled === false) {
        await this.#options.onZoneRevoked?.(zone, "disabled");
      }
      return;
    }
    await this.#options.onZoneRevoked?.(zone, "deleted");
    await this.#attached.get(zone);
    if ((await store.get(ZONE_KIND, "", zone)) !== undefined) return; // registered again meanwhile
    for (const type of types.flowing("zone-to-global")) {
      for (const r of await store.list(type.kind, { labels: { [LABELS.zone]: zone } })) {
        await store.delete(type.kind, r.meta.mesh, r.meta.name);
      }
    }
    this.#records.delete(zone);
    this.#logger.info(`zone "${zone}" was deleted; its resources were removed`, { zone });
  }
}
