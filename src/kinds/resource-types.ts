/**
 * The resource model: typed resources backed by protobuf-es messages,
 * registered by type with a short kind name, a scope and a sync direction.
 *
 * @module
 */
import type { DescMessage, Message } from "@bufbuild/protobuf";
import { KdsError } from "../errors.ts";
import { parseZoneSelector, type ZoneSelector } from "./zone-selector.ts";

/** Every sync direction, as kinds files and the CLI spell them. */
export const SYNC_DIRECTIONS = [
  "global-to-zone",
  "zone-to-global",
  "zone-to-zones",
  "local",
] as const;

/**
 * Which way a kind flows: created on the global and synced to zones
 * ("global-to-zone"), created in zones and synced to the global
 * ("zone-to-global"), created in zones, synced to the global and from there
 * to every other zone ("zone-to-zones": never back to its origin, not while
 * its origin is disabled; receiving zones hold read-only copies), or never
 * synced ("local").
 */
export type SyncDirection = (typeof SYNC_DIRECTIONS)[number];

/** Every resource scope, as kinds files and the CLI spell them. */
export const RESOURCE_SCOPES = ["cluster", "mesh"] as const;

/** Whether a kind's resources live inside a mesh or at cluster level. */
export type ResourceScope = (typeof RESOURCE_SCOPES)[number];

/** The dependencies of a kind that has none, one list for all (a server keeps them per type and stream). */
const NO_DEPENDENCIES: readonly string[] = Object.freeze([]);

/** A registered resource type. */
export interface ResourceType {
  /** Short name used in stores, files and the CLI ("Mesh", "Dataplane"). */
  readonly kind: string;
  /** The protobuf message of the spec. */
  readonly schema: DescMessage;
  /** Discovery type URL: `type.googleapis.com/<message full name>`. */
  readonly typeUrl: string;
  /** Which way it flows. */
  readonly direction: SyncDirection;
  /** Cluster- or mesh-scoped. */
  readonly scope: ResourceScope;
  /** Kept by kds-mux itself (signing keys, revocations): the admin API neither shows nor writes it. */
  readonly internal: boolean;
  /** The only zones the global sends it to (global-to-zone and zone-to-zones kinds); undefined: every zone. */
  readonly zones: ZoneSelector | undefined;
  /** Zone-to-zones kinds: whether the global still serves a resource to the other zones once its origin zone is stale ("serve", the default) or withholds it ("withhold"). */
  readonly whenStale: WhenStale;
  /** The kinds this kind depends on (registered before it), by their registered names: see {@link ResourceTypeInit.dependsOn}. */
  readonly dependsOn: readonly string[];
}

/** Every choice of {@link ResourceTypeInit.whenStale}. */
export const WHEN_STALE = ["serve", "withhold"] as const;

/** What the global does with a zone-to-zones resource whose origin zone is stale: see {@link ResourceTypeInit.whenStale}. */
export type WhenStale = (typeof WHEN_STALE)[number];

/** What {@link TypeRegistry.register} takes. */
export interface ResourceTypeInit {
  /** Short name; letters and digits, starting with an upper-case letter. */
  kind: string;
  /** The spec's protobuf message (a generated `...Schema`). */
  schema: DescMessage;
  /** Which way it flows. */
  direction: SyncDirection;
  /** Default "mesh". */
  scope?: ResourceScope;
  /** Kept by kds-mux itself, hidden from the admin API; only "local" kinds can be. Default false. */
  internal?: boolean;
  /**
   * A zone selector (see zone-selector.ts: `region=eu`, `kds.io/zone in (a, b)`):
   * the global sends resources of this kind only to the zones it selects.
   * Only for global-to-zone and zone-to-zones kinds. Default: every zone.
   */
  zones?: string;
  /**
   * Zone-to-zones kinds only: once the origin zone has been offline past the
   * global's `zoneStaleAfter`, its resources are marked stale; "serve" keeps
   * serving them to the other zones (marked with `kds.io/origin-last-online`),
   * "withhold" takes them away from the other zones until the origin is back.
   * Default "serve".
   */
  whenStale?: WhenStale;
  /**
   * Kinds whose resources this kind's resources refer to (a TrafficPolicy
   * depends on Mesh). Of what arrives in one exchange, a receiving side makes
   * the resources of these kinds visible first and removes them last; the
   * initial sync and a resume deliver kinds in this order (docs/kinds.md,
   * "Ordered delivery"). Each must be registered; a cycle is refused.
   * Default: none.
   */
  dependsOn?: readonly string[];
}

