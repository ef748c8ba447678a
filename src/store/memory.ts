/**
 * The in-memory {@link ResourceStore}: the library's default. Revisions come
 * from one counter; the change feed is a bounded log of the latest changes
 * that every watcher reads at its own pace (nothing is queued per watcher),
 * bounded both in changes and in (estimated) bytes, because a change holds
 * the whole resource written and peers choose how large those are.
 *
 * @module
 */
import { toBinary } from "@bufbuild/protobuf";
import { KdsError, abortError } from "../errors.ts";
import {
  resourceKey,
  type StoredResourceMeta,
  type StoredResource,
  type TypeRegistry,
} from "../kinds/resource-types.ts";
import type {
  ApplyOptions,
  ApplyResult,
  ListOptions,
  ListResult,
  ResourceInput,
  ResourceName,
  ResourceStore,
  StoreChange,
  WatchOptions,
  WriteOp,
  WriteOptions,
} from "./contract.ts";
import { keptLabels, keptSpec } from "./kept.ts";
import { byMeshThenName, matchesLabels, validateInput, versionConflict } from "./validate.ts";
import { isAborted } from "../util/abort.ts";
import { systemClock, type Clock } from "../util/clock.ts";
import {
  checkClaim,
  fencedOut,
  type Lease,
  type LeaseAttempt,
  type LeaseCallOptions,
  type LeaseClaim,
  type LeaseRecord,
  type LeaseStore,
  type WriteFence,
} from "./lease.ts";

/** Options of {@link InMemoryStore}. */
export interface InMemoryStoreOptions {
  /** Changes kept for watchers that fall behind; older ones make `watch` fail with `store_compacted`. Default 100,000. */
  readonly historyLimit?: number;
  /**
   * Bytes of history kept, estimated per change (about 1 KiB, plus twice the
   * spec's encoded size, plus two bytes per character of names and labels);
   * the oldest changes go first when it is exceeded. Default 64 MiB. Without
   * it, a stream of writes of large or churning resources (a zone lease
   * rewritten by every session of a misbehaving zone) kept up to
   * `historyLimit` whole resources alive.
   */
  readonly historyBytes?: number;
  /** The clock leases expire by (see lease.ts). Default: the system clock. */
  readonly clock?: Clock;
}

/** A lease's current (or last) term in memory. */
interface HeldLease {
  readonly holder: string;
  readonly address: string;
  readonly revision: number;
  readonly durationMs: number;
  /** When the term ends, on the store's clock. */
  expiresAt: number;
}

/** Estimated heap bytes of a change besides its spec and strings (the change, meta and spec objects; measured about 1.1 KiB on V8). */
const CHANGE_OVERHEAD_BYTES = 1024;

/**
 * Estimated bytes a kept change holds: a fixed overhead, twice the spec's
 * encoded size (decoded messages are larger than their encoding) and two
 * bytes per character of its names and labels.
 */
function changeBytes(change: StoreChange, specBytes: number): number {
  if (change.op === "delete")
    return (
      CHANGE_OVERHEAD_BYTES / 2 +
      2 * (change.ref.kind.length + change.ref.mesh.length + change.ref.name.length)
    );
  const meta = change.resource.meta;
  let chars = meta.name.length + meta.mesh.length + meta.version.length;
  const labels = meta.labels;
  for (const k in labels)
    if (Object.hasOwn(labels, k)) chars += k.length + (labels[k] as string).length;
  return CHANGE_OVERHEAD_BYTES + 2 * specBytes + 2 * chars;
}

/**
 * The resources of one kind: mesh ("" for cluster-scoped) -> name ->
 * resource. Looked up by the resource's own name and mesh strings, not by a
 * joined "mesh/name" key: a key built per write was a new string to flatten
 * and hash on every lookup, about half the time of a 100k-resource write.
 */
type KindBucket = Map<string, Map<string, StoredResource>>;

/** A watch's check of a new batch (see `InMemoryStore.#watchers`). */
type PassOver = (changes: readonly StoreChange[], before: number) => boolean;

