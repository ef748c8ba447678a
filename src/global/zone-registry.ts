/**
 * Which zones may connect. Zone is a cluster-scoped resource: a zone belongs
 * to no mesh or group, its name is unique on the global.
 *
 * @module
 */
import { assertZoneName } from "../names.ts";

/** A registered zone. */
export interface ZoneRecord {
  /** The zone's name, as the zone sends it in `client-id`. */
  readonly name: string;
  /** A disabled zone is refused until it is enabled again. */
  readonly enabled: boolean;
}

/** Where the global looks zones up. Back it with any store. */
export interface ZoneRegistry {
  /** The zone named `name`, or undefined when it is not registered. */
  get(name: string, signal?: AbortSignal): Promise<ZoneRecord | undefined>;
}

/** The default registry: zones kept in memory. */
export class InMemoryZoneRegistry implements ZoneRegistry {
  readonly #zones = new Map<string, ZoneRecord>();

  /** @param zones - zones registered from the start (enabled) */
  constructor(zones: Iterable<string> = []) {
    for (const name of zones) this.register(name);
  }

  /** Registers (or re-registers) a zone; enabled unless told otherwise. */
  register(name: string, options: { enabled?: boolean } = {}): ZoneRecord {
    assertZoneName(name);
    const record: ZoneRecord = { name, enabled: options.enabled ?? true };
    this.#zones.set(name, record);
    return record;
  }

  /** Removes a zone; true if it was registered. */
  unregister(name: string): boolean {
    return this.#zones.delete(name);
  }

  /** Every registered zone. */
  list(): ZoneRecord[] {
    return [...this.#zones.values()];
  }

  get(name: string): Promise<ZoneRecord | undefined> {
    return Promise.resolve(this.#zones.get(name));
  }
}