/** The prefix of every type URL. */
export const TYPE_URL_PREFIX = "type.googleapis.com/";

/** Kind names: an upper-case letter, then up to 62 letters and digits. */
export const KIND_PATTERN = /^[A-Z][A-Za-z0-9]{0,62}$/;

/** The registered resource types, looked up by kind or type URL. */
export class TypeRegistry {
  readonly #byKind = new Map<string, ResourceType>();
  readonly #byUrl = new Map<string, ResourceType>();

  /**
   * @param types - types to register at once, in any order: a kind is
   * registered after the kinds it depends on. Throws `invalid_argument`
   * naming the kinds when one depends on a kind that is not among them, or
   * when dependencies form a cycle.
   */
  constructor(types: Iterable<ResourceTypeInit> = []) {
    for (const t of dependencyOrder([...types])) this.register(t);
  }

  /** Registers a type; throws `invalid_argument` on a bad or duplicate kind, direction or scope. */
  register(init: ResourceTypeInit): ResourceType {
    if (!KIND_PATTERN.test(init.kind)) {
      throw new KdsError(
        "invalid_argument",
        `resource kind "${init.kind}" must start with an upper-case letter and hold only letters and digits`,
      );
    }
    if (!(SYNC_DIRECTIONS as readonly string[]).includes(init.direction)) {
      throw new KdsError(
        "invalid_argument",
        `resource kind "${init.kind}": direction "${String(init.direction)}" must be one of ${SYNC_DIRECTIONS.join(", ")}`,
      );
    }
    if (init.scope !== undefined && !(RESOURCE_SCOPES as readonly string[]).includes(init.scope)) {
      throw new KdsError(
        "invalid_argument",
        `resource kind "${init.kind}": scope "${String(init.scope)}" must be one of ${RESOURCE_SCOPES.join(", ")}`,
      );
    }
    const typeUrl = TYPE_URL_PREFIX + init.schema.typeName;
    if (this.#byKind.has(init.kind))
      throw new KdsError("invalid_argument", `resource kind "${init.kind}" is registered twice`);
    if (this.#byUrl.has(typeUrl))
      throw new KdsError(
        "invalid_argument",
        `message ${init.schema.typeName} is already the spec of kind "${this.#byUrl.get(typeUrl)?.kind}"`,
      );
    if (init.internal === true && init.direction !== "local")
      throw new KdsError(
        "invalid_argument",
        `resource kind "${init.kind}" is internal and must be local (never synced)`,
      );
    let zones: ZoneSelector | undefined;
    if (init.zones !== undefined) {
      if (init.direction !== "global-to-zone" && init.direction !== "zone-to-zones")
        throw new KdsError(
          "invalid_argument",
          `resource kind "${init.kind}" is ${init.direction}: only global-to-zone and zone-to-zones kinds can name the zones they go to`,
        );
      zones = parseZoneSelector(init.zones, `the zones of kind "${init.kind}"`);
    }
    if (init.whenStale !== undefined) {
      if (!(WHEN_STALE as readonly string[]).includes(init.whenStale))
        throw new KdsError(
          "invalid_argument",
          `resource kind "${init.kind}": whenStale "${String(init.whenStale)}" must be one of ${WHEN_STALE.join(", ")}`,
        );
      if (init.direction !== "zone-to-zones")
        throw new KdsError(
          "invalid_argument",
          `resource kind "${init.kind}" is ${init.direction}: only zone-to-zones kinds are served to other zones, so only they take whenStale`,
        );
    }
    const dependsOn = this.#dependencies(init);
    const type: ResourceType = Object.freeze({
      kind: init.kind,
      schema: init.schema,
      typeUrl,
      direction: init.direction,
      scope: init.scope ?? "mesh",
      internal: init.internal ?? false,
      zones,
      whenStale: init.whenStale ?? "serve",
      dependsOn,
    });
    this.#byKind.set(type.kind, type);
    this.#byUrl.set(typeUrl, type);
    return type;
  }

  /** The registered names of `init.dependsOn`; throws `invalid_argument` naming a kind that is not registered (yet). */
  #dependencies(init: ResourceTypeInit): readonly string[] {
    const names: string[] = [];
    for (const name of init.dependsOn ?? []) {
      if (name.toLowerCase() === init.kind.toLowerCase())
        throw new KdsError(
          "invalid_argument",
          `resource kind "${init.kind}" depends on itself (dependsOn: ${name}); remove it from its dependsOn`,
        );
      const dependency = this.find(name);
      if (dependency === undefined)
        throw new KdsError(
          "invalid_argument",
          `resource kind "${init.kind}" depends on kind "${name}", which is not registered; known kinds: ${this.list()
            .map((t) => t.kind)
            .join(", ")}. Register "${name}" first, or remove it from dependsOn`,
        );
      if (!names.includes(dependency.kind)) names.push(dependency.kind);
    }
    return Object.freeze(names);
  }

  /** The type URLs of the kinds `typeUrl`'s kind depends on (empty for an unknown type). */
  dependenciesOf(typeUrl: string): readonly string[] {
    const type = this.#byUrl.get(typeUrl);
    if (type === undefined || type.dependsOn.length === 0) return NO_DEPENDENCIES;
    return type.dependsOn.flatMap((kind) => {
      const t = this.#byKind.get(kind);
      return t === undefined ? [] : [t.typeUrl];
    });
  }

  /** The type of `kind` (case-insensitive), or undefined. */
  find(kind: string): ResourceType | undefined {
    const exact = this.#byKind.get(kind);
    if (exact !== undefined) return exact;
    const lower = kind.toLowerCase();
    for (const t of this.#byKind.values()) if (t.kind.toLowerCase() === lower) return t;
    return undefined;
  }

  /** The type of `kind`; throws `unknown_type` naming the known kinds. */
  get(kind: string): ResourceType {
    const t = this.find(kind);
    if (t === undefined) {
      throw new KdsError(
        "unknown_type",
        `unknown resource type "${kind}"; known types: ${this.visible()
          .map((p) => p.kind)
          .join(", ")}`,
      );
    }
    return t;
  }

  /** The type whose type URL is `typeUrl`, or undefined. */
  byTypeUrl(typeUrl: string): ResourceType | undefined {
    return this.#byUrl.get(typeUrl);
  }

  /** Every registered type. */
  list(): ResourceType[] {
    return [...this.#byKind.values()];
  }

  /** Every type the admin API serves: all but the internal ones. */
  visible(): ResourceType[] {
    return this.list().filter((t) => !t.internal);
  }

  /** Types that flow in `direction`. */
  flowing(direction: Exclude<SyncDirection, "local">): ResourceType[] {
    return this.list().filter((t) => t.direction === direction);
  }

  /** Types a side of `role` sends: see {@link sentBy}. */
  sentBy(role: "global" | "zone"): ResourceType[] {
    return this.list().filter((t) => sentBy(role, t.direction));
  }

  /** Types a side of `role` receives: see {@link receivedBy}. */
  receivedBy(role: "global" | "zone"): ResourceType[] {
    return this.list().filter((t) => receivedBy(role, t.direction));
  }
}

/**
 * `types` reordered so that each kind comes after the kinds it depends on,
 * otherwise in the order given. Throws `invalid_argument` naming the kinds
 * when one depends on a kind not among `types` (nor built in: the caller's
 * registry checks those) or when dependencies form a cycle.
 */
function dependencyOrder(types: readonly ResourceTypeInit[]): ResourceTypeInit[] {
  if (types.every((t) => (t.dependsOn ?? []).length === 0)) return [...types];
  const byName = new Map(types.map((t) => [t.kind.toLowerCase(), t]));
  const unknown = types.flatMap((t) =>
    (t.dependsOn ?? [])
      .filter((d) => !byName.has(d.toLowerCase()))
      .map((d) => `"${t.kind}" depends on "${d}"`),
  );
  if (unknown.length > 0)
    throw new KdsError(
      "invalid_argument",
      `dependsOn names kinds that are not defined: ${unknown.join(", ")}; known kinds: ${types
        .map((t) => t.kind)
        .join(", ")}. Define them, or remove them from dependsOn`,
    );
  const ordered: ResourceTypeInit[] = [];
  const state = new Map<ResourceTypeInit, "visiting" | "done">();
  const path: ResourceTypeInit[] = [];
  const visit = (t: ResourceTypeInit): void => {
    const seen = state.get(t);
    if (seen === "done") return;
    if (seen === "visiting") {
      const cycle = [...path.slice(path.indexOf(t)), t].map((c) => c.kind).join(" -> ");
      throw new KdsError(
        "invalid_argument",
        `dependsOn forms a cycle: ${cycle}. A kind cannot come before and after another; remove one of these dependencies`,
      );
    }
    state.set(t, "visiting");
    path.push(t);
    for (const d of t.dependsOn ?? []) visit(byName.get(d.toLowerCase()) as ResourceTypeInit);
    path.pop();
    state.set(t, "done");
    ordered.push(t);
  };
  for (const t of types) visit(t);
  return ordered;
}

/**
 * Whether a side of `role` sends kinds of `direction` to its peer: the global
 * sends global-to-zone and zone-to-zones kinds (the latter are the copies of
 * other zones' resources); a zone sends zone-to-global and zone-to-zones
 * kinds (only those it made itself).
 */
export function sentBy(role: "global" | "zone", direction: SyncDirection): boolean {
  return (
    direction === "zone-to-zones" ||
    direction === (role === "global" ? "global-to-zone" : "zone-to-global")
  );
}

/** Whether a side of `role` receives kinds of `direction` from its peer (the mirror of {@link sentBy}). */
export function receivedBy(role: "global" | "zone", direction: SyncDirection): boolean {
  return sentBy(role === "global" ? "zone" : "global", direction);
}

/** Identity and bookkeeping of a stored resource. */
export interface StoredResourceMeta {
  /** Name, unique per kind and mesh. */
  readonly name: string;
  /** Mesh for mesh-scoped kinds; "" for cluster-scoped ones. */
  readonly mesh: string;
  /** Labels; `kds.io/` ones are managed by kds-mux. */
  readonly labels: Readonly<Record<string, string>>;
  /** Opaque version assigned by the store on every write. */
  readonly version: string;
  /** When the resource was created. */
  readonly creationTime: Date;
  /** When it was last changed. */
  readonly modificationTime: Date;
}

/** A resource as stores hold and return it. */
export interface StoredResource<T extends Message = Message> {
  /** The kind ({@link ResourceType.kind}). */
  readonly kind: string;
  /** Identity and bookkeeping. */
  readonly meta: StoredResourceMeta;
  /** The typed spec. */
  readonly spec: T;
}

/** Labels kds-mux sets; users must not set them. */
export const LABELS = Object.freeze({
  /**
   * On a synced copy, where it came from: "zone" on the global's copy of a
   * zone resource, "global" on a zone's copy of what the global sent (a
   * zone-to-zones copy of another zone's resource included). A zone's own
   * resources carry none.
   */
  origin: "kds.io/origin",
  /**
   * On the global: the zone a zone resource came from: the name its session was
   * admitted under (proven by the zone's token or client certificate, unless the
   * global runs without zone authentication), never anything the zone wrote.
   * In the other zones, a zone-to-zones copy keeps it: its origin zone.
   */
  zone: "kds.io/zone",
  /** On the global (and on zone-to-zones copies in other zones): the zone resource's name in its zone. */
  displayName: "kds.io/display-name",
  /** On a synced copy: the version of the original in its origin's store. */
  originVersion: "kds.io/origin-version",
  /**
   * On the global's copy of a zone resource (and on other zones' copies of a
   * zone-to-zones one): the resource is stale, its origin zone offline past
   * the global's `zoneStaleAfter`; the value is when the zone was last online
   * (RFC 3339). Removed when the zone connects again.
   */
  originLastOnline: "kds.io/origin-last-online",
});

/** Resource names: 1 to 253 characters of letters, digits, '.', '-' and '_', starting with a letter or digit. */
export const RESOURCE_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/;

/** The key of a resource in discovery messages: "mesh/name", or "name" for cluster-scoped ones. */
export function resourceKey(mesh: string, name: string): string {
  return mesh === "" ? name : `${mesh}/${name}`;
}

/** Splits a discovery key back into mesh and name. */
export function parseResourceKey(key: string): { mesh: string; name: string } {
  const slash = key.indexOf("/");
  return slash < 0
    ? { mesh: "", name: key }
    : { mesh: key.slice(0, slash), name: key.slice(slash + 1) };
}
