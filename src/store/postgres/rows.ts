/**
 * Rows of the PostgreSQL store and the resources they hold: specs are
 * protobuf binary decoded through the {@link TypeRegistry}; labels are jsonb;
 * versions are revisions (int8, read as text).
 *
 * @module
 */
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { KdsError } from "../../errors.ts";
import {
  resourceKey,
  type StoredResourceMeta,
  type StoredResource,
  type TypeRegistry,
} from "../../kinds/resource-types.ts";
import type { StoreChange } from "../contract.ts";

/** A row of `kds_resources` as the store selects it. */
export interface ResourceRow {
  readonly kind: string;
  readonly mesh: string;
  readonly name: string;
  /** `labels::text`. */
  readonly labels: string;
  readonly spec: Uint8Array;
  /** `version::text`. */
  readonly version: string;
  /** Milliseconds since the epoch (a number parses much faster than a timestamp string). */
  readonly created_ms: number;
  /** Milliseconds since the epoch. */
  readonly modified_ms: number;
}

/** A row of `kds_changes` as the store selects it (resource columns null for a delete). */
export interface ChangeRow {
  /** `revision::text`. */
  readonly revision: string;
  readonly op: "put" | "delete";
  readonly kind: string;
  readonly mesh: string;
  readonly name: string;
  readonly labels: string | null;
  readonly spec: Uint8Array | null;
  readonly created_ms: number | null;
  readonly modified_ms: number | null;
}

/** The columns every resource select lists, in the shape of {@link ResourceRow}. */
export const RESOURCE_COLUMNS =
  "kind, mesh, name, labels::text AS labels, spec, version::text AS version, " +
  "(extract(epoch FROM created_at) * 1000)::float8 AS created_ms, (extract(epoch FROM modified_at) * 1000)::float8 AS modified_ms";

/** The columns every change select lists, in the shape of {@link ChangeRow}. */
export const CHANGE_COLUMNS =
  "revision::text AS revision, op, kind, mesh, name, labels::text AS labels, spec, " +
  "(extract(epoch FROM created_at) * 1000)::float8 AS created_ms, (extract(epoch FROM modified_at) * 1000)::float8 AS modified_ms";

/** Decodes a stored row into a frozen {@link StoredResource}. */
export function decodeResource(types: TypeRegistry, row: ResourceRow): StoredResource {
  const type = types.find(row.kind);
  if (type === undefined) {
    throw new KdsError(
      "unknown_type",
      `the store holds ${row.kind} "${resourceKey(row.mesh, row.name)}", a kind this process does not register; register it or read another kind`,
    );
  }
  let spec: StoredResource["spec"];
  try {
    spec = fromBinary(type.schema, row.spec);
  } catch (error) {
    throw new KdsError(
      "invalid_resource",
      `the stored spec of ${row.kind} "${resourceKey(row.mesh, row.name)}" is not a valid ${type.schema.typeName}`,
      { cause: error },
    );
  }
  const meta: StoredResourceMeta = Object.freeze({
    name: row.name,
    mesh: row.mesh,
    labels: Object.freeze(parseLabels(row.labels)),
    version: row.version,
    creationTime: new Date(row.created_ms),
    modificationTime: new Date(row.modified_ms),
  });
  return Object.freeze({ kind: type.kind, meta, spec });
}

/** Decodes a change-log row. */
export function decodeChange(types: TypeRegistry, row: ChangeRow): StoreChange {
  const revision = Number(row.revision);
  if (row.op === "delete")
    return { op: "delete", revision, ref: { kind: row.kind, mesh: row.mesh, name: row.name } };
  const resource = decodeResource(types, {
    kind: row.kind,
    mesh: row.mesh,
    name: row.name,
    labels: row.labels ?? "{}",
    spec: row.spec ?? new Uint8Array(0),
    version: row.revision,
    created_ms: row.created_ms ?? 0,
    modified_ms: row.modified_ms ?? 0,
  });
  return { op: "put", revision, resource };
}

/** The protobuf binary of a resource's spec. */
export function encodeSpec(types: TypeRegistry, resource: StoredResource): Uint8Array {
  return toBinary(types.get(resource.kind).schema, resource.spec);
}

function parseLabels(text: string): Record<string, string> {
  const value: unknown = JSON.parse(text);
  const labels: Record<string, string> = {};
  if (value !== null && typeof value === "object") {
    for (const [k, v] of Object.entries(value as Record<string, unknown>))
      if (typeof v === "string") labels[k] = v;
  }
  return labels;
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

/** Lower-case hex of `bytes` (how specs travel in `decode(..., 'hex')` batch parameters). */
export function toHex(bytes: Uint8Array): string {
  let out = "";
  for (let i = 0; i < bytes.length; i++) out += HEX[bytes[i] as number];
  return out;
}
