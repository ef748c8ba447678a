/**
 * Kinds files: `kds-mux global --kinds kinds.yaml` and `kds-mux zone --kinds
 * kinds.yaml` sync the user's own kinds without code. The file (YAML or
 * JSON) points at a descriptor set built by `buf build -o kinds.binpb` and
 * lists the kinds:
 *
 * ```yaml
 * descriptorSet: kinds.binpb        # relative to the kinds file
 * kinds:
 *   - kind: Gateway
 *     message: acme.v1.GatewaySpec
 *     direction: global-to-zone       # global-to-zone | zone-to-global | zone-to-zones | local
 *     scope: cluster                  # cluster | mesh
 *     zones: region=eu                # optional: only the zones this selector picks get it
 *     whenStale: withhold             # optional, zone-to-zones only: serve (default) | withhold
 *     dependsOn: [Mesh]               # optional: kinds delivered before this one (docs/kinds.md)
 * ```
 *
 * Every problem is reported with the file's name, before anything starts.
 *
 * @module
 */
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseDocument } from "yaml";
import { KdsError } from "../errors.ts";
import type { Logger } from "../log.ts";
import {
  GLOBAL_INSTANCE_KIND,
  ZONE_INSIGHT_KIND,
  createTypeRegistry,
} from "../kinds/builtin-types.ts";
import {
  describeDeclaration,
  descriptorRegistry,
  messageIn,
  parseDescriptorSet,
  type KindDeclaration,
} from "../kinds/descriptor-types.ts";
import {
  KIND_PATTERN,
  RESOURCE_SCOPES,
  SYNC_DIRECTIONS,
  WHEN_STALE,
  type WhenStale,
  type ResourceTypeInit,
  type TypeRegistry,
} from "../kinds/resource-types.ts";

/** The kinds file of the example kinds (Mesh, TrafficPolicy, Dataplane, ZoneIngress): the CLI's default. */
export const EXAMPLE_KINDS_FILE = fileURLToPath(
  new URL("../../examples/example-kinds/kinds.yaml", import.meta.url),
);

/** A kinds file, read and checked. */
export interface KindsFile {
  /** The file as named by the user. */
  readonly file: string;
  /** The descriptor set it points at, resolved. */
  readonly descriptorSet: string;
  /** Its kinds, their messages taken from the descriptor set. */
  readonly types: readonly ResourceTypeInit[];
}

const topLevelKeys = ["descriptorSet", "kinds"];
const kindKeys = ["kind", "message", "direction", "scope"];
/**
 * Optional fields of a kind: `zones`, a zone selector (only the zones it
 * selects get the kind's resources), `whenStale` (zone-to-zones kinds:
 * whether the resources of a stale zone are still served to the others),
 * and `dependsOn` (kinds delivered before it, removed after it).
 */
const optionalKindKeys = ["zones", "whenStale", "dependsOn"];

/** Reads and checks kinds file `file`; throws `invalid_argument` naming the file and the problem. */
export function loadKindsFile(file: string): KindsFile {
  const fail = (problem: string, cause?: unknown): never => {
    throw new KdsError("invalid_argument", `${file}: ${problem}`, { cause });
  };
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    return fail(
      `cannot read the kinds file (${(error as NodeJS.ErrnoException).code ?? String(error)})`,
      error,
    );
  }
  const doc = parseDocument(text);
  if (doc.errors.length > 0)
    fail(`invalid YAML: ${doc.errors[0]?.message.split("\n")[0] ?? "parse error"}`);
  const value: unknown = doc.toJS();
  if (!isMapping(value)) return fail(`a kinds file is a mapping with "descriptorSet" and "kinds"`);
  for (const key of Object.keys(value))
    if (!topLevelKeys.includes(key))
      fail(`unknown field "${key}" (a kinds file has ${topLevelKeys.join(", ")})`);
  if (typeof value.descriptorSet !== "string" || value.descriptorSet === "") {
    fail(
      `"descriptorSet" must name the descriptor set of the kinds' messages (build it with \`buf build -o kinds.binpb\`)`,
    );
  }
  if (!Array.isArray(value.kinds) || value.kinds.length === 0)
    fail(`"kinds" must list at least one kind`);

  const declarations = (value.kinds as unknown[]).map((entry, i) =>
    declaration(entry, `kinds[${i}]`, fail),
  );
  const zones = (value.kinds as Record<string, unknown>[]).map((entry, i) => {
    const z = entry.zones;
    if (z !== undefined && typeof z !== "string")
      fail(
        `kinds[${i}] (${declarations[i]?.kind}): "zones" must be a zone selector string, for example "region=eu"`,
      );
    return z as string | undefined;
  });
  const whenStale = (value.kinds as Record<string, unknown>[]).map((entry, i) => {
    const w = entry.whenStale;
    if (w !== undefined && !(WHEN_STALE as readonly unknown[]).includes(w))
      fail(
        `kinds[${i}] (${declarations[i]?.kind}): "whenStale" must be one of ${WHEN_STALE.join(", ")}, got ${JSON.stringify(w)}`,
      );
    return w as WhenStale | undefined;
  });
  const dependsOn = (value.kinds as Record<string, unknown>[]).map((entry, i) => {
    const d = entry.dependsOn;
    if (d === undefined) return undefined;
    if (!Array.isArray(d) || d.some((k) => typeof k !== "string" || k === ""))
      fail(
        `kinds[${i}] (${declarations[i]?.kind}): "dependsOn" must be a list of kind names, for example [Mesh]`,
      );
    return d as string[];
  });
  const seen = new Map<string, string>();
  declarations.forEach((d, i) => {
    const earlier = seen.get(d.kind.toLowerCase());
    if (earlier !== undefined)
      fail(`kind "${d.kind}" is listed twice (${earlier} and kinds[${i}])`);
    seen.set(d.kind.toLowerCase(), `kinds[${i}]`);
  });

  const descriptorSet = resolve(dirname(file), value.descriptorSet as string);
  let bytes: Uint8Array;
  try {
    bytes = readFileSync(descriptorSet);
  } catch (error) {
    return fail(
      `cannot read the descriptor set ${String(value.descriptorSet)} (${descriptorSet}: ${(error as NodeJS.ErrnoException).code ?? String(error)}); build it with \`buf build -o ${String(value.descriptorSet)}\` in your buf workspace`,
      error,
    );
  }
  let registry: ReturnType<typeof descriptorRegistry>;
  try {
    registry = descriptorRegistry(parseDescriptorSet(bytes));
  } catch (error) {
    return fail(
      `descriptor set ${String(value.descriptorSet)}: ${error instanceof Error ? error.message : String(error)}`,
      error,
    );
  }
  const types = declarations.map((d, i) => {
    try {
      const init: ResourceTypeInit = {
        kind: d.kind,
        schema: messageIn(registry, d.message, String(value.descriptorSet)),
        direction: d.direction,
        scope: d.scope,
      };
      if (zones[i] !== undefined) init.zones = zones[i];
      if (whenStale[i] !== undefined) init.whenStale = whenStale[i];
      if (dependsOn[i] !== undefined) init.dependsOn = dependsOn[i];
      return init;
    } catch (error) {
      return fail(
        `kinds[${i}] (${d.kind}): ${error instanceof Error ? error.message : String(error)}`,
        error,
      );
    }
  });
  try {
    createTypeRegistry(types);
  } catch (error) {
    fail(error instanceof Error ? error.message : String(error), error);
  }
  return { file, descriptorSet, types };
}

