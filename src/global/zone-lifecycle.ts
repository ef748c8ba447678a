/**
 * What the global does when a Zone resource changes: a disabled or deleted
 * zone loses its live session at once, and a deleted zone's resources are
 * removed from the global's store; a disabled zone's zone-to-zones resources
 * are withheld from the other zones until it is enabled again; zone selectors
 * follow its labels. It follows the store's change feed, so it
 * acts on changes made through any instance sharing the store, and at start
 * it removes what zones deleted while no global was running left behind.
 *
 * @module
 */
import type { ZoneSpec } from "../gen/kds/v1/resource_pb.ts";
import type { Logger } from "../log.ts";
import type { ResourceStore, WriteOp } from "../store/contract.ts";
import { ZONE_KIND } from "../kinds/builtin-types.ts";
import type { KnownZones, ZoneFacts } from "../sync/cross-zone.ts";
import {
  LABELS,
  type ResourceType,
  type StoredResource,
  type TypeRegistry,
} from "../kinds/resource-types.ts";
import { followStore } from "../store/follow.ts";
import type { BackoffOptions } from "../util/backoff.ts";

/** Options of {@link ZoneLifecycle}. */
export interface ZoneLifecycleOptions {
  /** The global's store. */
  readonly store: ResourceStore;
  /** Registered types. */
  readonly types: TypeRegistry;
  /** Ends the zone's live session (if this instance holds it). */
  readonly revoke: (zone: string, reason: "deleted" | "disabled") => Promise<void>;
  /** Resolves once the zone's sync on this instance has stopped writing. */
  readonly settled: (zone: string) => Promise<void>;
  /** Where the zones are kept for sync: disabled ones (their zone-to-zones resources are withheld from the others) and their labels (for zone selectors). */
  readonly zones?: KnownZones;
  /** Called after a deleted zone's resources were removed. */
  readonly forgotten?: (zone: string) => void;
  /** Delays between retries of a failed store read. */
  readonly retry?: BackoffOptions;
  /** Where to log. */
  readonly logger: Logger;
}

/** Follows Zone resources on the global. */
export class ZoneLifecycle {
  readonly #options: ZoneLifecycleOptions;

  /** @param options - store, callbacks */
  constructor(options: ZoneLifecycleOptions) {
    this.#options = options;
  }

  /** Follows Zone changes until `signal` aborts; failures are logged and retried. */
  start(signal: AbortSignal): void {
    const { store, logger } = this.#options;
    void followStore({
      store,
      kinds: [ZONE_KIND],
      signal,
      what: "Zone resources",
      logger,
      retry: this.#options.retry,
      begin: async () => {
        const { revision, resources } = await store.list(ZONE_KIND, { signal });
        this.#options.zones?.reset(resources.map((z) => [z.meta.name, factsOf(z)] as const));
        await this.#sweep(new Set(resources.map((z) => z.meta.name)), signal);
        return revision;
      },
      onChange: async (change) => {
        if (change.op === "put") {
          const disabled = (change.resource.spec as ZoneSpec).enabled === false;
          this.#options.zones?.set(change.resource.meta.name, factsOf(change.resource));
          if (disabled) await this.#options.revoke(change.resource.meta.name, "disabled");
        } else {
          this.#options.zones?.set(change.ref.name, undefined);
          await this.#deleted(change.ref.name, signal);
        }
      },
    });
  }

  async #deleted(zone: string, signal: AbortSignal): Promise<void> {
    const { store, logger } = this.#options;
    await this.#options.revoke(zone, "deleted");
    await this.#options.settled(zone);
    if ((await store.get(ZONE_KIND, "", zone, { signal })) !== undefined) return; // registered again meanwhile
    const removed = await this.#removeResourcesOf(zone, signal);
    this.#options.forgotten?.(zone);
    logger.info(`zone "${zone}" was deleted; its ${removed} resources were removed`, { zone });
  }

  /** Removes resources of zones that no longer exist (deleted while no global followed the store). */
  async #sweep(registered: ReadonlySet<string>, signal: AbortSignal): Promise<void> {
    const orphans = new Set<string>();
    for (const type of this.#zoneKinds()) {
      const { resources } = await this.#options.store.list(type.kind, {
        labels: { [LABELS.origin]: "zone" },
        signal,
      });
      for (const r of resources) {
        const zone = r.meta.labels[LABELS.zone];
        if (zone !== undefined && !registered.has(zone)) orphans.add(zone);
      }
    }
    for (const zone of orphans) {
      const removed = await this.#removeResourcesOf(zone, signal);
      this.#options.logger.info(
        `zone "${zone}" no longer exists; its ${removed} resources were removed`,
        { zone },
      );
    }
  }

  /** The kinds zones sync up: zone-to-global and zone-to-zones. */
  #zoneKinds(): ResourceType[] {
    return this.#options.types.receivedBy("global");
  }

  /** Deletes every resource the zone synced up, one atomic batch per kind; returns how many. */
  async #removeResourcesOf(zone: string, signal: AbortSignal): Promise<number> {
    let removed = 0;
    for (const type of this.#zoneKinds()) {
      const { resources } = await this.#options.store.list(type.kind, {
        labels: { [LABELS.zone]: zone },
        signal,
      });
      if (resources.length === 0) continue;
      const ops: WriteOp[] = resources.map((r) => ({
        op: "delete",
        kind: type.kind,
        mesh: r.meta.mesh,
        name: r.meta.name,
      }));
      await this.#options.store.apply(ops, { signal });
      removed += resources.length;
    }
    return removed;
  }
}

/** What sync needs to know of a Zone resource. */
function factsOf(zone: StoredResource): ZoneFacts {
  return { enabled: (zone.spec as ZoneSpec).enabled !== false, labels: zone.meta.labels };
}
