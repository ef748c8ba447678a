/**
 * What the global tells a zone it refuses: exactly how to register it.
 *
 * @module
 */

/** The command that registers zone `name` on the global whose admin API is at `server`. */
export function registerCommand(name: string, server: string): string {
  return `kds-mux generate zone --name ${name} | kds-mux apply -f - --server ${server}`;
}

/** The Zone resource that registers zone `name`, as `kds-mux generate zone` prints it. */
export function zoneResourceYaml(name: string): string {
  return ["type: Zone", `name: ${name}`, "spec:", "  enabled: true"].join("\n");
}

function indent(text: string): string {
  return text
    .split("\n")
    .map((line) => `  ${line}`)
    .join("\n");
}

/** The refusal message for a zone the global does not know. */
export function notRegisteredMessage(name: string, globalId: string, server: string): string {
  return (
    `zone "${name}" is not registered on global "${globalId}". ` +
    "Register it on the global; the zone connects on its next retry:\n\n" +
    `${indent(registerCommand(name, server))}\n\n` +
    `That applies this cluster-scoped resource:\n\n${indent(zoneResourceYaml(name))}`
  );
}

/** The refusal message for a registered but disabled zone. */
export function disabledMessage(name: string, globalId: string, server: string): string {
  return (
    `zone "${name}" is registered on global "${globalId}" but disabled. ` +
    "Enable it on the global (this re-applies the Zone resource with enabled: true); the zone connects on its next retry:\n\n" +
    `${indent(registerCommand(name, server))}`
  );
}

/** The refusal message for a stream without a `client-id` header. */
export function missingClientIdMessage(): string {
  return (
    'the stream carries no "client-id" header; a zone names itself in it. ' +
    "Dial through kds-mux's zone client (ZoneClient or `kds-mux zone --name NAME`), which sets it"
  );
}
