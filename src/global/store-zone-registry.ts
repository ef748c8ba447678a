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

/** Looks zones up as Zone resources in a store. */
export class StoreZoneRegistry implements ZoneRegistry {
  readonly #store: ResourceStore;

  /** @param store - the global's store */
  constructor(store: ResourceStore) {
    this.#store = store;
  }

  async get(name: string, signal?: AbortSignal): Promise<ZoneRecord | undefined> {
    const zone = await this.#store.get(ZONE_KIND, "", name, { signal });
    return zone === undefined ? undefined : { name, enabled: (zone.spec as ZoneSpec).enabled };
  }
}
