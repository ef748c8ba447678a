/**
 * The rules of zone-to-zones kinds, both sides: a zone serves only the
 * resources it made (never the copies of other zones' resources it
 * received, so nothing loops); the global serves each zone the other zones'
 * resources, never the zone's own and none of a zone that is disabled (or
 * before it knows which zones are).
 *
 * @module
 */
import { LABELS, type StoredResource } from "./resource-types.ts";

/** Whether a zone serves `resource` to the global: only what it made, never a copy the global sent it. */
export function zoneServes(resource: StoredResource): boolean {
  return resource.meta.labels[LABELS.origin] !== "global";
}

/**
 * The zone-to-zones resources the global sends `zone`: those of other zones
 * (by their `kds.io/zone` label), none of a zone `withheld` says is disabled.
 */
export function crossZoneFilter(zone: string, withheld: (origin: string) => boolean): (resource: StoredResource) => boolean {
  return (resource) => {
    const origin = resource.meta.labels[LABELS.zone];
    return origin !== undefined && origin !== zone && !withheld(origin);
  };
}

/**
 * The zones whose zone-to-zones resources the global withholds (disabled
 * zones), and whether it knows them yet: until {@link WithheldZones.known},
 * nothing of those kinds is served, so a disabled zone's resources never
 * leak out while the global starts.
 */
export class WithheldZones {
  readonly #zones = new Set<string>();
  #known = false;
  readonly #changed: () => void;

  /** @param changed - told after every change (the served sets must be recomputed) */
  constructor(changed: () => void) {
    this.#changed = changed;
  }

  /** The set of disabled zones is loaded. */
  get known(): boolean {
    return this.#known;
  }

  /** Whether `zone`'s resources are withheld. */
  has(zone: string): boolean {
    return this.#zones.has(zone);
  }

  /** Replaces the whole set (the Zone resources were listed); from now on the set is known. */
  reset(disabled: Iterable<string>): void {
    this.#zones.clear();
    for (const z of disabled) this.#zones.add(z);
    this.#known = true;
    this.#changed();
  }

  /** Marks `zone` as disabled (withheld) or not; tells only when that changes something. */
  set(zone: string, disabled: boolean): void {
    if (disabled === this.#zones.has(zone)) return;
    if (disabled) this.#zones.add(zone);
    else this.#zones.delete(zone);
    if (this.#known) this.#changed();
  }
}
