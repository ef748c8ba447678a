/**
 * The zone's side of resource sync: serves its zone-to-global kinds and
 * mirrors the global-to-zone kinds into its store. On every (re)connect the
 * mirror is reconciled to the global's set (delta resumes from the versions
 * the mirror holds).
 *
 * @module
 */
import { DiscoveryClient } from "../discovery/client.ts";
import { DiscoveryServer } from "../discovery/server.ts";
import type { DiscoveryOptions } from "../discovery/types.ts";
import { consoleLogger, type Logger } from "../log.ts";
import type { Session } from "../mux/views.ts";
import type { TypeRegistry } from "./resource-types.ts";
import { SnapshotCache } from "./snapshot-cache.ts";
import { ZoneStatusRecord, type ZoneStatus } from "./status.ts";
import type { ResourceStore } from "./store.ts";
import { StoreSink, mirrorMapping } from "./store-sink.ts";

/** Options of {@link ZoneSync}. */
export interface ZoneSyncOptions {
  /** The zone's name. */
  readonly zone: string;
  /** The zone's store. */
  readonly store: ResourceStore;
  /** Registered types. */
  readonly types: TypeRegistry;
  /** How the zone subscribes to global resources. Default "delta". */
  readonly mode?: "delta" | "sotw";
  /** Discovery tunables. */
  readonly discovery?: DiscoveryOptions;
  /** Where to log. */
  readonly logger?: Logger;
}

/** Resource sync in a zone. */
export class ZoneSync {
  readonly #options: ZoneSyncOptions;
  readonly #cache: SnapshotCache;
  readonly #record: ZoneStatusRecord;
  readonly #logger: Logger;
  /** The last attachment; the next waits for it (no late writes from an old session). */
  #attached: Promise<void> = Promise.resolve();

  /** @param options - zone name, store, types */
  constructor(options: ZoneSyncOptions) {
    this.#options = options;
    this.#logger = options.logger ?? consoleLogger();
    this.#cache = new SnapshotCache(options.store, options.types.flowing("zone-to-global"));
    this.#record = new ZoneStatusRecord(options.zone, options.types.list());
  }

  /** Follows the store until `signal` aborts. */
  start(signal: AbortSignal): void {
    this.#cache.start(signal);
  }

  /** This zone's connection status. */
  status(): ZoneStatus {
    return this.#record.snapshot();
  }

  /** Runs sync over one session until it ends (after the previous session's sync finished). */
  attach(session: Session): Promise<void> {
    const running = this.#attached.then(() => (session.end === undefined ? this.#run(session) : undefined));
    this.#attached = running;
    return running;
  }

  async #run(session: Session): Promise<void> {
    const { store, types, mode, discovery, zone } = this.#options;
    this.#record.connected(() => session.stats().heartbeatRttMs);
    const server = new DiscoveryServer({ view: session.server, source: this.#cache.source(), options: discovery, observer: this.#record.serverObserver() });
    const client = new DiscoveryClient({
      view: session.client,
      typeUrls: types.flowing("global-to-zone").map((t) => t.typeUrl),
      mode: mode ?? "delta",
      sink: new StoreSink(store, types, mirrorMapping()),
      node: { id: zone, cluster: "zone", userAgentName: "kds-mux" },
      observer: this.#record.clientObserver(),
    });
    const work = Promise.all([server.run(session.signal), client.run(session.signal)]).catch(async (error: unknown) => {
      this.#logger.error("sync with the global failed; closing the session so the zone reconnects", { error });
      await session.close({ message: `sync failed in zone "${zone}": ${error instanceof Error ? error.message : String(error)}` });
    });
    const end = await session.closed;
    this.#record.disconnected(end);
    await work;
  }
}
