/**
 * The CLI's words for the library's options. Library errors name an option
 * the way a library user sets it, in backticks (`maxHandshakes`); a CLI user
 * sets it with a flag. Every message the CLI prints (errors, log lines, the
 * conformance table) passes through {@link withFlags}, which puts the flag
 * in the option's place.
 *
 * @module
 */

/**
 * Option (or admin request field) as library messages name it -> the flag
 * that sets it. Only names that occur in backticks in a library message and
 * that a CLI command takes as a flag belong here.
 */
export const OPTION_FLAGS: Readonly<Record<string, string>> = {
  // GlobalServer (kds-mux global)
  maxHandshakes: "--max-handshakes",
  maxHandshakesPerZone: "--max-handshakes-per-zone",
  handshakeTimeoutMs: "--hello-timeout",
  memoryBudget: "--max-buffer-bytes",
  // startEmbeddedPostgres (kds-mux global / zone)
  dataDir: "--data-dir",
  // ZoneControlPlane (kds-mux zone)
  leaseDurationMs: "--lease-duration",
  // GlobalControlPlane, ZoneControlPlane and the embedded engine's "use another store"
  store: "--store (memory, or a postgres:// URL)",
  // AdminService / TokenService request fields (kds-mux get, delete, generate admin-token)
  mesh: "--mesh",
  zone: "--zone",
  role: "--role",
  "authorization: Bearer TOKEN": "--token TOKEN (or KDS_MUX_TOKEN)",
  // checkZone (kds-mux conformance zone)
  dialWaitMs: "--wait",
  catalog: "--kinds",
};

const NAMED = new RegExp(
  `\`(${Object.keys(OPTION_FLAGS)
    .map((name) => name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
    .join("|")})\``,
  "g",
);

/** `message` with every backticked option of {@link OPTION_FLAGS} replaced by its flag. */
export function withFlags(message: string): string {
  return message.replace(NAMED, (_, name: string) => OPTION_FLAGS[name] ?? name);
}
