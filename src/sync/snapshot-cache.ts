/**
 * One encoded copy of the resources a side serves, shared by all its
 * streams: each kind is re-read from the store only after it changed, and a
 * resource is re-encoded only when its version changed. Each stream gets a
 * {@link SnapshotSource} view, optionally filtered.
 *
 * @module
 */
import { Digest } from "../discovery/digest.ts";
import { abortError } from "../errors.ts";
import type { Snapshot, SnapshotSource, WireResource } from "../discovery/types.ts";
import type { ResourceType, StoredResource } from "./resource-types.ts";
import type { ResourceStore } from "./store.ts";
import { toWire } from "./wire.ts";

interface Entry {
  readonly resource: StoredResource;
  readonly wire: WireResource;
}

interface KindCache {
  readonly type: ResourceType;
  dirty: boolean;
  entries: Entry[];
  byStoreKey: Map<string, Entry>;
  all: Snapshot | undefined;
  refreshing: Promise<void> | undefined;
}

/** Shared, lazily refreshed wire form of the kinds a side serves. */
export class SnapshotCache {
  readonly #store: ResourceStore;
  readonly #kinds = new Map<string, KindCache>();
  readonly #byUrl = new Map<string, KindCache>();
  readonly #listeners = new Set<(typeUrl: string) => void>();

  /**
   * @param store - where the resources live
   * @param types - the kinds to serve
   */
  constructor(store: ResourceStore, types: readonly ResourceType[]) {
    this.#store = store;
    for (const type of types) {
      const cache: KindCache = { type, dirty: true, entries: [], byStoreKey: new Map(), all: undefined, refreshing: undefined };
      this.#kinds.set(type.kind, cache);
      this.#byUrl.set(type.typeUrl, cache);
    }
  }

  /** Type URLs served. */
  get typeUrls(): string[] {
    return [...this.#byUrl.keys()];
  }

  /** Follows the store's change feed until `signal` aborts. */
  start(signal: AbortSignal): void {
    this.#store.watch((change) => {
      const cache = this.#kinds.get(change.kind);
      if (cache === undefined) return;
      cache.dirty = true;
      for (const listener of this.#listeners) listener(cache.type.typeUrl);
    }, signal);
  }

  /** A source for one stream; `filter` picks which resources that stream sees. */
  source(filter?: (resource: StoredResource) => boolean): SnapshotSource {
    return {
      typeUrls: this.typeUrls,
      snapshot: (typeUrl, signal) => this.#snapshot(typeUrl, filter, signal),
      onChange: (listener, signal) => {
        if (signal.aborted) return;
        this.#listeners.add(listener);
        signal.addEventListener("abort", () => this.#listeners.delete(listener), { once: true });
      },
    };
  }

  async #snapshot(typeUrl: string, filter: ((r: StoredResource) => boolean) | undefined, signal: AbortSignal): Promise<Snapshot> {
    if (signal.aborted) throw abortError(signal, "snapshot");
    const cache = this.#byUrl.get(typeUrl);
    if (cache === undefined) return { version: new Digest().toString(), resources: new Map() };
    // Wait for a refresh in progress (its result may be newer than what we hold),
    // and refresh again while changes keep arriving.
    while (cache.dirty || cache.refreshing !== undefined) {
      cache.refreshing ??= this.#refresh(cache).finally(() => {
        cache.refreshing = undefined;
      });
      await cache.refreshing;
    }
    if (filter === undefined) {
      cache.all ??= build(cache.entries, undefined);
      return cache.all;
    }
    return build(cache.entries, filter);
  }

  /** Re-reads one kind. Shared by every stream, so no one stream's signal cancels it. */
  async #refresh(cache: KindCache): Promise<void> {
    cache.dirty = false;
    const resources = await this.#store.list(cache.type.kind);
    const next = new Map<string, Entry>();
    const entries: Entry[] = [];
    for (const resource of resources) {
      const storeKey = `${resource.meta.mesh}/${resource.meta.name}`;
      const previous = cache.byStoreKey.get(storeKey);
      const entry = previous !== undefined && previous.resource.meta.version === resource.meta.version ? previous : { resource, wire: toWire(cache.type, resource) };
      next.set(storeKey, entry);
      entries.push(entry);
    }
    cache.byStoreKey = next;
    cache.entries = entries;
    cache.all = undefined;
  }
}

function build(entries: readonly Entry[], filter: ((r: StoredResource) => boolean) | undefined): Snapshot {
  const digest = new Digest();
  const resources = new Map<string, WireResource>();
  for (const entry of entries) {
    if (filter !== undefined && !filter(entry.resource)) continue;
    resources.set(entry.wire.key, entry.wire);
    digest.add(entry.wire.key).add(entry.wire.version);
  }
  return { version: digest.toString(), resources };
}
