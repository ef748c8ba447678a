/**
 * The zone registry backed by the global's store: a zone is registered by a
 * cluster-scoped Zone resource (`kds-mux generate zone --name NAME | kds-mux
 * apply -f - --server URL`).
 *
 * @module
 */
import type { ZoneSpec } from "../gen/kds/v1/resource_pb.ts";
import { ZONE_KIND } from "../kinds/builtin-types.ts";
import type { ResourceStore } from "../store/contract.ts";
import type { ZoneRecord, ZoneRegistry } from "./zone-registry.ts";

/** The Zone resources a global already follows in memory (the sync engine's `KnownZones`). */
export interface FollowedZones {
  /** The Zone resources were listed (and are followed from then on). */
  readonly known: boolean;
  /** Whether `zone` is registered and enabled; undefined when it is not registered. */
  facts(zone: string): { readonly enabled: boolean } | undefined;
}

/** Looks zones up as Zone resources in a store. */
export class StoreZoneRegistry implements ZoneRegistry {
  readonly #store: ResourceStore;
  readonly #followed: FollowedZones | undefined;

  /**
   * @param store - the global's store
   * @param followed - the Zone resources the global follows in memory: a
   *   zone found there is answered without a store read (a restarted global
   *   admitting thousands of zones would read the store once for each); one
   *   not found there is read from the store (it may be registered a moment
   *   before the change arrives)
   */
  constructor(store: ResourceStore, followed?: FollowedZones) {
    this.#store = store;
    this.#followed = followed;
  }

  async get(name: string, signal?: AbortSignal): Promise<ZoneRecord | undefined> {
    const followed = this.#followed?.known === true ? this.#followed.facts(name) : undefined;
    if (followed !== undefined) return { name, enabled: followed.enabled };
    const zone = await this.#store.get(ZONE_KIND, "", name, { signal });
    return zone === undefined ? undefined : { name, enabled: (zone.spec as ZoneSpec).enabled };
  }
}
