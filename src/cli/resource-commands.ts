/**
 * `kds-mux generate zone`, `apply`, `get`, `delete`, `types` and `inspect
 * zones`: talk to a global's or a zone's admin API.
 *
 * @module
 */
import { stringify } from "yaml";
import { KdsError } from "../errors.ts";
import { ZONE_KIND } from "../kinds/builtin-types.ts";
import { resourceKey } from "../kinds/resource-types.ts";
import { ZONE_NAME_PATTERN } from "../names.ts";
import { adminClient, call, read, type AdminTarget } from "./admin-client.ts";
import { parseResourceFile, type ResourceDocument } from "./documents.ts";
import { formatResources, formatTypes, formatZones, type OutputFormat } from "./format.ts";
import type { ZoneState } from "../observe/zone-health.ts";

/** Output formats accepted by -o. */
export const outputFormats = ["table", "json", "yaml"] as const;

/** `generate zone --name NAME`: the Zone resource that registers the zone. */
export function generateZone(name: string, format: "yaml" | "json"): string {
  if (!ZONE_NAME_PATTERN.test(name)) {
    throw new KdsError(
      "invalid_argument",
      `"${name}" is not a valid zone name: use 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit`,
    );
  }
  const doc = { type: ZONE_KIND, name, spec: { enabled: true } };
  return format === "json" ? JSON.stringify(doc, null, 2) : stringify(doc).trimEnd();
}

/**
 * `apply -f FILE...`: reads every file (or stdin for "-") and applies all
 * resources in one call, which the server writes all or nothing. The output
 * says so; a call that failed says whether nothing or (when the server could
 * not tell, or the connection broke) all or nothing was applied.
 */
export async function apply(
  server: AdminTarget | string,
  files: readonly { name: string; text: string }[],
): Promise<string> {
  const documents: ResourceDocument[] = files.flatMap((f) => parseResourceFile(f.text, f.name));
  const client = adminClient(server);
  try {
    const response = await call(server, () =>
      client.apply({ resources: documents.map((d) => d.resource) }),
    );
    const lines = response.resources.map(
      (r) => `${r.type} ${resourceKey(r.mesh, r.name)} applied (version ${r.version})`,
    );
    if (lines.length > 1)
      lines.push(`all ${lines.length} resources applied together (an apply is all or nothing)`);
    return lines.join("\n");
  } catch (error) {
    // This call is never cancelled here, so "aborted" too means the connection broke (an HTTP/2 stream reset when the server died).
    if (
      (KdsError.is(error, "transport") || KdsError.is(error, "aborted")) &&
      documents.length > 0
    ) {
      // The call may have reached the server and committed before the connection broke.
      const what = documents.length === 1 ? "the resource" : `the ${documents.length} resources`;
      throw new KdsError(
        error.code,
        `${error.message}; if the call reached the server, either all or none of ${what} were applied, never a part: run \`kds-mux get\` to see which`,
        { cause: error },
      );
    }
    // Point at the document the server complained about.
    if (error instanceof KdsError) {
      const culprit = documents.find((d) =>
        error.message.includes(`"${resourceKey(d.resource.mesh, d.resource.name)}"`),
      );
      if (culprit !== undefined)
        throw new KdsError(error.code, `${culprit.where}: ${error.message}`, { cause: error });
    }
    throw error;
  }
}

/** `get TYPE [NAME] [--zone ZONE]`: with a zone, what that zone holds itself, answered by the zone through the global. */
export async function get(
  server: AdminTarget | string,
  type: string,
  name: string | undefined,
  mesh: string | undefined,
  format: OutputFormat,
  zone?: string,
): Promise<string> {
  const client = adminClient(server);
  const response = await read(server, () =>
    client.get({ type, name: name ?? "", mesh: mesh ?? "", zone: zone ?? "" }),
  );
  return formatResources(response.resources, format);
}

/** `delete TYPE NAME`. */
export async function remove(
  server: AdminTarget | string,
  type: string,
  name: string,
  mesh: string | undefined,
): Promise<string> {
  const client = adminClient(server);
  await call(server, () => client.delete({ type, name, mesh: mesh ?? "" }));
  return `${type} ${resourceKey(mesh ?? "", name)} deleted`;
}

/** `zone accept-reset NAME`: applies the deletions the reset guard holds for zone NAME. */
export async function acceptReset(server: AdminTarget | string, zone: string): Promise<string> {
  const client = adminClient(server);
  const { deleted } = await call(server, () => client.acceptReset({ zone }));
  return `accepted the reset of zone "${zone}": ${deleted} held deletions applied`;
}

/** `types`. */
export async function types(server: AdminTarget | string, format: OutputFormat): Promise<string> {
  const client = adminClient(server);
  return formatTypes((await read(server, () => client.listTypes({}))).types, format);
}

/** `inspect zone NAME`: the zone's own view of its sync status, answered by the zone through the global. */
export async function inspectZone(
  server: AdminTarget | string,
  zone: string,
  format: OutputFormat,
): Promise<string> {
  const client = adminClient(server);
  return formatZones((await read(server, () => client.inspectZones({ zone }))).zones, format);
}

/** `inspect zones` (`--state`: only the zones in that state). */
export async function inspectZones(
  server: AdminTarget | string,
  format: OutputFormat,
  state?: ZoneState,
): Promise<string> {
  const client = adminClient(server);
  const { zones } = await read(server, () => client.inspectZones({}));
  if (state === undefined) return formatZones(zones, format);
  const chosen = zones.filter((z) => z.state === state);
  if (chosen.length === 0 && format === "table")
    return `No zone is ${state} (of ${zones.length} registered).`;
  return formatZones(chosen, format);
}
