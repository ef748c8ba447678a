/**
 * Resource files: YAML (one or many documents, or a list) or JSON (an object
 * or an array), each resource `{type, name, mesh?, labels?, spec}` with the
 * spec in protobuf JSON. Exactly what `get -o yaml` and `get -o json` print
 * is accepted back (version and times are ignored).
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { parseAllDocuments } from "yaml";
import { KdsError } from "../errors.ts";
import { AdminResourceSchema, type AdminResource } from "../gen/kds/admin/v1/admin_pb.ts";

/** A resource read from a file, with where it came from. */
export interface ResourceDocument {
  /** "FILE: document N" or "FILE: item N of document M". */
  readonly where: string;
  /** The resource as the admin API takes it. */
  readonly resource: AdminResource;
}

const allowed = new Set([
  "type",
  "name",
  "mesh",
  "labels",
  "spec",
  "version",
  "creationTime",
  "modificationTime",
]);

/** Parses the text of `file` into resources; throws `invalid_resource` naming the file and document. */
export function parseResourceFile(text: string, file: string): ResourceDocument[] {
  const items: { where: string; value: unknown }[] = [];
  const trimmed = text.trimStart();
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      throw new KdsError(
        "invalid_resource",
        `${file}: invalid JSON: ${error instanceof Error ? error.message : String(error)}`,
        { cause: error },
      );
    }
    if (Array.isArray(value))
      for (const [i, v] of value.entries())
        items.push({ where: `${file}: item ${i + 1}`, value: v });
    else items.push({ where: file, value });
  } else {
    const docs = parseAllDocuments(text);
    if (!Array.isArray(docs))
      throw new KdsError("invalid_resource", `${file}: not a YAML document stream`);
    docs.forEach((doc, d) => {
      const where = docs.length > 1 ? `${file}: document ${d + 1}` : file;
      if (doc.errors.length > 0) {
        const e = doc.errors[0];
        throw new KdsError(
          "invalid_resource",
          `${where}: invalid YAML: ${e?.message.split("\n")[0] ?? "parse error"}`,
        );
      }
      const value: unknown = doc.toJS();
      if (value === null || value === undefined) return;
      if (Array.isArray(value))
        for (const [i, v] of value.entries())
          items.push({ where: `${where}: item ${i + 1}`, value: v });
      else items.push({ where, value });
    });
  }
  if (items.length === 0) throw new KdsError("invalid_resource", `${file}: holds no resource`);
  return items.map(({ where, value }) => ({ where, resource: toAdminResource(value, where) }));
}

function toAdminResource(value: unknown, where: string): AdminResource {
  const fail = (problem: string): never => {
    throw new KdsError("invalid_resource", `${where}: ${problem}`);
  };
  if (typeof value !== "object" || value === null || Array.isArray(value))
    return fail("a resource must be a mapping with type, name and spec");
  const doc = value as Record<string, unknown>;
  for (const key of Object.keys(doc))
    if (!allowed.has(key))
      fail(`unknown field "${key}" (a resource has ${[...allowed].join(", ")})`);
  const text = (key: string, required: boolean): string => {
    const v = doc[key];
    if (v === undefined || v === null || v === "")
      return required ? fail(`"${key}" is required`) : "";
    if (typeof v !== "string") return fail(`"${key}" must be a string`);
    return v;
  };
  const labels = doc.labels ?? {};
  if (typeof labels !== "object" || labels === null || Array.isArray(labels))
    fail(`"labels" must be a mapping of strings`);
  for (const [k, v] of Object.entries(labels as Record<string, unknown>))
    if (typeof v !== "string") fail(`label "${k}" must be a string`);
  const spec = doc.spec ?? {};
  if (typeof spec !== "object" || spec === null || Array.isArray(spec))
    fail(`"spec" must be a mapping (protobuf JSON of the type's spec)`);
  return create(AdminResourceSchema, {
    type: text("type", true),
    name: text("name", true),
    mesh: text("mesh", false),
    labels: labels as Record<string, string>,
    specJson: JSON.stringify(spec),
  });
}
