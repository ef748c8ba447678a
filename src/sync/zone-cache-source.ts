/**
 * The global's source of one snapshot cache for one zone's stream: until the
 * zones are known, a kind that needs them (zone-to-zones, zone selectors, or
 * selective resources) is not served yet. An object with its methods on its
 * prototype, not closures: every idle zone holds one per cache.
 *
 * @module
 */
import type { Snapshot, SnapshotSource } from "../discovery/types.ts";
import type { ResourceType, TypeRegistry } from "../kinds/resource-types.ts";
import type { KnownZones } from "./cross-zone.ts";
import type { SnapshotCache } from "./snapshot-cache.ts";

/** Whether a kind needs the zones known before it is served, given whether it holds selective resources now. */
export type NeedsZones = (type: ResourceType, selective: boolean) => boolean;

/** Every kind of a zone-to-zones cache needs the zones (one function for every stream). */
export const ALWAYS_NEEDS_ZONES: NeedsZones = () => true;

/** A kind with zone selectors, or holding selective resources, needs the zones (one function for every stream). */
export const NEEDS_ZONES_WHEN_SELECTIVE: NeedsZones = (type, selective) =>
  type.zones !== undefined || selective;

/** See the module comment. */
export class ZoneCacheSource implements SnapshotSource {
  readonly #inner: SnapshotSource;
  readonly #cache: SnapshotCache;
  readonly #zones: KnownZones;
  readonly #types: TypeRegistry;
  readonly #needsZones: NeedsZones;

  /**
   * @param inner - the cache's source for this stream (its filter applied; a cache's source always offers `snapshotNow`)
   * @param cache - the cache, asked whether a kind holds selective resources
   * @param zones - the zones, served from once known
   * @param types - the registry, for a type URL's kind
   * @param needsZones - which kinds wait for the zones
   */
  constructor(
    inner: SnapshotSource,
    cache: SnapshotCache,
    zones: KnownZones,
    types: TypeRegistry,
    needsZones: NeedsZones,
  ) {
    this.#inner = inner;
    this.#cache = cache;
    this.#zones = zones;
    this.#types = types;
    this.#needsZones = needsZones;
  }

  /** Type URLs the cache serves. */
  get typeUrls(): readonly string[] {
    return this.#inner.typeUrls;
  }

  /** Until the zones are known, a kind that needs them is not served yet. */
  #waits(typeUrl: string): boolean {
    if (this.#zones.known) return false;
    const type = this.#types.byTypeUrl(typeUrl);
    return type !== undefined && this.#needsZones(type, this.#cache.holdsSelective(typeUrl));
  }

  /** The set of `typeUrl` for this stream; undefined while it waits for the zones. */
  snapshot(typeUrl: string, signal: AbortSignal): Promise<Snapshot | undefined> {
    return this.#waits(typeUrl)
      ? Promise.resolve(undefined)
      : this.#inner.snapshot(typeUrl, signal);
  }

  /** {@link snapshot} at once. */
  snapshotNow(typeUrl: string): Snapshot | undefined {
    return this.#waits(typeUrl) ? undefined : this.#inner.snapshotNow?.(typeUrl);
  }

  /** Calls `listener` on the cache's changes until `signal` aborts. */
  onChange(listener: (typeUrl: string, key?: string) => void, signal: AbortSignal): void {
    this.#inner.onChange(listener, signal);
  }
}
