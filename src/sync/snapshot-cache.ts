/**
 * One encoded copy of the resources a side serves, shared by all its
 * streams and kept up to date from the store's change feed: a change costs
 * one store read and one encode, never a full re-read. Each stream gets a
 * {@link SnapshotSource} view, optionally filtered.
 *
 * @module
 */
import { SetDigest, digestOf } from "../discovery/digest.ts";
import type { ResourceSet, Snapshot, SnapshotSource, WireResource } from "../discovery/types.ts";
import { abortError } from "../errors.ts";
import { resourceKey, type ResourceType, type StoredResource } from "./resource-types.ts";
import type { ResourceStore } from "./store.ts";
import { toWire } from "./wire.ts";

interface Entry {
  readonly resource: StoredResource;
  readonly wire: WireResource;
}

interface KindCache {
  readonly type: ResourceType;
  loaded: boolean;
  readonly entries: Map<string, Entry>;
  readonly digest: SetDigest;
  /** Keys changed since the last refresh (at most one entry per resource). */
  pending: Map<string, { mesh: string; name: string }>;
  refreshing: Promise<void> | undefined;
  /** A background refresh is scheduled. */
  scheduled: boolean;
}

/** Shared, incrementally refreshed wire form of the kinds a side serves. */
export class SnapshotCache {
  readonly #store: ResourceStore;
  readonly #kinds = new Map<string, KindCache>();
  readonly #byUrl = new Map<string, KindCache>();
  readonly #listeners = new Set<(typeUrl: string, key?: string) => void>();

  /**
   * @param store - where the resources live
   * @param types - the kinds to serve
   */
  constructor(store: ResourceStore, types: readonly ResourceType[]) {
    this.#store = store;
    for (const type of types) {
      const cache: KindCache = { type, loaded: false, entries: new Map(), digest: new SetDigest(), pending: new Map(), refreshing: undefined, scheduled: false };
      this.#kinds.set(type.kind, cache);
      this.#byUrl.set(type.typeUrl, cache);
    }
  }

  /** Type URLs served. */
  get typeUrls(): string[] {
    return [...this.#byUrl.keys()];
  }

  /**
   * Follows the store's change feed until `signal` aborts, and loads every
   * kind in the background so the first stream does not wait for the
   * encoding. Whatever the cache held is re-read: changes made while nobody
   * watched are not lost.
   */
  start(signal: AbortSignal): void {
    const invalidate = (): void => {
      for (const cache of this.#kinds.values()) cache.loaded = false;
    };
    invalidate();
    signal.addEventListener("abort", invalidate, { once: true });
    this.#store.watch((change) => {
      const cache = this.#kinds.get(change.kind);
      if (cache === undefined) return;
      const key = resourceKey(change.mesh, change.name);
      cache.pending.set(key, { mesh: change.mesh, name: change.name });
      this.#scheduleRefresh(cache);
      for (const listener of this.#listeners) listener(cache.type.typeUrl, key);
    }, signal);
    for (const cache of this.#kinds.values()) void this.#bringUpToDate(cache).catch(() => undefined);
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
    if (cache === undefined) return { version: digestOf([]), resources: { get: () => undefined, [Symbol.iterator]: () => [][Symbol.iterator]() } };
    await this.#bringUpToDate(cache);
    const entries = cache.entries;
    if (filter === undefined) {
      return {
        version: cache.digest.toString(),
        resources: { get: (key) => entries.get(key)?.wire, [Symbol.iterator]: () => wires(entries.values(), undefined) },
      };
    }
    const resources: ResourceSet = {
      get: (key) => {
        const entry = entries.get(key);
        return entry !== undefined && filter(entry.resource) ? entry.wire : undefined;
      },
      [Symbol.iterator]: () => wires(entries.values(), filter),
    };
    let version: string | undefined;
    return {
      get version() {
        version ??= digestOf(resources);
        return version;
      },
      resources,
    };
  }

  /**
   * Keeps the cache warm: encodes changes soon after they happen (once per
   * burst), so a stream that asks later finds them ready.
   */
  #scheduleRefresh(cache: KindCache): void {
    if (cache.scheduled) return;
    cache.scheduled = true;
    setTimeout(() => {
      cache.scheduled = false;
      void this.#bringUpToDate(cache).catch(() => undefined);
    }, 0);
  }

  /** Waits for a refresh in progress, and refreshes again while changes keep arriving. */
  async #bringUpToDate(cache: KindCache): Promise<void> {
    while (!cache.loaded || cache.pending.size > 0 || cache.refreshing !== undefined) {
      cache.refreshing ??= this.#refresh(cache).finally(() => {
        cache.refreshing = undefined;
      });
      await cache.refreshing;
    }
  }

  /** Brings one kind up to date. Shared by every stream, so no one stream's signal cancels it. */
  async #refresh(cache: KindCache): Promise<void> {
    if (!cache.loaded) {
      cache.pending = new Map();
      cache.loaded = true;
      const resources = await this.#store.list(cache.type.kind);
      const present = new Set<string>();
      for (const resource of resources) {
        present.add(this.#set(cache, resource));
      }
      for (const [key, gone] of cache.entries) {
        if (present.has(key)) continue;
        cache.entries.delete(key);
        cache.digest.remove(key, gone.wire.version);
      }
      return;
    }
    const batch = cache.pending;
    cache.pending = new Map();
    for (const [key, { mesh, name }] of batch) {
      const resource = await this.#store.get(cache.type.kind, mesh, name);
      if (resource !== undefined) this.#set(cache, resource);
      else {
        const gone = cache.entries.get(key);
        if (gone !== undefined) {
          cache.entries.delete(key);
          cache.digest.remove(key, gone.wire.version);
        }
      }
    }
  }

  /** Puts one resource into the cache (re-encoding it only if its version changed); returns its key. */
  #set(cache: KindCache, resource: StoredResource): string {
    const key = resourceKey(resource.meta.mesh, resource.meta.name);
    const previous = cache.entries.get(key);
    if (previous !== undefined) {
      if (previous.resource.meta.version === resource.meta.version) return key;
      cache.digest.remove(key, previous.wire.version);
    }
    const entry = { resource, wire: toWire(cache.type, resource) };
    cache.entries.set(key, entry);
    cache.digest.add(key, entry.wire.version);
    return key;
  }
}

function* wires(entries: Iterable<Entry>, filter: ((r: StoredResource) => boolean) | undefined): Generator<WireResource> {
  for (const entry of entries) if (filter === undefined || filter(entry.resource)) yield entry.wire;
}
