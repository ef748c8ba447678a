/**
 * The token admin API (`kds.admin.v1.TokenService`) over a side's token
 * authority: create zone and admin tokens, revoke tokens and zones' client
 * certificates, rotate the signing key. Served on the admin listener next to `AdminService`; its every method
 * counts as a write (the admin role), and every call is logged with its caller.
 *
 * @module
 */
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";
import { adminPrincipalKey, describePrincipal } from "../auth/admin-authorizer.ts";
import { describeCertificateRevocation } from "../auth/certificate-revocations.ts";
import type { TokenAuthority } from "../auth/token-authority.ts";
import { ADMIN_ROLES, type AdminRole } from "../auth/tokens.ts";
import { KdsError } from "../errors.ts";
import { TokenService } from "../gen/kds/admin/v1/tokens_pb.ts";
import type { Logger } from "../log.ts";
import { toConnectError } from "../connect-errors.ts";
import { logWrite } from "./admin-service.ts";

/** What the token admin API serves from. */
export interface TokenBackend {
  /** Which side this is: only a global issues zone tokens. */
  readonly role: "global" | "zone";
  /** The side's token authority. */
  readonly tokens: TokenAuthority;
  /** Where calls are logged, with who made them. */
  readonly logger?: Logger;
}

function validFor(seconds: bigint): number | undefined {
  if (seconds === 0n) return undefined;
  if (seconds > 10n * 365n * 86_400n)
    throw new KdsError("invalid_argument", "a token can be valid for at most 10 years");
  return Number(seconds) * 1000;
}

/** The TokenService implementation over `backend`. */
export function tokenServiceImpl(backend: TokenBackend): ServiceImpl<typeof TokenService> {
  const { tokens } = backend;
  const guard = async <T>(work: () => Promise<T>): Promise<T> => {
    try {
      return await work();
    } catch (error) {
      throw toConnectError(error);
    }
  };
  return {
    generateZoneToken: (request, context) =>
      guard(async () => {
        if (backend.role !== "global")
          throw new KdsError(
            "invalid_argument",
            "zone tokens are issued by the global; send the request to the global's admin API",
          );
        const issued = await tokens.issueZoneToken(request.zone, {
          validForMs: validFor(request.validForSeconds),
          signal: context.signal,
        });
        logWrite(
          backend,
          context,
          `issued zone token ${issued.tokenId} for zone "${request.zone}", valid until ${issued.expiresAt.toISOString()}`,
        );
        return {
          token: issued.token,
          tokenId: issued.tokenId,
          expiresAt: timestampFromDate(issued.expiresAt),
        };
      }),
    generateAdminToken: (request, context) =>
      guard(async () => {
        if (!(ADMIN_ROLES as readonly string[]).includes(request.role))
          throw new KdsError(
            "invalid_argument",
            `\`role\` must be one of ${ADMIN_ROLES.join(", ")}, got "${request.role}"`,
          );
        const issued = await tokens.issueAdminToken(request.name, request.role as AdminRole, {
          validForMs: validFor(request.validForSeconds),
          signal: context.signal,
        });
        logWrite(
          backend,
          context,
          `issued ${request.role} admin token ${issued.tokenId} for "${request.name}", valid until ${issued.expiresAt.toISOString()}`,
        );
        return {
          token: issued.token,
          tokenId: issued.tokenId,
          expiresAt: timestampFromDate(issued.expiresAt),
        };
      }),
    revokeToken: (request, context) =>
      guard(async () => {
        if ((request.tokenId === "") === (request.zone === ""))
          throw new KdsError(
            "invalid_argument",
            "name exactly one of a token id and a zone to revoke",
          );
        const by = describePrincipal(context.values.get(adminPrincipalKey));
        await tokens.revoke(
          request.tokenId !== "" ? { tokenId: request.tokenId } : { zone: request.zone },
          by,
          context.signal,
        );
        logWrite(
          backend,
          context,
          request.tokenId !== ""
            ? `revoked token ${request.tokenId}`
            : `revoked every token of zone "${request.zone}" issued until now`,
        );
        return {};
      }),
    revokeCertificate: (request, context) =>
      guard(async () => {
        if (backend.role !== "global")
          throw new KdsError(
            "invalid_argument",
            "client certificates admit zones on the global only; revoke a certificate on the global's admin API",
          );
        if ((request.serial === "") === (request.fingerprintSha256 === ""))
          throw new KdsError(
            "invalid_argument",
            "name exactly one of a certificate's serial number and its SHA-256 fingerprint to revoke",
          );
        const by = describePrincipal(context.values.get(adminPrincipalKey));
        const revoked = await tokens.revokeCertificate(
          request.serial !== ""
            ? { serial: request.serial }
            : { fingerprint: request.fingerprintSha256 },
          by,
          context.signal,
        );
        logWrite(
          backend,
          context,
          `revoked the client certificate with ${describeCertificateRevocation(revoked)}`,
        );
        return { revoked: revoked.name };
      }),
    rotateSigningKey: (request, context) =>
      guard(async () => {
        const rotated = await tokens.keys.rotate({
          retirePrevious: request.retirePrevious,
          signal: context.signal,
        });
        logWrite(
          backend,
          context,
          `rotated the signing key to ${rotated.id}${rotated.retired.length > 0 ? `, retired ${rotated.retired.join(", ")}` : ""}`,
        );
        return { keyId: rotated.id, retiredKeyIds: rotated.retired };
      }),
  };
}

/** Registers the TokenService on `router`. */
export function registerTokenService(router: ConnectRouter, backend: TokenBackend): ConnectRouter {
  return router.service(TokenService, tokenServiceImpl(backend));
}
