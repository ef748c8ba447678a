/**
 * `kds-mux generate zone-token`, `generate admin-token`, `revoke zone-token`,
 * `revoke certificate` and `rotate signing-key`: talk to the token service on
 * an admin API.
 *
 * @module
 */
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { X509Certificate } from "node:crypto";
import { decodeJwt } from "jose";
import { ADMIN_ROLES } from "../auth/tokens.ts";
import { KdsError } from "../errors.ts";
import { assertZoneName } from "../names.ts";
import { call, tokenClient, type AdminTarget } from "./admin-client.ts";
import { readPem, readTokenFile } from "./secret-files.ts";

function seconds(validForMs: number): bigint {
  if (!Number.isFinite(validForMs) || validForMs < 1000)
    throw new KdsError("invalid_argument", `--valid-for must be at least 1s`);
  return BigInt(Math.floor(validForMs / 1000));
}

/**
 * What `generate zone-token` and `generate admin-token` print: the token
 * alone, with a newline only for a terminal. Redirected to a file
 * (`> NAME.token`) it is exactly the token, no whitespace, since some readers
 * take a token file's bytes as they are (kds-mux's own readers strip
 * surrounding whitespace).
 */
export function tokenOutput(token: string, terminal: boolean): string {
  return terminal ? `${token}\n` : token;
}

/** `generate zone-token --zone NAME`: prints a zone token (only the token on stdout, so it can go to a file). */
export async function generateZoneToken(
  server: AdminTarget,
  zone: string,
  validForMs: number,
): Promise<{ token: string; note: string }> {
  assertZoneName(zone);
  const client = tokenClient(server);
  const r = await call(server, () =>
    client.generateZoneToken({ zone, validForSeconds: seconds(validForMs) }),
  );
  return {
    token: r.token,
    note: `zone token ${r.tokenId} for zone "${zone}", valid until ${r.expiresAt === undefined ? "?" : timestampDate(r.expiresAt).toISOString()}`,
  };
}

/** `generate admin-token --name NAME --role ROLE`: prints an admin token. */
export async function generateAdminToken(
  server: AdminTarget,
  name: string,
  role: string,
  validForMs: number,
): Promise<{ token: string; note: string }> {
  if (!(ADMIN_ROLES as readonly string[]).includes(role))
    throw new KdsError(
      "invalid_argument",
      `--role must be one of ${ADMIN_ROLES.join(", ")}, got "${role}"`,
    );
  const client = tokenClient(server);
  const r = await call(server, () =>
    client.generateAdminToken({ name, role, validForSeconds: seconds(validForMs) }),
  );
  return {
    token: r.token,
    note: `${role} admin token ${r.tokenId} for "${name}", valid until ${r.expiresAt === undefined ? "?" : timestampDate(r.expiresAt).toISOString()}`,
  };
}

/** The id (`jti`) of the token in `file`, read without verifying it (the server checks nothing it says but the id). */
export function tokenIdOf(file: string): string {
  let cause: unknown;
  try {
    const jti = decodeJwt(readTokenFile(file)).jti;
    if (typeof jti === "string" && jti !== "") return jti;
  } catch (error) {
    if (KdsError.is(error)) throw error;
    cause = error; // not a JWT: said below, with the decoder's error as the cause
  }
  throw new KdsError(
    "invalid_argument",
    `--token-file ${file} holds no kds-mux token (a JWT with a jti claim)`,
    { cause },
  );
}

/** `revoke zone-token (--id ID | --token-file FILE | --zone NAME)`. */
export async function revokeToken(
  server: AdminTarget,
  target: { id?: string; tokenFile?: string; zone?: string },
): Promise<string> {
  const given = [target.id, target.tokenFile, target.zone].filter((v) => v !== undefined).length;
  if (given !== 1)
    throw new KdsError(
      "invalid_argument",
      "name exactly one of --id ID, --token-file FILE (revoke that token) and --zone NAME (revoke every token of the zone issued until now)",
    );
  const client = tokenClient(server);
  if (target.zone !== undefined) {
    assertZoneName(target.zone);
    await call(server, () => client.revokeToken({ zone: target.zone }));
    return `revoked every token of zone "${target.zone}" issued until now; its live sessions end`;
  }
  const tokenId = target.id ?? tokenIdOf(target.tokenFile as string);
  await call(server, () => client.revokeToken({ tokenId }));
  return `revoked token ${tokenId}; sessions admitted with it end`;
}

/** The SHA-256 fingerprint of the first certificate in the PEM file `file` (`--cert-file`). */
export function certificateFingerprintOf(file: string): string {
  const pem = readPem(file, "--cert-file");
  try {
    return new X509Certificate(pem).fingerprint256;
  } catch (error) {
    throw new KdsError(
      "invalid_argument",
      `--cert-file ${file} holds no X.509 certificate that can be read (${error instanceof Error ? error.message : String(error)})`,
      { cause: error },
    );
  }
}

/** `revoke certificate (--serial HEX | --fingerprint SHA256 | --cert-file FILE)`. */
export async function revokeCertificate(
  server: AdminTarget,
  target: { serial?: string; fingerprint?: string; certFile?: string },
): Promise<string> {
  const given = [target.serial, target.fingerprint, target.certFile].filter(
    (v) => v !== undefined,
  ).length;
  if (given !== 1)
    throw new KdsError(
      "invalid_argument",
      "name exactly one of --serial HEX, --fingerprint SHA256 and --cert-file FILE (the certificate to revoke)",
    );
  const fingerprint =
    target.certFile !== undefined ? certificateFingerprintOf(target.certFile) : target.fingerprint;
  const client = tokenClient(server);
  const r = await call(server, () =>
    client.revokeCertificate(
      fingerprint !== undefined ? { fingerprintSha256: fingerprint } : { serial: target.serial },
    ),
  );
  return `revoked the client certificate ${r.revoked}; sessions admitted with it end, and it is refused from now on`;
}

/** `rotate signing-key [--retire-previous]`. */
export async function rotateSigningKey(
  server: AdminTarget,
  retirePrevious: boolean,
): Promise<string> {
  const client = tokenClient(server);
  const r = await call(server, () => client.rotateSigningKey({ retirePrevious }));
  return `new tokens are signed with ${r.keyId}${r.retiredKeyIds.length > 0 ? `; retired ${r.retiredKeyIds.join(", ")} (tokens they signed no longer work; sessions admitted with them end)` : "; older keys still verify the tokens they signed (--retire-previous deletes them)"}`;
}
