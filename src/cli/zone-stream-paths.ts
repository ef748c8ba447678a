/**
 * A zone that dials an admin listener instead of the global's zone listener
 * gets a refusal that says so, rather than `unauthenticated` (which reads as
 * a token problem) or a bare "unimplemented".
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import { HalfDuplexService } from "../gen/kds/mux/v1/half_duplex_pb.ts";
import { MultiplexService } from "../gen/kds/mux/v1/mux_pb.ts";

/** The path prefixes of the zone-facing services, served on the global's zone listener only. */
const ZONE_SERVICES: readonly string[] = [
  `/${MultiplexService.typeName}/`,
  `/${HalfDuplexService.typeName}/`,
];

/**
 * Throws `invalid_argument` when `path` is a call of a zone-facing service
 * (the mux stream, or the half-duplex Pull and Push), which an admin listener
 * of `role` never serves: the message names the listener a zone dials
 * instead. Returns for any other path.
 */
export function refuseZoneStreamOnAdmin(path: string, role: "global" | "zone"): void {
  if (!ZONE_SERVICES.some((prefix) => path.startsWith(prefix))) return;
  const here =
    role === "global"
      ? "the global's admin API (kds-mux global --admin-listen, default port 5681)"
      : "a zone's admin API (kds-mux zone --admin-listen)";
  throw new KdsError(
    "invalid_argument",
    `${path} is a zone's stream to the global, but this address is ${here}. A zone dials the global's zone listener: the address of kds-mux global --listen (default port 5685), for example kds-mux zone --global http://GLOBAL-HOST:5685`,
  );
}
