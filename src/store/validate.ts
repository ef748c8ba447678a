/**
 * What every store checks before it writes: the kind is registered, the name
 * and mesh follow the resource-name rule, and the spec is the kind's message.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import { RESOURCE_NAME_PATTERN, resourceKey, type TypeRegistry } from "../kinds/resource-types.ts";
import type { ResourceInput } from "./contract.ts";

/** Checks a resource against its registered type; throws `unknown_type` or `invalid_resource`. */
export function validateInput(types: TypeRegistry, input: ResourceInput): void {
  const type = types.get(input.kind);
  const mesh = input.mesh ?? "";
  if (!RESOURCE_NAME_PATTERN.test(input.name)) {
    throw new KdsError(
      "invalid_resource",
      `${what(type.kind, mesh, input.name)}: a name is 1 to 253 letters, digits, '.', '-' or '_', starting with a letter or digit`,
    );
  }
  if (type.scope === "mesh" && !RESOURCE_NAME_PATTERN.test(mesh)) {
    throw new KdsError(
      "invalid_resource",
      `${what(type.kind, mesh, input.name)}: ${type.kind} is mesh-scoped; give it a mesh`,
    );
  }
  if (type.scope === "cluster" && mesh !== "") {
    throw new KdsError(
      "invalid_resource",
      `${what(type.kind, mesh, input.name)}: ${type.kind} is cluster-scoped and belongs to no mesh; drop the mesh`,
    );
  }
  if (input.spec.$typeName !== type.schema.typeName) {
    throw new KdsError(
      "invalid_resource",
      `${what(type.kind, mesh, input.name)}: the spec is a ${input.spec.$typeName}, but ${type.kind} takes a ${type.schema.typeName}`,
    );
  }
}

/** The resource a validation message names (built only for a refused resource: sync validates every one it receives). */
function what(kind: string, mesh: string, name: string): string {
  return `${kind} "${resourceKey(mesh, name)}"`;
}

/**
 * The `conflict` error of a write that expected `expected` but found
 * `actual` ("" when absent), or undefined when they match or nothing was expected.
 */
export function versionConflict(
  kind: string,
  key: string,
  actual: string,
  expected: string | undefined,
): KdsError | undefined {
  if (expected === undefined || actual === expected) return undefined;
  const what = `${kind} "${key}"`;
  return new KdsError(
    "conflict",
    expected === ""
      ? `${what} already exists (version ${actual}); read it and write with its version to replace it`
      : actual === ""
        ? `${what} no longer exists (expected version ${expected})`
        : `${what} changed since it was read (expected version ${expected}, found ${actual}); read it again and retry`,
  );
}

/** Whether `labels` carries every label of `selector` with the same value. */
export function matchesLabels(
  labels: Readonly<Record<string, string>>,
  selector: Readonly<Record<string, string>> | undefined,
): boolean {
  if (selector === undefined) return true;
  for (const [k, v] of Object.entries(selector)) if (labels[k] !== v) return false;
  return true;
}

/** Orders resources by mesh, then name (the order of every `list`). */
export function byMeshThenName(
  a: { meta: { mesh: string; name: string } },
  b: { meta: { mesh: string; name: string } },
): number {
  if (a.meta.mesh !== b.meta.mesh) return a.meta.mesh < b.meta.mesh ? -1 : 1;
  return a.meta.name < b.meta.name ? -1 : a.meta.name > b.meta.name ? 1 : 0;
}
