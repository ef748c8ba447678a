/**
 * Where a discovery client's resources land: a {@link ResourceSink} over a
 * store, with a mapping that decides local names and labels. Each response
 * is decoded and validated in full, then written with ONE atomic
 * `store.apply`: a NACKed response leaves the store as it was. Each spec
 * and each labels object is built for its write alone, so the sink hands
 * them over (`WriteOp.handOver`), with the spec's received bytes
 * (`WriteOp.specBytes`): the store need not copy them or encode the spec
 * again. A resource whose local copy cannot be stored (its mapped name is
 * too long, say) is left out and reported on its own; it does not block
 * the rest. The local copies of a delta response's removals are read with
 * one `store.getMany`, not one read per name.
 *
 * @module
 */
import type { Any } from "@bufbuild/protobuf/wkt";
import { KdsError } from "../errors.ts";
import type {
  ReceivedResource,
  ResourceRejection,
  ResourceSink,
  SinkResult,
} from "../discovery/types.ts";
import type { ResourceInput, ResourceStore, WriteOp } from "../store/contract.ts";
import { matchesLabels, validateInput } from "../store/validate.ts";
import {
  LABELS,
  parseResourceKey,
  resourceKey,
  type ResourceType,
  type StoredResource,
  type TypeRegistry,
} from "../kinds/resource-types.ts";
import { resolveBackoff, type BackoffOptions, type ResolvedBackoff } from "../util/backoff.ts";
import { retrying } from "../util/retry.ts";
import { fromWire, type DecodedResource } from "./wire.ts";
import type { DeletionGate } from "./reset-guard.ts";

/** How received resources map onto the local store. */
export interface SinkMapping {
  /** Labels that select this sink's copies in the local store. */
  readonly scope: Readonly<Record<string, string>>;
  /** Local name of a resource the sender calls `name`. */
  localName(name: string): string;
  /**
   * Labels of the local copy (kds.io/ labels from the sender are already
   * dropped in `userLabels`, a new object per call). Return a new object
   * each call (or `userLabels`): the sink hands it to the store, which may
   * keep and freeze it.
   */
  labels(resource: DecodedResource, userLabels: Record<string, string>): Record<string, string>;
  /** The discovery key a local copy stands for. */
  keyOf(local: StoredResource): string;
}

/**
 * The zone's mirror of global resources: same names, labelled as coming from
 * the global. A copy of another zone's zone-to-zones resource keeps the
 * attribution the global gave it (`kds.io/zone`, `kds.io/display-name`) and
 * its stale mark (`kds.io/origin-last-online`).
 */
export function mirrorMapping(): SinkMapping {
  return {
    scope: { [LABELS.origin]: "global" },
    localName: (name) => name,
    // `user` is a new object per call (it holds no kds.io/ label): the copy's labels are added to it, not to a copy of it.
    labels: (r, user) => {
      user[LABELS.origin] = "global";
      user[LABELS.originVersion] = r.version;
      const zone = r.labels[LABELS.zone];
      const display = r.labels[LABELS.displayName];
      const lastOnline = r.labels[LABELS.originLastOnline];
      if (zone !== undefined) user[LABELS.zone] = zone;
      if (display !== undefined) user[LABELS.displayName] = display;
      if (lastOnline !== undefined) user[LABELS.originLastOnline] = lastOnline;
      return user;
    },
    keyOf: (local) => resourceKey(local.meta.mesh, local.meta.name),
  };
}

/**
 * The global's copy of one zone's resources: named `<zone>.<name>` (zone
 * names hold no '.', so names of different zones never collide) and
 * attributed to the zone the session was admitted as (the name its zone
 * token or client certificate proved, unless the global runs without zone
 * authentication), whatever the zone wrote.
 */
export function zoneMapping(zone: string): SinkMapping {
  return {
    scope: { [LABELS.origin]: "zone", [LABELS.zone]: zone },
    localName: (name) => `${zone}.${name}`,
    labels: (r, user) => ({
      ...user,
      [LABELS.origin]: "zone",
      [LABELS.zone]: zone,
      [LABELS.displayName]: r.name,
      [LABELS.originVersion]: r.version,
    }),
    keyOf: (local) =>
      resourceKey(local.meta.mesh, local.meta.labels[LABELS.displayName] ?? local.meta.name),
  };
}

/** No keys (a response without removals). */
const NO_KEYS: readonly string[] = Object.freeze([]);

/** The keys of `resources`. */
function keysOf(resources: readonly ReceivedResource[]): string[] {
  const keys = new Array<string>(resources.length);
  for (let i = 0; i < resources.length; i++) keys[i] = (resources[i] as ReceivedResource).key;
  return keys;
}

/** Options of {@link StoreSink}. */
export interface StoreSinkOptions {
  /** Delays between retries of a failed read of what this side holds (before subscribing). */
  readonly retry?: BackoffOptions;
  /** Told about each failed read before it is retried. */
  readonly onRetry?: (error: unknown, delayMs: number) => void;
  /** Asked before local copies are deleted: it may keep some (the reset guard, reset-guard.ts). Default: none kept. */
  readonly gate?: DeletionGate;
}

