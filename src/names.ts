/**
 * Names shared by both roles: the header a zone names itself in, and the
 * rules a zone name follows.
 *
 * @module
 */
import { KdsError } from "./errors.ts";

/** Header in which a zone names itself. */
export const CLIENT_ID_HEADER = "client-id";

/** Zone names follow DNS label rules: lower-case letters, digits and '-', 1 to 63 characters. */
export const ZONE_NAME_PATTERN = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/** Throws `invalid_argument` unless `name` is a valid zone name. */
export function assertZoneName(name: string): void {
  if (!ZONE_NAME_PATTERN.test(name)) {
    throw new KdsError(
      "invalid_argument",
      `"${name}" is not a valid zone name: use 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit`,
    );
  }
}