function declaration(
  entry: unknown,
  where: string,
  fail: (problem: string) => never,
): KindDeclaration {
  if (!isMapping(entry))
    return fail(`${where}: each kind is a mapping with ${kindKeys.join(", ")}`);
  const label =
    typeof entry.kind === "string" && entry.kind !== "" ? `${where} (${entry.kind})` : where;
  for (const key of Object.keys(entry))
    if (!kindKeys.includes(key) && !optionalKindKeys.includes(key))
      fail(
        `${label}: unknown field "${key}" (a kind has ${kindKeys.join(", ")}, and optionally ${optionalKindKeys.join(", ")})`,
      );
  for (const key of kindKeys) {
    if (typeof entry[key] !== "string" || entry[key] === "")
      fail(`${label}: "${key}" is required and must be a string`);
  }
  const { kind, message, direction, scope } = entry as Record<string, string>;
  if (!KIND_PATTERN.test(kind as string))
    fail(
      `${label}: kind "${kind}" must start with an upper-case letter and hold only letters and digits`,
    );
  if (builtinKinds().some((own) => own.toLowerCase() === (kind as string).toLowerCase()))
    fail(`${label}: kind "${kind}" is kds-mux's own; choose another name`);
  if (!(SYNC_DIRECTIONS as readonly string[]).includes(direction as string))
    fail(`${label}: direction "${direction}" must be one of ${SYNC_DIRECTIONS.join(", ")}`);
  if (!(RESOURCE_SCOPES as readonly string[]).includes(scope as string))
    fail(`${label}: scope "${scope}" must be one of ${RESOURCE_SCOPES.join(", ")}`);
  return {
    kind: kind as string,
    message: message as string,
    direction: direction as KindDeclaration["direction"],
    scope: scope as KindDeclaration["scope"],
  };
}

/** The kinds kds-mux defines itself (Zone, ZoneInsight, GlobalInstance, the identity kinds): no kinds file may reuse their names. */
function builtinKinds(): string[] {
  return [
    ...createTypeRegistry()
      .list()
      .map((t) => t.kind),
    ZONE_INSIGHT_KIND,
    GLOBAL_INSTANCE_KIND,
  ];
}

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** "Gateway (acme.v1.GatewaySpec, global-to-zone, cluster-scoped), ...": kinds as start-up lines show them. */
export function describeKinds(types: readonly ResourceTypeInit[]): string {
  return types
    .map(
      (t) =>
        `${t.kind} (${describeDeclaration({ kind: t.kind, message: t.schema.typeName, direction: t.direction, scope: t.scope ?? "mesh" })})`,
    )
    .join(", ");
}

/**
 * The kinds of `kds-mux global`: those of `file`, or the example kinds when
 * no file is given; either way it says so in the log.
 */
export function globalKinds(file: string | undefined, logger: Logger): TypeRegistry {
  const loaded = loadKindsFile(file ?? EXAMPLE_KINDS_FILE);
  if (file === undefined) {
    logger.info(
      `no --kinds given: syncing the example kinds ${describeKinds(loaded.types)} from ${EXAMPLE_KINDS_FILE}; pass --kinds FILE to sync your own`,
    );
  } else {
    logger.info(`kinds from ${file}: ${describeKinds(loaded.types)}`);
  }
  return createTypeRegistry(loaded.types);
}

/**
 * The kinds of `kds-mux zone`: those of `file` (checked against the global's
 * at every connect), or none, learned from the global, when no file is given.
 */
export function zoneKinds(file: string | undefined, zone: string, logger: Logger): TypeRegistry {
  if (file === undefined) {
    logger.info(
      `no --kinds given: zone "${zone}" learns its kinds from the global when it connects`,
    );
    return createTypeRegistry();
  }
  const loaded = loadKindsFile(file);
  logger.info(`kinds from ${file}: ${describeKinds(loaded.types)}; the global's must agree`);
  return createTypeRegistry(loaded.types);
}
