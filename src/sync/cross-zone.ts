/**
 * The rules of zone-to-zones kinds, both sides: a zone serves only the
 * resources it made (never the copies of other zones' resources it
 * received, so nothing loops); the global serves each zone the other zones'
 * resources, never the zone's own and none of a zone that is disabled (or
 * before it knows which zones are).
 *
 * @module
 */
import { LABELS, type StoredResource } from "../kinds/resource-types.ts";

/** Whether a zone serves `resource` to the global: only what it made, never a copy the global sent it. */
export function zoneServes(resource: StoredResource): boolean {
  return resource.meta.labels[LABELS.origin] !== "global";
}

/**
 * The zone-to-zones resources the global sends `zone`: those of other zones
 * (by their `kds.io/zone` label), none of a zone `withheld` says is disabled,
 * and no stale one (`kds.io/origin-last-online`) of a kind
 * `withholdsStale` names (its `whenStale` is "withhold").
 */
export function crossZoneFilter(
  zone: string,
  withheld: (origin: string) => boolean,
  withholdsStale: (kind: string) => boolean = () => false,
): (resource: StoredResource) => boolean {
  return (resource) => crossZoneSends(zone, resource, withheld, withholdsStale);
}

/**
 * Whether the global sends `zone` the zone-to-zones `resource`: the test of
 * {@link crossZoneFilter}, for a caller that holds its own filter (one
 * closure per stream, not two).
 */
export function crossZoneSends(
  zone: string,
  resource: StoredResource,
  withheld: (origin: string) => boolean,
  withholdsStale: (kind: string) => boolean,
): boolean {
  const labels = resource.meta.labels;
  const origin = labels[LABELS.zone];
  return (
    origin !== undefined &&
    origin !== zone &&
    !withheld(origin) &&
    !(labels[LABELS.originLastOnline] !== undefined && withholdsStale(resource.kind))
  );
}

/** A registered zone as the global's sync sees it. */
export interface ZoneFacts {
  /** Enabled (a disabled zone's zone-to-zones resources are withheld from the others). */
  readonly enabled: boolean;
  /** The labels of its Zone resource, which zone selectors match. */
  readonly labels: Readonly<Record<string, string>>;
}

/**
 * The registered zones, as the global's sync needs them: which are disabled
 * (their zone-to-zones resources are withheld from the other zones) and
 * their labels (which zone selectors match). Until the Zone resources were
 * first listed ({@link KnownZones.known}), nothing that depends on them is
 * served, so nothing leaks out while the global starts.
 */
export class KnownZones {
  readonly #zones = new Map<string, ZoneFacts>();
  #known = false;
  readonly #changed: () => void;

  /** @param changed - told after every change that can change what a zone is sent */
  constructor(changed: () => void) {
    this.#changed = changed;
  }

  /** The Zone resources have been listed. */
  get known(): boolean {
    return this.#known;
  }

  /** What is known of `zone`: undefined when it is not registered, or the Zone resources were not listed yet (see {@link known}). */
  facts(zone: string): ZoneFacts | undefined {
    return this.#zones.get(zone);
  }

  /** Whether `zone`'s zone-to-zones resources are withheld (it is disabled). */
  withheld(zone: string): boolean {
    return this.#zones.get(zone)?.enabled === false;
  }

  /** The labels of `zone` (none when it is not registered). */
  labels(zone: string): Readonly<Record<string, string>> {
    return this.#zones.get(zone)?.labels ?? {};
  }

  /** Replaces every zone (the Zone resources were listed); from now on the zones are known. */
  reset(zones: Iterable<readonly [string, ZoneFacts]>): void {
    this.#zones.clear();
    for (const [name, facts] of zones) this.#zones.set(name, facts);
    this.#known = true;
    this.#changed();
  }

  /** Records `zone` as it is now (undefined: deleted); tells only when that changes something. */
  set(zone: string, facts: ZoneFacts | undefined): void {
    const before = this.#zones.get(zone);
    if (facts === undefined) this.#zones.delete(zone);
    else this.#zones.set(zone, facts);
    if (this.#known && !sameFacts(before, facts)) this.#changed();
  }
}

function sameFacts(a: ZoneFacts | undefined, b: ZoneFacts | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.enabled !== b.enabled) return false;
  const ka = Object.keys(a.labels);
  return ka.length === Object.keys(b.labels).length && ka.every((k) => a.labels[k] === b.labels[k]);
}