/** A sink writing into `store` through `mapping`. */
export class StoreSink implements ResourceSink {
  readonly #store: ResourceStore;
  readonly #types: TypeRegistry;
  readonly #mapping: SinkMapping;
  readonly #retry: ResolvedBackoff;
  readonly #onRetry: (error: unknown, delayMs: number) => void;
  readonly #gate: DeletionGate | undefined;

  /**
   * @param store - the local store
   * @param types - registered types (responses of other types are rejected)
   * @param mapping - names and labels of local copies
   * @param options - retries of the resume read
   */
  constructor(
    store: ResourceStore,
    types: TypeRegistry,
    mapping: SinkMapping,
    options: StoreSinkOptions = {},
  ) {
    this.#store = store;
    this.#types = types;
    this.#mapping = mapping;
    this.#retry = resolveBackoff({ baseMs: 200, capMs: 10_000, ...options.retry });
    this.#onRetry = options.onRetry ?? ((): void => undefined);
    this.#gate = options.gate;
  }

  /** What this side holds of the type; a failing store is retried (with backoff) rather than read as empty. */
  async versions(typeUrl: string, signal: AbortSignal): Promise<Map<string, string>> {
    const type = this.#type(typeUrl);
    const out = new Map<string, string>();
    const { resources } = await retrying(
      signal,
      this.#retry,
      () => this.#store.list(type.kind, { labels: this.#mapping.scope, signal }),
      this.#onRetry,
    );
    for (const local of resources) {
      const version = local.meta.labels[LABELS.originVersion];
      if (version !== undefined) out.set(this.#mapping.keyOf(local), version);
    }
    this.#gate?.resumed(typeUrl, out.size);
    return out;
  }

  async replace(
    typeUrl: string,
    resources: readonly Any[],
    signal: AbortSignal,
  ): Promise<SinkResult> {
    const type = this.#type(typeUrl);
    const desired = new Map<string, DecodedResource>();
    for (const any of resources) {
      const decoded = fromWire(type, any);
      if (desired.has(decoded.key))
        throw new KdsError(
          "invalid_resource",
          `${type.kind} "${decoded.key}" appears twice in one response`,
        );
      desired.set(decoded.key, decoded);
    }
    const existing = new Map<string, StoredResource>();
    const { resources: held } = await this.#store.list(type.kind, {
      labels: this.#mapping.scope,
      signal,
    });
    for (const local of held) existing.set(this.#mapping.keyOf(local), local);
    const ops: WriteOp[] = [];
    const rejected: ResourceRejection[] = [];
    const puts: {
      key: string;
      input: ResourceInput;
      expectedVersion: string;
      specBytes: Uint8Array | undefined;
    }[] = [];
    for (const [key, decoded] of desired) {
      const local = existing.get(key);
      if (local?.meta.labels[LABELS.originVersion] === decoded.version) continue;
      const input = this.#input(type, decoded, rejected);
      if (input !== undefined)
        puts.push({
          key,
          input,
          expectedVersion: local?.meta.version ?? "",
          specBytes: decoded.specBytes,
        });
    }
    for (const p of await this.#notForeign(
      type,
      puts.filter((p) => p.expectedVersion === ""),
      rejected,
      signal,
    ))
      ops.push({
        op: "put",
        input: p.input,
        expectedVersion: "",
        handOver: true,
        specBytes: p.specBytes,
      });
    for (const p of puts)
      if (p.expectedVersion !== "")
        ops.push({
          op: "put",
          input: p.input,
          expectedVersion: p.expectedVersion,
          handOver: true,
          specBytes: p.specBytes,
        });
    const deleting = [...existing.keys()].filter((key) => !desired.has(key));
    const kept = this.#gate?.keep(typeUrl, deleting, existing.size, [...desired.keys()]);
    for (const key of deleting) {
      const local = existing.get(key) as StoredResource;
      if (kept?.has(key) !== true)
        ops.push({
          op: "delete",
          kind: type.kind,
          mesh: local.meta.mesh,
          name: local.meta.name,
          expectedVersion: local.meta.version,
        });
    }
    if (ops.length > 0) await this.#store.apply(ops, { signal });
    return { rejected };
  }

  async apply(
    typeUrl: string,
    resources: readonly ReceivedResource[],
    removed: readonly string[],
    signal: AbortSignal,
  ): Promise<SinkResult> {
    const type = this.#type(typeUrl);
    const ops: WriteOp[] = [];
    const rejected: ResourceRejection[] = [];
    // Only zone-to-zones puts are read against the store first (#notForeign); the others go straight into `ops`.
    const puts:
      | { key: string; input: ResourceInput; specBytes: Uint8Array | undefined }[]
      | undefined = type.direction === "zone-to-zones" ? [] : undefined;
    for (const r of resources) {
      const decoded = fromWire(type, r.any, r.key);
      if (decoded.version !== r.version)
        throw new KdsError(
          "invalid_resource",
          `${type.kind} "${r.key}": version ${r.version} in the response but ${decoded.version} in the resource`,
        );
      const input = this.#input(type, decoded, rejected);
      if (input === undefined) continue;
      if (puts === undefined)
        ops.push({ op: "put", input, handOver: true, specBytes: decoded.specBytes });
      else puts.push({ key: r.key, input, specBytes: decoded.specBytes });
    }
    if (puts !== undefined)
      for (const p of await this.#notForeign(type, puts, rejected, signal))
        ops.push({ op: "put", input: p.input, handOver: true, specBytes: p.specBytes });
    if (removed.length === 0) {
      // Nearly every response of a change: nothing to read or delete. The gate is still told (its first response
      // of a kind decides whether a reset is held, and one held gives back what this one writes).
      this.#gate?.keep(typeUrl, NO_KEYS, undefined, keysOf(resources));
      if (ops.length > 0) await this.#store.apply(ops, { signal });
      return { rejected };
    }
    // The local copies of every removed key, read in one go (not one read per name); a key named twice is read and deleted once.
    const keys = [...new Set(removed)];
    const gone = keys.map((key) => {
      const { mesh, name } = parseResourceKey(key);
      return { mesh, name: this.#mapping.localName(name) };
    });
    const locals = gone.length === 0 ? [] : await this.#store.getMany(type.kind, gone, { signal });
    // Only ever delete this sink's own copies, and only the version just read.
    const own = (i: number): StoredResource | undefined => {
      const local = locals[i];
      return local !== undefined && matchesLabels(local.meta.labels, this.#mapping.scope)
        ? local
        : undefined;
    };
    const kept = this.#gate?.keep(
      typeUrl,
      keys.filter((_, i) => own(i) !== undefined),
      undefined,
      keysOf(resources),
    );
    gone.forEach(({ mesh, name }, i) => {
      const local = own(i);
      if (local !== undefined && kept?.has(keys[i] as string) !== true) {
        ops.push({
          op: "delete",
          kind: type.kind,
          mesh,
          name,
          expectedVersion: local.meta.version,
        });
      }
    });
    if (ops.length > 0) await this.#store.apply(ops, { signal });
    return { rejected };
  }

  /**
   * Of zone-to-zones `puts`, those whose local name holds nothing but this
   * sink's own copy: in a zone, another zone's resource never overwrites one
   * this zone made under the same name (it is left out and reported). Other
   * kinds cannot collide (each side writes only its own kinds) and pass
   * unread.
   */
  async #notForeign<P extends { key: string; input: ResourceInput }>(
    type: ResourceType,
    puts: P[],
    rejected: ResourceRejection[],
    signal: AbortSignal,
  ): Promise<P[]> {
    if (type.direction !== "zone-to-zones" || puts.length === 0) return puts;
    const locals = await this.#store.getMany(
      type.kind,
      puts.map((p) => ({ mesh: p.input.mesh ?? "", name: p.input.name })),
      { signal },
    );
    return puts.filter((p, i) => {
      const local = locals[i];
      if (local === undefined || matchesLabels(local.meta.labels, this.#mapping.scope)) return true;
      rejected.push({
        key: p.key,
        reason: `a ${type.kind} named "${p.input.name}" was made on this side; it is kept, and this copy is left out (rename one of them)`,
      });
      return false;
    });
  }

  #type(typeUrl: string): ResourceType {
    const type = this.#types.byTypeUrl(typeUrl);
    if (type === undefined)
      throw new KdsError(
        "unknown_type",
        `no resource type is registered for ${typeUrl}; register it on both sides`,
      );
    return type;
  }

  /** The local copy to write, or undefined (and a rejection) when this store cannot hold it. */
  #input(
    type: ResourceType,
    decoded: DecodedResource,
    rejected: ResourceRejection[],
  ): ResourceInput | undefined {
    const user: Record<string, string> = {};
    const sent = decoded.labels;
    for (const k in sent)
      if (Object.hasOwn(sent, k) && !k.startsWith("kds.io/")) user[k] = sent[k] as string;
    const name = this.#mapping.localName(decoded.name);
    const input: ResourceInput = {
      kind: type.kind,
      mesh: decoded.mesh,
      name,
      labels: this.#mapping.labels(decoded, user),
      spec: decoded.spec,
    };
    // fromWire checked the sent name, mesh and scope as validateInput does, and decoded the spec as the kind's
    // message: only a local name other than the sent one (zoneMapping's prefix) can make the copy unstorable.
    if (name === decoded.name) return input;
    try {
      validateInput(this.#types, input);
      return input;
    } catch (error) {
      if (!KdsError.is(error, "invalid_resource")) throw error;
      rejected.push({
        key: decoded.key,
        reason: `cannot be stored on this side: ${error.message}`,
      });
      return undefined;
    }
  }
}
