/**
 * One encoded copy of the resources a side serves, shared by all its streams
 * and kept up to date from the store's change feed. Each change carries its
 * resource, so a change costs one encode and no store read.
 *
 * A kind is served only once it has loaded: until its first `list`
 * succeeds, a stream asking for it gets nothing (it waits), never an empty
 * set, so a failing store can never turn into deletions on the other side.
 * A failed list or watch is logged, shown in status, and retried with
 * backoff; while the watch is down the last loaded state stays served.
 *
 * @module
 */
import { SetDigest, digestOf } from "../discovery/digest.ts";
import type { ResourceSet, Snapshot, SnapshotSource, WireResource } from "../discovery/types.ts";
import { abortError } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { ResourceStore, StoreChange } from "../store/contract.ts";
import { followStore } from "../store/follow.ts";
import type { BackoffOptions } from "../util/backoff.ts";
import { resourceKey, type ResourceType, type StoredResource } from "../kinds/resource-types.ts";
import { toWire } from "./wire.ts";
import { isAborted } from "../util/abort.ts";

interface Entry {
  readonly resource: StoredResource;
  readonly wire: WireResource;
}

interface KindCache {
  readonly type: ResourceType;
  /** The revision of the snapshot loaded last; undefined until the first list succeeds (or after compaction). */
  loadedAt: number | undefined;
  /** The kind has been loaded at least once (what it holds may be served). */
  ready: boolean;
  readonly entries: Map<string, Entry>;
  readonly digest: SetDigest;
  /** How many of its entries are selective (see {@link SnapshotCacheOptions.selective}). */
  selective: number;
  /**
   * The whole set as a snapshot, made at the first unfiltered read after a
   * change and shared by every stream until the next (a change is read by
   * every zone's stream: one version string and one view of the entries,
   * not one each).
   */
  whole: Snapshot | undefined;
}

/** The store-facing state of one served kind, for status pages. */
export interface ServedKindState {
  /** The kind. */
  readonly kind: string;
  /** Loaded at least once: its resources are being served. */
  readonly loaded: boolean;
  /** The last store failure while loading or following it, until the next success. */
  readonly error: string | undefined;
  /** Resources held. */
  readonly resources: number;
}

/** Options of {@link SnapshotCache}. */
export interface SnapshotCacheOptions {
  /** Where failures are logged. */
  readonly logger: Logger;
  /** Delays between retries of a failed list or watch. Default 200 ms doubling to 10 s. */
  readonly retry?: BackoffOptions;
  /**
   * Which of the kinds' resources this side serves at all (a zone leaves out
   * the copies of other zones' resources it received). Default: all.
   */
  readonly serves?: (resource: StoredResource) => boolean;
  /**
   * Which resources some streams may not see (the global: those naming
   * their zones). A stream's filter costs a pass over the kind for every
   * change; a source given `needed` applies it only while the kind holds
   * such resources (or `needed` says so anyway). Default: none.
   */
  readonly selective?: (resource: StoredResource) => boolean;
  /**
   * Runs around telling the streams of one change (`tell` tells them): the
   * sync engine opens the change's `kds.change` span there while a tracing
   * SDK is registered (change-traces.ts). Default: none (the streams are told
   * directly).
   */
  readonly fanOut?: (change: StoreChange, kind: string, key: string, tell: () => void) => void;
}

/** The parts of one {@link SnapshotCache} its streams' sources read. */
interface SharedCache {
  readonly typeUrls: readonly string[];
  readonly byUrl: ReadonlyMap<string, KindCache>;
  readonly listeners: Set<(typeUrl: string, key?: string) => void>;
  readonly snapshot: (
    typeUrl: string,
    filter: ((r: StoredResource) => boolean) | undefined,
  ) => Snapshot | undefined;
}

/**
 * One stream's source of a {@link SnapshotCache}: an object with methods on
 * its prototype rather than a closure per method, as every idle zone holds
 * one per cache on the global. Its first change listener leaves with the
 * stream's abort through the source itself (`handleEvent`), not a closure.
 */
class CacheSource implements SnapshotSource {
  readonly #shared: SharedCache;
  readonly #filter: ((resource: StoredResource) => boolean) | undefined;
  readonly #needed: ((type: ResourceType, selective: boolean) => boolean) | undefined;
  #listener: ((typeUrl: string, key?: string) => void) | undefined;

  constructor(
    shared: SharedCache,
    filter: ((resource: StoredResource) => boolean) | undefined,
    needed: ((type: ResourceType, selective: boolean) => boolean) | undefined,
  ) {
    this.#shared = shared;
    this.#filter = filter;
    this.#needed = needed;
  }

