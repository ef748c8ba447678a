/**
 * Admin composes the roles: it builds the admin API's backend of a global or
 * a zone from the role's public parts, so neither role imports the admin API
 * (docs/architecture.md: every import points down).
 *
 * @module
 */
import type { GlobalControlPlane } from "../global/global-control-plane.ts";
import type { ZoneControlPlane } from "../zone/zone-control-plane.ts";
import type { AdminBackend } from "./admin-service.ts";

/** The admin API backend of a global (see `registerAdmin`): every zone's status, reverse calls to zones. */
export function globalAdminBackend(global: GlobalControlPlane): AdminBackend {
  return {
    role: "global",
    types: global.types,
    store: global.store,
    tokens: global.tokens,
    logger: global.logger,
    zoneStatuses: () => global.zoneStatuses(),
    zoneTransport: (zone) => global.server.zoneTransport(zone),
  };
}

/**
 * The admin API backend of a zone (see `registerAdmin`). To serve it on an
 * admin listener with admin tokens, add a `TokenAuthority` over the zone's
 * store (`kds-mux zone` does; a zone in a browser needs none, and leaves the
 * JWT library out of its bundle).
 */
export function zoneAdminBackend(zone: ZoneControlPlane): AdminBackend {
  return {
    role: "zone",
    types: zone.types,
    store: zone.store,
    logger: zone.logger,
    zoneStatuses: () => Promise.resolve([zone.status()]),
  };
}
