/**
 * The store contract, version 2: where resources live on each side, and the
 * one guarantee sync builds on. Every implementation (memory, embedded,
 * PostgreSQL) passes the same conformance suite (`test/store/`).
 *
 * - Every write gets a revision from ONE increasing sequence per store; a
 *   resource's `meta.version` is the revision of its last write.
 * - {@link ResourceStore.list} returns a consistent snapshot together with the
 *   revision it reflects.
 * - {@link ResourceStore.watch} yields every change after a revision, in
 *   order, each carrying the resource (or a tombstone), so no consumer
 *   re-reads the store. A store that can no longer resume from that far back
 *   fails with `store_compacted`, and the consumer lists again.
 * - {@link ResourceStore.apply} is atomic: all of a batch or nothing.
 * - {@link ResourceStore.getMany} reads many names of a kind in one go.
 * - put/delete take an optional expected version (optimistic concurrency).
 * - A store that cannot answer fails with `store_unavailable`; callers retry
 *   with backoff and never read a failure as "empty".
 *
 * @module
 */
import type { Message } from "@bufbuild/protobuf";
import type { StoredResource } from "../kinds/resource-types.ts";
import type { WriteFence } from "./lease.ts";

/** A resource to write. */
export interface ResourceInput<T extends Message = Message> {
  /** The kind. */
  readonly kind: string;
  /** Mesh for mesh-scoped kinds; omit or "" for cluster-scoped ones. */
  readonly mesh?: string;
  /** Name. */
  readonly name: string;
  /** Labels (replaces the stored labels). */
  readonly labels?: Readonly<Record<string, string>>;
  /** The spec, an instance of the kind's message. */
  readonly spec: T;
}

/** Options of a single write. */
export interface WriteOptions {
  /**
   * Optimistic concurrency: the version the caller last read. "" means the
   * resource must not exist yet. A mismatch fails with `conflict`.
   */
  readonly expectedVersion?: string;
  /** Cancels the write if it has not happened yet. */
  readonly signal?: AbortSignal;
  /**
   * Writes only while the lease's term is current (see lease.ts): otherwise
   * fails with `not_leader` and writes nothing. Checked in the write's own
   * transaction, by stores that keep leases; a store that keeps none
   * refuses a fenced write.
   */
  readonly fence?: WriteFence;
}

/** Options of {@link ResourceStore.apply}. */
export interface ApplyOptions {
  /** Cancels the batch if it has not been written yet. */
  readonly signal?: AbortSignal;
  /** Writes the batch only while the lease's term is current (see {@link WriteOptions.fence}). */
  readonly fence?: WriteFence;
}

/** Options of a list. */
export interface ListOptions {
  /** Only resources of this mesh. */
  readonly mesh?: string;
  /** Only resources carrying all these labels with these values. */
  readonly labels?: Readonly<Record<string, string>>;
  /** Cancels the list. */
  readonly signal?: AbortSignal;
}

/** A consistent snapshot of one kind. */
export interface ListResult {
  /** The store's revision this snapshot reflects: every change up to it, none after. */
  readonly revision: number;
  /** The resources, sorted by mesh then name. */
  readonly resources: StoredResource[];
}

/** One write of a batch passed to {@link ResourceStore.apply}. */
export type WriteOp =
  | {
      readonly op: "put";
      readonly input: ResourceInput;
      readonly expectedVersion?: string;
      /**
       * The caller built `input.spec` and `input.labels` for this write
       * alone (a resource received from a peer) and hands them over: a
       * store may keep those very objects (and freeze them) rather than
       * copies. The caller must not change or reuse them afterwards. A
       * store may ignore it (the write is the same either way).
       */
      readonly handOver?: boolean;
      /**
       * Protobuf binary that decodes to `input.spec`, when the caller has it
       * (it decoded the spec from it): a store may use it rather than encode
       * the spec again. The caller does not change it during the call; the
       * store keeps no reference to it past the call (it may be a view into
       * a larger received buffer). A store may ignore it.
       */
      readonly specBytes?: Uint8Array;
    }
  | {
      readonly op: "delete";
      readonly kind: string;
      readonly mesh: string;
      readonly name: string;
      readonly expectedVersion?: string;
    };

