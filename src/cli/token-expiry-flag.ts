/**
 * `--token-expiry-warning` of `kds-mux global`: how long before a zone's
 * credential (zone token, client certificate) expires the global logs an
 * error line about it (src/global/credential-expiry.ts).
 *
 * @module
 */
import { Option } from "commander";
import { durationFlag } from "./connection-flags.ts";

/** The flag, as commander parsed it. */
export interface TokenExpiryFlags {
  /** --token-expiry-warning, in ms. */
  readonly tokenExpiryWarning?: number;
}

/** `--token-expiry-warning`. */
export const tokenExpiryWarningOption = (): Option =>
  new Option(
    "--token-expiry-warning <duration>",
    "log an error this long before a zone's token (or client certificate) expires; its session ends at expiry with goaway TOKEN_EXPIRED and the zone dials again with its token file read again (default 24h)",
  ).argParser(durationFlag("--token-expiry-warning"));
