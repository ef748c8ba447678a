/**
 * The kind catalog: the kinds a global syncs (name, message, direction,
 * scope) with the descriptors of their messages, as the global sends it to
 * every zone once per session (proto/kds/v1/kinds.proto). A zone that was
 * given no kinds learns them from it.
 *
 * @module
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { AnySchema, type Any } from "@bufbuild/protobuf/wkt";
import { KdsError } from "../errors.ts";
import { ResourceSchema } from "../gen/kds/v1/discovery_pb.ts";
import {
  KindCatalogSchema,
  KindDirection,
  KindScope,
  type KindCatalog,
} from "../gen/kds/v1/kinds_pb.ts";
import type { WireResource } from "../discovery/types.ts";
import { filesDefining, type KindDeclaration } from "../kinds/descriptor-types.ts";
import {
  TYPE_URL_PREFIX,
  type ResourceScope,
  type ResourceType,
  type SyncDirection,
} from "../kinds/resource-types.ts";

/** Discovery type URL under which a global serves its catalog. */
export const KIND_CATALOG_TYPE_URL = TYPE_URL_PREFIX + KindCatalogSchema.typeName;

/** The name of the one catalog resource. */
export const KIND_CATALOG_KEY = "kinds";

const directions: Record<SyncDirection, KindDirection> = {
  "global-to-zone": KindDirection.GLOBAL_TO_ZONE,
  "zone-to-global": KindDirection.ZONE_TO_GLOBAL,
  "zone-to-zones": KindDirection.ZONE_TO_ZONES,
  local: KindDirection.LOCAL,
};

const scopes: Record<ResourceScope, KindScope> = {
  cluster: KindScope.CLUSTER,
  mesh: KindScope.MESH,
};

/**
 * The catalog of the kinds among `types` that flow (local kinds stay out),
 * in their order (a registry lists each kind after those it depends on),
 * each with the kinds of the catalog it depends on.
 */
export function kindCatalog(types: Iterable<ResourceType>): KindCatalog {
  const flowing = [...types].filter((t) => t.direction !== "local");
  const named = new Set(flowing.map((t) => t.kind));
  return create(KindCatalogSchema, {
    kinds: flowing.map((t) => ({
      kind: t.kind,
      message: t.schema.typeName,
      direction: directions[t.direction],
      scope: scopes[t.scope],
      dependsOn: t.dependsOn.filter((d) => named.has(d)),
    })),
    files: filesDefining(flowing.map((t) => t.schema)),
  });
}

/** The catalog as the one resource a discovery server serves under {@link KIND_CATALOG_TYPE_URL}. */
export function catalogResource(catalog: KindCatalog): WireResource {
  const value = toBinary(KindCatalogSchema, catalog);
  const version = `kinds-${value.byteLength}-${fnv1a(value)}`;
  const any = create(AnySchema, { typeUrl: KIND_CATALOG_TYPE_URL, value });
  const resource = create(ResourceSchema, { name: KIND_CATALOG_KEY, version, resource: any });
  const anyBytes = toBinary(AnySchema, any).byteLength;
  return {
    key: KIND_CATALOG_KEY,
    version,
    any,
    resource,
    anyBytes,
    resourceBytes: toBinary(ResourceSchema, resource).byteLength,
  };
}

/** The catalog in a received response; throws `invalid_resource` when the response is not exactly one catalog. */
export function catalogOf(resources: readonly Any[]): KindCatalog {
  if (resources.length !== 1)
    throw new KdsError(
      "invalid_resource",
      `expected one kind catalog, got ${resources.length} resources`,
    );
  const any = resources[0] as Any;
  if (any.typeUrl !== KIND_CATALOG_TYPE_URL)
    throw new KdsError(
      "invalid_resource",
      `expected a ${KIND_CATALOG_TYPE_URL}, got ${any.typeUrl || "an empty type URL"}`,
    );
  try {
    return fromBinary(KindCatalogSchema, any.value);
  } catch (error) {
    throw new KdsError(
      "invalid_resource",
      `malformed kind catalog (${error instanceof Error ? error.message : String(error)})`,
      { cause: error },
    );
  }
}

/** The declarations a catalog carries, each with the kinds it depends on; throws `invalid_resource` on an unset direction or scope. */
export function declarationsOf(
  catalog: KindCatalog,
): (KindDeclaration & { readonly dependsOn: readonly string[] })[] {
  const direction = Object.fromEntries(
    Object.entries(directions).map(([k, v]) => [v, k]),
  ) as Record<number, SyncDirection>;
  const scope = Object.fromEntries(Object.entries(scopes).map(([k, v]) => [v, k])) as Record<
    number,
    ResourceScope
  >;
  return catalog.kinds.map((k) => {
    const d = direction[k.direction];
    const s = scope[k.scope];
    if (d === undefined || s === undefined)
      throw new KdsError(
        "invalid_resource",
        `kind "${k.kind}" in the catalog has no valid direction or scope`,
      );
    return { kind: k.kind, message: k.message, direction: d, scope: s, dependsOn: k.dependsOn };
  });
}

/** 32-bit FNV-1a of `bytes`, in hex: a version that changes when the catalog does. */
function fnv1a(bytes: Uint8Array): string {
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193);
  return (h >>> 0).toString(16).padStart(8, "0");
}