  get typeUrls(): readonly string[] {
    return this.#shared.typeUrls;
  }

  /** The filter, where it applies to the kind of `typeUrl` now. */
  #applying(typeUrl: string): ((r: StoredResource) => boolean) | undefined {
    const filter = this.#filter;
    if (filter === undefined) return undefined;
    const needed = this.#needed;
    const cache = this.#shared.byUrl.get(typeUrl);
    return needed === undefined || cache === undefined || needed(cache.type, cache.selective > 0)
      ? filter
      : undefined;
  }

  snapshot(typeUrl: string, signal: AbortSignal): Promise<Snapshot | undefined> {
    if (isAborted(signal)) return Promise.reject(abortError(signal, "snapshot"));
    return Promise.resolve(this.#shared.snapshot(typeUrl, this.#applying(typeUrl)));
  }

  snapshotNow(typeUrl: string): Snapshot | undefined {
    return this.#shared.snapshot(typeUrl, this.#applying(typeUrl));
  }

  onChange(listener: (typeUrl: string, key?: string) => void, signal: AbortSignal): void {
    if (signal.aborted) return;
    const listeners = this.#shared.listeners;
    listeners.add(listener);
    if (this.#listener === undefined) {
      this.#listener = listener;
      signal.addEventListener("abort", this, { once: true });
    } else signal.addEventListener("abort", () => listeners.delete(listener), { once: true });
  }

  /** The first listener's signal aborted: it stops hearing changes. */
  handleEvent(): void {
    if (this.#listener !== undefined) this.#shared.listeners.delete(this.#listener);
  }
}

/** Shared, incrementally updated wire form of the kinds a side serves. */
export class SnapshotCache {
  readonly #store: ResourceStore;
  readonly #logger: Logger;
  readonly #retry: BackoffOptions | undefined;
  readonly #serves: ((resource: StoredResource) => boolean) | undefined;
  readonly #fanOut: SnapshotCacheOptions["fanOut"];
  readonly #selective: (resource: StoredResource) => boolean;
  readonly #kinds = new Map<string, KindCache>();
  readonly #byUrl = new Map<string, KindCache>();
  readonly #listeners = new Set<(typeUrl: string, key?: string) => void>();
  /** What every stream's {@link CacheSource} reads: made once here, so a stream's source is three fields, not closures. */
  readonly #shared: SharedCache;
  #error: string | undefined;

  /**
   * @param store - where the resources live
   * @param types - the kinds to serve
   * @param options - logger and retry delays
   */
  constructor(store: ResourceStore, types: readonly ResourceType[], options: SnapshotCacheOptions) {
    this.#store = store;
    this.#logger = options.logger;
    this.#retry = options.retry;
    this.#serves = options.serves;
    this.#fanOut = options.fanOut;
    this.#selective = options.selective ?? (() => false);
    for (const type of types) {
      const cache: KindCache = {
        type,
        loadedAt: undefined,
        ready: false,
        entries: new Map(),
        digest: new SetDigest(),
        selective: 0,
        whole: undefined,
      };
      this.#kinds.set(type.kind, cache);
      this.#byUrl.set(type.typeUrl, cache);
    }
    this.#shared = {
      typeUrls: Object.freeze([...this.#byUrl.keys()]),
      byUrl: this.#byUrl,
      listeners: this.#listeners,
      snapshot: (typeUrl, filter) => this.#snapshot(typeUrl, filter),
    };
  }

  /** Type URLs served. */
  get typeUrls(): string[] {
    return [...this.#byUrl.keys()];
  }

  /** The state of every served kind. */
  state(): ServedKindState[] {
    return [...this.#kinds.values()].map((c) => ({
      kind: c.type.kind,
      loaded: c.ready,
      error: this.#error,
      resources: c.entries.size,
    }));
  }

  /**
   * Loads every kind, then follows the store's change feed until `signal`
   * aborts. Never rejects: failures are logged, kept for {@link state} and
   * retried with backoff.
   */
  start(signal: AbortSignal): void {
    if (this.#kinds.size === 0) return;
    void this.#follow(signal);
  }

  /** Whether the kind of `typeUrl` holds selective resources now. */
  holdsSelective(typeUrl: string): boolean {
    return (this.#byUrl.get(typeUrl)?.selective ?? 0) > 0;
  }

  /**
   * A source for one stream; `filter` picks which resources that stream
   * sees. With `needed`, the filter applies to a kind only while `needed`
   * says so, told whether the kind holds selective resources now; otherwise
   * the stream sees all of it.
   */
  source(
    filter?: (resource: StoredResource) => boolean,
    needed?: (type: ResourceType, selective: boolean) => boolean,
  ): SnapshotSource {
    return new CacheSource(this.#shared, filter, needed);
  }

  /** Tells every stream that what it sees of every kind may have changed (its filter's inputs changed). */
  touch(): void {
    for (const cache of this.#kinds.values()) {
      if (!cache.ready) continue;
      for (const listener of this.#listeners) listener(cache.type.typeUrl);
    }
  }

  async #follow(signal: AbortSignal): Promise<void> {
    await followStore({
      store: this.#store,
      kinds: [...this.#kinds.keys()],
      signal,
      what: "the served kinds (they keep their last loaded state meanwhile)",
      logger: this.#logger,
      retry: this.#retry,
      begin: async (signal, compacted) => {
        // After a compaction, changes were missed: list every kind again.
        if (compacted) for (const cache of this.#kinds.values()) cache.loadedAt = undefined;
        for (const cache of this.#kinds.values()) {
          if (cache.loadedAt === undefined) await this.#load(cache, signal);
        }
        return Math.min(...[...this.#kinds.values()].map((c) => c.loadedAt ?? 0));
      },
      onChange: (change) => this.#apply(change),
      onError: (error) => {
        this.#error = error instanceof Error ? error.message : String(error);
      },
      onRecovered: () => {
        this.#error = undefined;
      },
    });
  }

  /** Lists one kind and replaces what the cache holds of it; tells every stream. */
  async #load(cache: KindCache, signal: AbortSignal): Promise<void> {
    const { revision, resources } = await this.#store.list(cache.type.kind, { signal });
    const present = new Set<string>();
    for (const resource of resources)
      if (this.#serves?.(resource) !== false) present.add(this.#set(cache, resource));
    for (const [key, gone] of cache.entries) {
      if (present.has(key)) continue;
      this.#drop(cache, key, gone);
    }
    cache.loadedAt = revision;
    cache.ready = true;
    for (const listener of this.#listeners) listener(cache.type.typeUrl);
  }

  #apply(change: StoreChange): void {
    const kind = change.op === "put" ? change.resource.kind : change.ref.kind;
    const cache = this.#kinds.get(kind);
    if (cache === undefined || cache.loadedAt === undefined || change.revision <= cache.loadedAt)
      return;
    let key: string;
    if (change.op === "put" && this.#serves?.(change.resource) !== false)
      key = this.#set(cache, change.resource);
    else {
      key =
        change.op === "put"
          ? resourceKey(change.resource.meta.mesh, change.resource.meta.name)
          : resourceKey(change.ref.mesh, change.ref.name);
      const gone = cache.entries.get(key);
      if (gone === undefined) return;
      this.#drop(cache, key, gone);
    }
    const fanOut = this.#fanOut;
    if (fanOut === undefined) {
      for (const listener of this.#listeners) listener(cache.type.typeUrl, key);
      return;
    }
    fanOut(change, kind, key, () => {
      for (const listener of this.#listeners) listener(cache.type.typeUrl, key);
    });
  }

  #snapshot(
    typeUrl: string,
    filter: ((r: StoredResource) => boolean) | undefined,
  ): Snapshot | undefined {
    const cache = this.#byUrl.get(typeUrl);
    if (cache === undefined || !cache.ready) return undefined;
    const entries = cache.entries;
    if (filter === undefined) {
      cache.whole ??= {
        version: cache.digest.toString(),
        resources: {
          get: (key) => entries.get(key)?.wire,
          [Symbol.iterator]: () => wires(entries.values(), undefined),
        },
      };
      return cache.whole;
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

  /** Puts one resource into the cache (re-encoding it only if its version changed); returns its key. */
  #set(cache: KindCache, resource: StoredResource): string {
    const key = resourceKey(resource.meta.mesh, resource.meta.name);
    const previous = cache.entries.get(key);
    if (previous !== undefined) {
      if (previous.resource.meta.version === resource.meta.version) return key;
      this.#drop(cache, key, previous);
    }
    const entry = { resource, wire: toWire(cache.type, resource) };
    cache.whole = undefined;
    cache.entries.set(key, entry);
    cache.digest.add(key, entry.wire.version);
    if (this.#selective(resource)) cache.selective++;
    return key;
  }

  #drop(cache: KindCache, key: string, gone: Entry): void {
    cache.whole = undefined;
    cache.entries.delete(key);
    cache.digest.remove(key, gone.wire.version);
    if (this.#selective(gone.resource)) cache.selective--;
  }
}

function* wires(
  entries: Iterable<Entry>,
  filter: ((r: StoredResource) => boolean) | undefined,
): Generator<WireResource> {
  for (const entry of entries) if (filter === undefined || filter(entry.resource)) yield entry.wire;
}
