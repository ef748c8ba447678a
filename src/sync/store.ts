/**
 * The storage seam: where resources live on each side. The in-memory store
 * is the default; the interface assumes neither a single process nor a single
 * writer (versions are optimistic, the change feed may come from elsewhere),
 * so a PostgreSQL-backed store can implement it for a multi-instance global.
 *
 * @module
 */
import type { Message } from "@bufbuild/protobuf";
import type { StoredResource } from "./resource-types.ts";

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

/** Options of a write. */
export interface WriteOptions {
  /**
   * Optimistic concurrency: the version the caller last read. "" means the
   * resource must not exist yet. A mismatch fails with `conflict`.
   */
  readonly expectedVersion?: string;
  /** Cancels the write if it has not happened yet. */
  readonly signal?: AbortSignal;
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

/** One entry of the change feed. */
export interface ResourceChange {
  /** Kind of the changed resource. */
  readonly kind: string;
  /** Its mesh ("" for cluster-scoped). */
  readonly mesh: string;
  /** Its name. */
  readonly name: string;
  /** What happened. */
  readonly op: "put" | "delete";
}

/** Where resources live. */
export interface ResourceStore {
  /** One resource, or undefined. */
  get(kind: string, mesh: string, name: string, options?: { signal?: AbortSignal }): Promise<StoredResource | undefined>;
  /** Every resource of `kind` matching the options, sorted by mesh then name. */
  list(kind: string, options?: ListOptions): Promise<StoredResource[]>;
  /** Creates or replaces a resource; the store assigns the version and times. */
  put(input: ResourceInput, options?: WriteOptions): Promise<StoredResource>;
  /** Deletes a resource; false when it did not exist. */
  delete(kind: string, mesh: string, name: string, options?: WriteOptions): Promise<boolean>;
  /**
   * The change feed: `listener` is called after each committed change (from
   * any writer, for stores shared by several processes) until `signal`
   * aborts. Listeners must return quickly; the feed buffers nothing.
   */
  watch(listener: (change: ResourceChange) => void, signal: AbortSignal): void;
}