/** What {@link ResourceStore.apply} did, op by op. */
export interface ApplyResult {
  /** The store's revision after the batch (unchanged when nothing was written). */
  readonly revision: number;
  /** Per op, in order: the stored resource of a put, or whether a delete removed something. */
  readonly results: ReadonlyArray<StoredResource | boolean>;
}

/** A resource's mesh and name, within a kind. */
export interface ResourceName {
  /** Its mesh ("" for cluster-scoped). */
  readonly mesh: string;
  /** Its name. */
  readonly name: string;
}

/** The identity of a resource in a store. */
export interface ResourceRef {
  /** Its kind. */
  readonly kind: string;
  /** Its mesh ("" for cluster-scoped). */
  readonly mesh: string;
  /** Its name. */
  readonly name: string;
}

/** One entry of the change feed: the new resource, or a tombstone. */
export type StoreChange =
  | { readonly op: "put"; readonly revision: number; readonly resource: StoredResource }
  | { readonly op: "delete"; readonly revision: number; readonly ref: ResourceRef };

/** Options of {@link ResourceStore.watch}. */
export interface WatchOptions {
  /** Ends the watch: the iteration finishes without an error. */
  readonly signal: AbortSignal;
  /** Only changes of these kinds (default: every kind). */
  readonly kinds?: readonly string[];
}

/** Where resources live. */
export interface ResourceStore {
  /** One resource, or undefined. */
  get(
    kind: string,
    mesh: string,
    name: string,
    options?: { signal?: AbortSignal },
  ): Promise<StoredResource | undefined>;
  /**
   * Several resources of one kind at once: per ref, in order, the resource
   * or undefined. One read for the lot (a store may split a very long list
   * into a few bounded reads), where a `get` per name would cost a round
   * trip each; sync reads a response's removals this way. Every ref is
   * read from one snapshot only when the store reads them in one query;
   * callers that write on the strength of what they read pass the versions
   * read as `expectedVersion`.
   */
  getMany(
    kind: string,
    refs: readonly ResourceName[],
    options?: { signal?: AbortSignal },
  ): Promise<Array<StoredResource | undefined>>;
  /** A consistent snapshot of the resources of `kind` matching the options, with its revision. */
  list(kind: string, options?: ListOptions): Promise<ListResult>;
  /** Creates or replaces a resource; the store assigns the version and times. */
  put(input: ResourceInput, options?: WriteOptions): Promise<StoredResource>;
  /** Deletes a resource; false when it did not exist. */
  delete(kind: string, mesh: string, name: string, options?: WriteOptions): Promise<boolean>;
  /**
   * Writes a batch atomically: every op or none (a failing op, a validation
   * error or a version conflict rejects the whole batch and changes nothing).
   * All ops share one transaction; each write still gets its own revision.
   */
  apply(ops: readonly WriteOp[], options?: ApplyOptions): Promise<ApplyResult>;
  /** The store's current revision (0 for an empty store that was never written). */
  revision(options?: { signal?: AbortSignal }): Promise<number>;
  /**
   * Every change with a revision greater than `fromRevision`, in revision
   * order, until `options.signal` aborts (then the iteration ends). Rejects
   * with `store_compacted` when changes after `fromRevision` are no longer
   * kept (list again), and with `store_unavailable` when the store cannot be
   * reached (watch again from the last revision seen, after a backoff). The
   * iterator pulls: a slow consumer holds back only itself.
   */
  watch(fromRevision: number, options: WatchOptions): AsyncIterable<StoreChange>;
  /** Releases connections; later calls fail. */
  close?(): Promise<void>;
}
