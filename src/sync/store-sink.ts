/**
 * Where a discovery client's resources land: a {@link ResourceSink} over a
 * store, with a mapping that decides local names and labels. Every response
 * is decoded and validated in full before anything is written, so a NACKed
 * response leaves the store as it was.
 *
 * @module
 */
import type { Any } from "@bufbuild/protobuf/wkt";
import { KdsError } from "../errors.ts";
import type { ReceivedResource, ResourceSink } from "../discovery/types.ts";
import { LABELS, parseResourceKey, type ResourceType, type StoredResource, type TypeRegistry } from "./resource-types.ts";
import type { ResourceStore } from "./store.ts";
import { fromWire, type DecodedResource } from "./wire.ts";

/** How received resources map onto the local store. */
export interface SinkMapping {
  /** Labels that select this sink's copies in the local store. */
  readonly scope: Readonly<Record<string, string>>;
  /** Local name of a resource the sender calls `name`. */
  localName(name: string): string;
  /** Labels of the local copy (kds.io/ labels from the sender are already dropped). */
  labels(resource: DecodedResource, userLabels: Record<string, string>): Record<string, string>;
  /** The discovery key a local copy stands for. */
  keyOf(local: StoredResource): string;
}

/** The zone's mirror of global resources: same names, labelled as coming from the global. */
export function mirrorMapping(): SinkMapping {
  return {
    scope: { [LABELS.origin]: "global" },
    localName: (name) => name,
    labels: (r, user) => ({ ...user, [LABELS.origin]: "global", [LABELS.originVersion]: r.version }),
    keyOf: (local) => (local.meta.mesh === "" ? local.meta.name : `${local.meta.mesh}/${local.meta.name}`),
  };
}

/**
 * The global's copy of one zone's resources: named `<zone>.<name>` (zone
 * names hold no '.', so names of different zones never collide) and
 * attributed to the zone the session was admitted as, whatever the zone wrote.
 */
export function zoneMapping(zone: string): SinkMapping {
  return {
    scope: { [LABELS.origin]: "zone", [LABELS.zone]: zone },
    localName: (name) => `${zone}.${name}`,
    labels: (r, user) => ({ ...user, [LABELS.origin]: "zone", [LABELS.zone]: zone, [LABELS.displayName]: r.name, [LABELS.originVersion]: r.version }),
    keyOf: (local) => {
      const name = local.meta.labels[LABELS.displayName] ?? local.meta.name;
      return local.meta.mesh === "" ? name : `${local.meta.mesh}/${name}`;
    },
  };
}

/** A sink writing into `store` through `mapping`. */
export class StoreSink implements ResourceSink {
  readonly #store: ResourceStore;
  readonly #types: TypeRegistry;
  readonly #mapping: SinkMapping;

  /**
   * @param store - the local store
   * @param types - registered types (responses of other types are rejected)
   * @param mapping - names and labels of local copies
   */
  constructor(store: ResourceStore, types: TypeRegistry, mapping: SinkMapping) {
    this.#store = store;
    this.#types = types;
    this.#mapping = mapping;
  }

  async versions(typeUrl: string, signal: AbortSignal): Promise<Map<string, string>> {
    const type = this.#type(typeUrl);
    const out = new Map<string, string>();
    for (const local of await this.#store.list(type.kind, { labels: this.#mapping.scope, signal })) {
      const version = local.meta.labels[LABELS.originVersion];
      if (version !== undefined) out.set(this.#mapping.keyOf(local), version);
    }
    return out;
  }

  async replace(typeUrl: string, resources: readonly Any[], signal: AbortSignal): Promise<void> {
    const type = this.#type(typeUrl);
    const desired = new Map<string, DecodedResource>();
    for (const any of resources) {
      const decoded = fromWire(type, any);
      if (desired.has(decoded.key)) throw new KdsError("invalid_resource", `${type.kind} "${decoded.key}" appears twice in one response`);
      desired.set(decoded.key, decoded);
    }
    const existing = new Map<string, StoredResource>();
    for (const local of await this.#store.list(type.kind, { labels: this.#mapping.scope, signal })) existing.set(this.#mapping.keyOf(local), local);
    for (const [key, decoded] of desired) {
      if (existing.get(key)?.meta.labels[LABELS.originVersion] === decoded.version) continue;
      await this.#put(type, decoded, signal);
    }
    for (const [key, local] of existing) {
      if (!desired.has(key)) await this.#store.delete(type.kind, local.meta.mesh, local.meta.name, { signal });
    }
  }

  async apply(typeUrl: string, resources: readonly ReceivedResource[], removed: readonly string[], signal: AbortSignal): Promise<void> {
    const type = this.#type(typeUrl);
    const decoded = resources.map((r) => {
      const d = fromWire(type, r.any, r.key);
      if (d.version !== r.version) throw new KdsError("invalid_resource", `${type.kind} "${r.key}": version ${r.version} in the response but ${d.version} in the resource`);
      return d;
    });
    for (const d of decoded) await this.#put(type, d, signal);
    for (const key of removed) {
      const { mesh, name } = parseResourceKey(key);
      const localName = this.#mapping.localName(name);
      const local = await this.#store.get(type.kind, mesh, localName, { signal });
      // Only ever delete this sink's own copies.
      if (local !== undefined && Object.entries(this.#mapping.scope).every(([k, v]) => local.meta.labels[k] === v)) {
        await this.#store.delete(type.kind, mesh, localName, { signal });
      }
    }
  }

  #type(typeUrl: string): ResourceType {
    const type = this.#types.byTypeUrl(typeUrl);
    if (type === undefined) throw new KdsError("unknown_type", `no resource type is registered for ${typeUrl}; register it on both sides`);
    return type;
  }

  async #put(type: ResourceType, decoded: DecodedResource, signal: AbortSignal): Promise<void> {
    const user: Record<string, string> = {};
    for (const [k, v] of Object.entries(decoded.labels)) if (!k.startsWith("kds.io/")) user[k] = v;
    await this.#store.put(
      { kind: type.kind, mesh: decoded.mesh, name: this.#mapping.localName(decoded.name), labels: this.#mapping.labels(decoded, user), spec: decoded.spec },
      { signal },
    );
  }
}
