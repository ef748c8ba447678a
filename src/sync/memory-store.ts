/**
 * The default {@link ResourceStore}: everything in memory, versions from a
 * store-wide counter.
 *
 * @module
 */
import { clone } from "@bufbuild/protobuf";
import { KdsError, abortError } from "../errors.ts";
import { RESOURCE_NAME_PATTERN, type ResourceMeta, type StoredResource, type TypeRegistry } from "./resource-types.ts";
import type { ListOptions, ResourceChange, ResourceInput, ResourceStore, WriteOptions } from "./store.ts";

/** Checks a resource against its registered type; throws `unknown_type` or `invalid_resource`. */
export function validateInput(types: TypeRegistry, input: ResourceInput): void {
  const type = types.get(input.kind);
  const mesh = input.mesh ?? "";
  const what = `${type.kind} "${mesh === "" ? input.name : `${mesh}/${input.name}`}"`;
  if (!RESOURCE_NAME_PATTERN.test(input.name)) {
    throw new KdsError("invalid_resource", `${what}: a name is 1 to 253 letters, digits, '.', '-' or '_', starting with a letter or digit`);
  }
  if (type.scope === "mesh" && !RESOURCE_NAME_PATTERN.test(mesh)) {
    throw new KdsError("invalid_resource", `${what}: ${type.kind} is mesh-scoped; give it a mesh`);
  }
  if (type.scope === "cluster" && mesh !== "") {
    throw new KdsError("invalid_resource", `${what}: ${type.kind} is cluster-scoped and belongs to no mesh; drop the mesh`);
  }
  if (input.spec.$typeName !== type.schema.typeName) {
    throw new KdsError("invalid_resource", `${what}: the spec is a ${input.spec.$typeName}, but ${type.kind} takes a ${type.schema.typeName}`);
  }
}

/** Resources kept in memory; the default store of both roles. */
export class InMemoryStore implements ResourceStore {
  readonly #types: TypeRegistry;
  readonly #byKind = new Map<string, Map<string, StoredResource>>();
  readonly #listeners = new Set<(change: ResourceChange) => void>();
  #revision = 0;

  /** @param types - the registered types; writes of other kinds are refused */
  constructor(types: TypeRegistry) {
    this.#types = types;
  }

  get(kind: string, mesh: string, name: string, options?: { signal?: AbortSignal }): Promise<StoredResource | undefined> {
    if (options?.signal?.aborted) return Promise.reject(abortError(options.signal, "get"));
    return Promise.resolve(this.#bucket(kind).get(key(mesh, name)));
  }

  list(kind: string, options: ListOptions = {}): Promise<StoredResource[]> {
    if (options.signal?.aborted) return Promise.reject(abortError(options.signal, "list"));
    const labels = options.labels === undefined ? [] : Object.entries(options.labels);
    const out: StoredResource[] = [];
    for (const r of this.#bucket(kind).values()) {
      if (options.mesh !== undefined && r.meta.mesh !== options.mesh) continue;
      if (labels.some(([k, v]) => r.meta.labels[k] !== v)) continue;
      out.push(r);
    }
    out.sort((a, b) => (a.meta.mesh === b.meta.mesh ? cmp(a.meta.name, b.meta.name) : cmp(a.meta.mesh, b.meta.mesh)));
    return Promise.resolve(out);
  }

  put(input: ResourceInput, options: WriteOptions = {}): Promise<StoredResource> {
    if (options.signal?.aborted) return Promise.reject(abortError(options.signal, "put"));
    try {
      validateInput(this.#types, input);
    } catch (error) {
      return Promise.reject(error);
    }
    const type = this.#types.get(input.kind);
    const mesh = input.mesh ?? "";
    const bucket = this.#bucket(type.kind);
    const k = key(mesh, input.name);
    const existing = bucket.get(k);
    const conflict = checkVersion(type.kind, k, existing, options.expectedVersion);
    if (conflict !== undefined) return Promise.reject(conflict);
    const now = new Date();
    const meta: ResourceMeta = Object.freeze({
      name: input.name,
      mesh,
      labels: Object.freeze({ ...(input.labels ?? {}) }),
      version: String(++this.#revision),
      creationTime: existing?.meta.creationTime ?? now,
      modificationTime: now,
    });
    const stored: StoredResource = Object.freeze({ kind: type.kind, meta, spec: clone(type.schema, input.spec) });
    bucket.set(k, stored);
    this.#emit({ kind: type.kind, mesh, name: input.name, op: "put" });
    return Promise.resolve(stored);
  }

  delete(kind: string, mesh: string, name: string, options: WriteOptions = {}): Promise<boolean> {
    if (options.signal?.aborted) return Promise.reject(abortError(options.signal, "delete"));
    const type = this.#types.find(kind);
    if (type === undefined) return Promise.resolve(false);
    const bucket = this.#bucket(type.kind);
    const k = key(mesh, name);
    const existing = bucket.get(k);
    if (options.expectedVersion !== undefined) {
      const conflict = checkVersion(type.kind, k, existing, options.expectedVersion);
      if (conflict !== undefined) return Promise.reject(conflict);
    }
    if (existing === undefined) return Promise.resolve(false);
    bucket.delete(k);
    this.#revision++;
    this.#emit({ kind: type.kind, mesh, name, op: "delete" });
    return Promise.resolve(true);
  }

  watch(listener: (change: ResourceChange) => void, signal: AbortSignal): void {
    if (signal.aborted) return;
    this.#listeners.add(listener);
    signal.addEventListener("abort", () => this.#listeners.delete(listener), { once: true });
  }

  #bucket(kind: string): Map<string, StoredResource> {
    const canonical = this.#types.find(kind)?.kind ?? kind;
    let bucket = this.#byKind.get(canonical);
    if (bucket === undefined) {
      bucket = new Map();
      this.#byKind.set(canonical, bucket);
    }
    return bucket;
  }

  #emit(change: ResourceChange): void {
    for (const listener of this.#listeners) listener(change);
  }
}

function key(mesh: string, name: string): string {
  return `${mesh}\u0000${name}`;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function checkVersion(kind: string, k: string, existing: StoredResource | undefined, expected: string | undefined): KdsError | undefined {
  if (expected === undefined) return undefined;
  const actual = existing?.meta.version ?? "";
  if (actual === expected) return undefined;
  const what = `${kind} "${k.replace("\u0000", "/").replace(/^\//, "")}"`;
  return new KdsError(
    "conflict",
    expected === ""
      ? `${what} already exists (version ${actual}); read it and write with its version to replace it`
      : actual === ""
        ? `${what} no longer exists (expected version ${expected})`
        : `${what} changed since it was read (expected version ${expected}, found ${actual}); read it again and retry`,
  );
}