/** Resources kept in memory; its leases (lease.ts) serve control planes sharing this one object. */
export class InMemoryStore implements ResourceStore, LeaseStore {
  readonly #types: TypeRegistry;
  readonly #clock: Clock;
  readonly #leases = new Map<string, HeldLease>();
  readonly #byKind = new Map<string, KindBucket>();
  readonly #historyLimit: number;
  readonly #historyBytes: number;
  /** Changes with revisions `#logBase` .. `#revision`, oldest first. */
  #log: StoreChange[] = [];
  /** The estimated bytes of each change in `#log`, in the same order, and their sum. */
  #logSizes: number[] = [];
  #logBytes = 0;
  #logBase = 1;
  #revision = 0;
  /**
   * Each open watch's retry (see `#follow`), with its check of a new batch: whether the
   * watch holds nothing unread before the batch and none of the batch's
   * changes is of a kind it follows, in which case it has moved its cursor
   * past the batch and need not be woken (see {@link InMemoryStore.watch}).
   */
  readonly #watchers = new Map<() => void, PassOver>();

  /**
   * @param types - the registered types; writes of other kinds are refused
   * @param options - history bounds
   */
  constructor(types: TypeRegistry, options: InMemoryStoreOptions = {}) {
    this.#types = types;
    this.#historyLimit = options.historyLimit ?? 100_000;
    if (!Number.isInteger(this.#historyLimit) || this.#historyLimit < 1) {
      throw new KdsError(
        "invalid_argument",
        `historyLimit must be a positive integer, got ${this.#historyLimit}`,
      );
    }
    this.#clock = options.clock ?? systemClock;
    this.#historyBytes = options.historyBytes ?? 64 * 1024 * 1024;
    if (!Number.isInteger(this.#historyBytes) || this.#historyBytes < 1) {
      throw new KdsError(
        "invalid_argument",
        `historyBytes must be a positive integer, got ${this.#historyBytes}`,
      );
    }
  }

  get(
    kind: string,
    mesh: string,
    name: string,
    options?: { signal?: AbortSignal },
  ): Promise<StoredResource | undefined> {
    if (isAborted(options?.signal))
      return Promise.reject(abortError(options?.signal as AbortSignal, "get"));
    return Promise.resolve(this.#bucket(kind)?.get(mesh)?.get(name));
  }

  getMany(
    kind: string,
    refs: readonly ResourceName[],
    options?: { signal?: AbortSignal },
  ): Promise<Array<StoredResource | undefined>> {
    if (isAborted(options?.signal))
      return Promise.reject(abortError(options?.signal as AbortSignal, "getMany"));
    const bucket = this.#bucket(kind);
    return Promise.resolve(refs.map((r) => bucket?.get(r.mesh)?.get(r.name)));
  }

  list(kind: string, options: ListOptions = {}): Promise<ListResult> {
    if (isAborted(options.signal))
      return Promise.reject(abortError(options.signal as AbortSignal, "list"));
    const resources: StoredResource[] = [];
    const bucket = this.#bucket(kind);
    const meshes =
      options.mesh === undefined ? bucket?.values() : [bucket?.get(options.mesh) ?? new Map()];
    for (const names of meshes ?? [])
      for (const r of names.values())
        if (matchesLabels(r.meta.labels, options.labels)) resources.push(r);
    resources.sort(byMeshThenName);
    return Promise.resolve({ revision: this.#revision, resources });
  }

  async put(input: ResourceInput, options: WriteOptions = {}): Promise<StoredResource> {
    const { results } = await this.apply(
      [{ op: "put", input, expectedVersion: options.expectedVersion }],
      options,
    );
    return results[0] as StoredResource;
  }

  async delete(
    kind: string,
    mesh: string,
    name: string,
    options: WriteOptions = {},
  ): Promise<boolean> {
    const { results } = await this.apply(
      [{ op: "delete", kind, mesh, name, expectedVersion: options.expectedVersion }],
      options,
    );
    return results[0] as boolean;
  }

  apply(ops: readonly WriteOp[], options: ApplyOptions = {}): Promise<ApplyResult> {
    if (isAborted(options.signal))
      return Promise.reject(abortError(options.signal as AbortSignal, "apply"));
    if (options.fence !== undefined) {
      const refused = this.#fenceRefusal(options.fence);
      if (refused !== undefined) return Promise.reject(refused);
    }
    // Each op writes straight into its kind's map and keeps the value it replaced in `undo`; when an op fails, the
    // batch's writes are put back, newest first. Nothing runs in between (apply does not yield), so no reader sees
    // a part of a batch.
    // Flat triples (a mesh's names, name, replaced value), not an object per op: a sync writes batches of thousands.
    // (Helpers are methods, not closures: every change a zone applies comes through here.)
    const undo: Array<Map<string, StoredResource> | string | StoredResource | undefined> = [];
    const changes: StoreChange[] = [];
    const sizes: number[] = [];
    const results: Array<StoredResource | boolean> = [];
    let revision = this.#revision;
    const now = new Date();
    try {
      for (const op of ops) {
        if (op.op === "put") {
          validateInput(this.#types, op.input);
          const type = this.#types.get(op.input.kind);
          const mesh = op.input.mesh ?? "";
          const names = this.#namesOf(type.kind, mesh);
          const existing = names.get(op.input.name);
          const actual = existing?.meta.version ?? "";
          if (op.expectedVersion !== undefined && op.expectedVersion !== actual)
            throw versionConflict(
              type.kind,
              resourceKey(mesh, op.input.name),
              actual,
              op.expectedVersion,
            );
          const meta: StoredResourceMeta = Object.freeze({
            name: op.input.name,
            mesh,
            labels: keptLabels(op),
            version: String(++revision),
            creationTime: existing?.meta.creationTime ?? now,
            modificationTime: now,
          });
          const resource: StoredResource = Object.freeze({
            kind: type.kind,
            meta,
            spec: keptSpec(type.schema, op),
          });
          undo.push(names, op.input.name, existing);
          names.set(op.input.name, resource);
          const change: StoreChange = { op: "put", revision, resource };
          changes.push(change);
          // Bytes the caller already has (WriteOp.specBytes) spare encoding the spec only to size it.
          sizes.push(
            changeBytes(change, (op.specBytes ?? toBinary(type.schema, resource.spec)).byteLength),
          );
          results.push(resource);
        } else {
          const type = this.#types.get(op.kind);
          const names = this.#byKind.get(type.kind)?.get(op.mesh);
          const existing = names?.get(op.name);
          const actual = existing?.meta.version ?? "";
          if (op.expectedVersion !== undefined && op.expectedVersion !== actual)
            throw versionConflict(
              type.kind,
              resourceKey(op.mesh, op.name),
              actual,
              op.expectedVersion,
            );
          if (names === undefined || existing === undefined) {
            results.push(false);
            continue;
          }
          undo.push(names, op.name, existing);
          names.delete(op.name);
          const change: StoreChange = {
            op: "delete",
            revision: ++revision,
            ref: { kind: type.kind, mesh: op.mesh, name: op.name },
          };
          changes.push(change);
          sizes.push(changeBytes(change, 0));
          results.push(true);
        }
      }
    } catch (error) {
      for (let i = undo.length - 3; i >= 0; i -= 3) {
        const names = undo[i] as Map<string, StoredResource>;
        const name = undo[i + 1] as string;
        const replaced = undo[i + 2] as StoredResource | undefined;
        if (replaced === undefined) names.delete(name);
        else names.set(name, replaced);
      }
      this.#dropEmptyMeshes(ops, true);
      return Promise.reject(error);
    }
    this.#dropEmptyMeshes(ops, false);
    this.#record(changes, sizes);
    return Promise.resolve({ revision: this.#revision, results });
  }

  /** The `not_leader` error when `fence`'s term is not the current, unexpired one; undefined when it is. */
  #fenceRefusal(fence: WriteFence): KdsError | undefined {
    const held = this.#leases.get(fence.lease);
    if (held === undefined) return fencedOut(fence, "the lease was never taken");
    if (held.revision !== fence.revision)
      return fencedOut(fence, `term ${held.revision} of holder "${held.holder}" is current`);
    if (held.expiresAt <= this.#clock.now()) return fencedOut(fence, "it expired");
    return undefined;
  }

  acquireLease(claim: LeaseClaim, options: LeaseCallOptions = {}): Promise<LeaseAttempt> {
    if (isAborted(options.signal))
      return Promise.reject(abortError(options.signal as AbortSignal, "acquireLease"));
    checkClaim(claim);
    const now = this.#clock.now();
    const held = this.#leases.get(claim.name);
    if (held !== undefined && held.expiresAt > now && held.holder !== claim.holder)
      return Promise.resolve({ acquired: false, holder: this.#leaseRecord(claim.name, held, now) });
    const same = held !== undefined && held.expiresAt > now;
    const term: HeldLease = {
      holder: claim.holder,
      address: claim.address ?? "",
      revision: same ? held.revision : (held?.revision ?? 0) + 1,
      durationMs: claim.durationMs,
      expiresAt: now + claim.durationMs,
    };
    this.#leases.set(claim.name, term);
    return Promise.resolve({
      acquired: true,
      lease: {
        name: claim.name,
        holder: term.holder,
        revision: term.revision,
        durationMs: term.durationMs,
        address: term.address,
      },
    });
  }

  renewLease(lease: Lease, options: LeaseCallOptions = {}): Promise<boolean> {
    if (isAborted(options.signal))
      return Promise.reject(abortError(options.signal as AbortSignal, "renewLease"));
    const now = this.#clock.now();
    const held = this.#leases.get(lease.name);
    if (held === undefined || held.revision !== lease.revision || held.expiresAt <= now)
      return Promise.resolve(false);
    held.expiresAt = now + lease.durationMs;
    return Promise.resolve(true);
  }

  releaseLease(lease: Lease, options: LeaseCallOptions = {}): Promise<void> {
    if (isAborted(options.signal))
      return Promise.reject(abortError(options.signal as AbortSignal, "releaseLease"));
    const now = this.#clock.now();
    const held = this.#leases.get(lease.name);
    if (held !== undefined && held.revision === lease.revision && held.expiresAt > now)
      held.expiresAt = now;
    return Promise.resolve();
  }

  readLease(name: string, options: LeaseCallOptions = {}): Promise<LeaseRecord | undefined> {
    if (isAborted(options.signal))
      return Promise.reject(abortError(options.signal as AbortSignal, "readLease"));
    const held = this.#leases.get(name);
    return Promise.resolve(
      held === undefined ? undefined : this.#leaseRecord(name, held, this.#clock.now()),
    );
  }

  #leaseRecord(name: string, held: HeldLease, now: number): LeaseRecord {
    return {
      name,
      holder: held.holder,
      address: held.address,
      revision: held.revision,
      remainingMs: held.expiresAt - now,
    };
  }

  revision(options: { signal?: AbortSignal } = {}): Promise<number> {
    if (isAborted(options.signal))
      return Promise.reject(abortError(options.signal as AbortSignal, "revision"));
    return Promise.resolve(this.#revision);
  }

  watch(fromRevision: number, options: WatchOptions): AsyncIterable<StoreChange> {
    return { [Symbol.asyncIterator]: () => this.#follow(fromRevision, options) };
  }

  /**
   * The iterator of one watch, written out rather than as an async generator:
   * a change already in the log is handed over with one resolved promise,
   * where a generator's `yield` costs several promise turns. Following the
   * zone's store through a 100k-resource sync, the generator and its
   * `for await` were about a tenth of the zone's main thread (see
   * bench/README.md, "Where a 100k sync's time goes"). The behaviour is the
   * generator's: nothing happens before the first `next()`, which registers
   * the watcher and throws `store_compacted` for a revision ahead of the
   * store; the watch ends (done) once `signal` aborts; an error or `return()`
   * ends it and removes the watcher; calls of `next()` made before the last
   * one settled are answered in order.
   */
  #follow(fromRevision: number, options: WatchOptions): AsyncIterator<StoreChange> {
    const { signal } = options;
    const kinds =
      options.kinds === undefined
        ? undefined
        : new Set(options.kinds.map((k) => this.#types.find(k)?.kind ?? k));
    // Read per change below: a local set by the abort event costs nothing, the signal's getter (Node checks its
    // receiver each time) was a third of this loop's time in a profile of the zone in a 100k-resource sync.
    let aborted = false;
    const onAbort = (): void => {
      aborted = true;
      retry();
    };
    let cursor = fromRevision;
    let state: "new" | "open" | "done" = "new";
    /** The `next()` still waiting for a change, if any: a later call waits behind it. */
    let waiting: Promise<IteratorResult<StoreChange>> | undefined;
    /** How to settle `waiting`. */
    let parked:
      | {
          resolve(result: IteratorResult<StoreChange>): void;
          reject(reason: unknown): void;
        }
      | undefined;
    const done: IteratorResult<StoreChange> = { value: undefined, done: true };
    const finish = (): void => {
      if (state === "open") {
        this.#watchers.delete(retry);
        signal.removeEventListener("abort", onAbort);
      }
      state = "done";
    };
    /** The next change of the watched kinds in the log, or undefined when there is none yet. */
    const take = (): StoreChange | undefined => {
      if (state === "new") {
        state = "open";
        aborted = signal.aborted;
        this.#watchers.set(retry, passOver);
        signal.addEventListener("abort", onAbort, { once: true });
        if (cursor > this.#revision) {
          throw new KdsError(
            "store_compacted",
            `the store is at revision ${this.#revision}, behind the revision ${cursor} asked for (it was reset); list again`,
          );
        }
      }
      while (cursor < this.#revision && !aborted) {
        if (cursor + 1 < this.#logBase) {
          throw new KdsError(
            "store_compacted",
            `changes after revision ${cursor} are no longer kept (the oldest kept is ${this.#logBase}); list again`,
          );
        }
        const change = this.#log[cursor + 1 - this.#logBase] as StoreChange;
        cursor = change.revision;
        if (
          kinds === undefined ||
          kinds.has(change.op === "put" ? change.resource.kind : change.ref.kind)
        )
          return change;
      }
      return undefined;
    };
    /**
     * Moves the cursor past `changes` (written after revision `before`) and
     * returns true when the watch had read everything up to `before` and
     * follows none of their kinds: what `take` would do once woken, without
     * the wake-up. A zone's store has a watch per follower (the served
     * kinds' cache, the application), and each woken for every change of a
     * kind it does not follow cost a promise turn and a pass of this loop.
     * Large batches are left to `take`.
     */
    const passOver: PassOver = (changes, before) => {
      if (kinds === undefined || cursor !== before || changes.length > 64) return false;
      for (const change of changes)
        if (kinds.has(change.op === "put" ? change.resource.kind : change.ref.kind)) return false;
      cursor = (changes[changes.length - 1] as StoreChange).revision;
      return true;
    };
    /** One step: a change, or done; throws what `take` throws (the watch is then over). */
    const step = (): IteratorResult<StoreChange> | undefined => {
      if (state === "done") return done;
      try {
        const change = take();
        if (change !== undefined) return { value: change, done: false };
      } catch (error) {
        finish();
        throw error;
      }
      if (aborted) {
        finish();
        return done;
      }
      return undefined;
    };
    /**
     * Settles the waiting `next()` when there is now a change or an end for
     * it. Called where something may have changed (a batch recorded, the
     * abort, `return()`), at once: a waker's promise and an async loop
     * around it cost every watch two more promises and turns per change.
     */
    function retry(): void {
      const p = parked;
      if (p === undefined) return;
      let result: IteratorResult<StoreChange> | undefined;
      try {
        result = step();
      } catch (error) {
        parked = undefined;
        waiting = undefined;
        p.reject(error);
        return;
      }
      if (result === undefined) return;
      parked = undefined;
      waiting = undefined;
      p.resolve(result);
    }
    const next = (): Promise<IteratorResult<StoreChange>> => {
      if (waiting !== undefined) return waiting.then(next, next);
      let result: IteratorResult<StoreChange> | undefined;
      try {
        result = step();
      } catch (error) {
        return Promise.reject(error as Error);
      }
      if (result !== undefined) return Promise.resolve(result);
      const pending = new Promise<IteratorResult<StoreChange>>((resolve, reject) => {
        parked = { resolve, reject };
      });
      waiting = pending;
      return pending;
    };
    return {
      next,
      return: (): Promise<IteratorResult<StoreChange>> => {
        finish();
        retry(); // a next() waiting for a change ends (done)
        return Promise.resolve(done);
      },
    };
  }

  /** How much history the store keeps now: changes and their estimated bytes (see {@link InMemoryStoreOptions.historyBytes}). */
  historySize(): { changes: number; bytes: number } {
    return { changes: this.#log.length, bytes: this.#logBytes };
  }

  #record(changes: readonly StoreChange[], sizes: readonly number[]): void {
    if (changes.length === 0) return;
    for (const change of changes) this.#log.push(change);
    for (const size of sizes) {
      this.#logSizes.push(size);
      this.#logBytes += size;
    }
    this.#revision = (changes[changes.length - 1] as StoreChange).revision;
    // Drop the oldest in chunks (down to both bounds once either is 25% over), so trimming stays amortised O(1) per change.
    if (
      this.#log.length > this.#historyLimit * 1.25 ||
      this.#logBytes > this.#historyBytes * 1.25
    ) {
      let drop = Math.max(0, this.#log.length - this.#historyLimit);
      let bytes = this.#logBytes;
      for (let i = 0; i < drop; i++) bytes -= this.#logSizes[i] as number;
      while (bytes > this.#historyBytes && drop < this.#log.length - 1)
        bytes -= this.#logSizes[drop++] as number;
      this.#log = this.#log.slice(drop);
      this.#logSizes = this.#logSizes.slice(drop);
      this.#logBytes = bytes;
      this.#logBase += drop;
    }
    const before = (changes[0] as StoreChange).revision - 1;
    for (const [retry, passOver] of this.#watchers) if (!passOver(changes, before)) retry();
  }

  /** Drops the name maps `ops` may have left empty (a delete's, or after `undone`, a put's), so meshes once used do not pile up. */
  #dropEmptyMeshes(ops: readonly WriteOp[], undone: boolean): void {
    for (const op of ops) {
      if (op.op === "put" && !undone) continue;
      const kind = op.op === "put" ? op.input.kind : op.kind;
      const mesh = op.op === "put" ? (op.input.mesh ?? "") : op.mesh;
      const bucket = this.#byKind.get(this.#types.find(kind)?.kind ?? kind);
      if (bucket?.get(mesh)?.size === 0) bucket.delete(mesh);
    }
  }

  /** The names of `mesh` in `kind`'s bucket, made when missing (a mesh left empty is dropped after the batch). */
  #namesOf(kind: string, mesh: string): Map<string, StoredResource> {
    let bucket = this.#byKind.get(kind);
    if (bucket === undefined) {
      bucket = new Map();
      this.#byKind.set(kind, bucket);
    }
    let names = bucket.get(mesh);
    if (names === undefined) {
      names = new Map();
      bucket.set(mesh, names);
    }
    return names;
  }

  #bucket(kind: string): KindBucket | undefined {
    return this.#byKind.get(this.#types.find(kind)?.kind ?? kind);
  }
}
