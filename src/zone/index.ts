/**
 * `kds-mux/zone`: the zone side. {@link ZoneControlPlane} (store, sync and a
 * reconnecting client in one) or, below it, {@link ZoneClient} (dial, hand
 * each session over, reconnect with backoff). Web standards only: this is what
 * a zone in a web page bundles, together with a transport from
 * `kds-mux/transport`.
 *
 * @module
 */
export {
  DEFAULT_RECONNECT_JITTER_MS,
  ZoneClient,
  type RetryInfo,
  type ZoneClientOptions,
} from "./zone-client.ts";
export {
  backoffCeiling,
  backoffDelay,
  defaultBackoff,
  resolveBackoff,
  type BackoffOptions,
  type ResolvedBackoff,
} from "../util/backoff.ts";
export { ZoneControlPlane, type ZoneControlPlaneOptions } from "./zone-control-plane.ts";
export {
  DEFAULT_LEASE_DURATION_MS,
  Leadership,
  type LeadershipOptions,
  type LeadershipState,
} from "./leadership.ts";
