/**
 * How the global proves who a dialing zone is, before it looks anything up
 * for it: the {@link ZoneAuthenticator} seam admission calls
 * (`GlobalServer`), with two implementations: {@link TokenZoneAuthenticator}
 * (a zone token in `authorization: Bearer`, optionally a client certificate
 * of a mutual-TLS connection instead, read by `certificateZone`) and {@link insecureZoneAuthenticator}
 * (trusts `client-id`: local development only).
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import { certificateZone } from "./certificate-identity.ts";
import {
  certificateKeys,
  describeCertificateRevocation,
  revokesCertificate,
} from "./certificate-revocations.ts";
import type { PeerInfo } from "./peer.ts";
import { revokes } from "./revocations.ts";
import type { AuthChange, TokenAuthority } from "./token-authority.ts";
import { bearerToken } from "./tokens.ts";

/** What a zone presents when it dials. */
export interface ZoneCredentials {
  /** The name in its `client-id` header (already checked to be a valid zone name). */
  readonly zone: string;
  /** Its request headers (`authorization` carries the token). */
  readonly headers: Headers;
  /** The connection, when the server adapter knows it (client certificate). */
  readonly peer?: PeerInfo;
}

/** Who a zone was proven to be, and how. */
export interface ZoneIdentity {
  /** The zone's name. */
  readonly zone: string;
  /** What proved it: a zone token, a client certificate, or nothing (insecure mode). */
  readonly proof: "token" | "certificate" | "none";
  /** The token's id (proof "token"). */
  readonly tokenId?: string;
  /** The signing key's id (proof "token"). */
  readonly keyId?: string;
  /** When the token was issued (proof "token"). */
  readonly issuedAt?: Date;
  /**
   * When the credential expires: the token's expiry (proof "token"), or the
   * client certificate's notAfter (proof "certificate"). The global ends a
   * live session then (goaway TOKEN_EXPIRED).
   */
  readonly expiresAt?: Date;
  /** The certificate's SHA-256 fingerprint, lower-case hex (proof "certificate"). */
  readonly certificate?: string;
  /** The certificate's serial number, lower-case hex without leading zeros (proof "certificate"). */
  readonly certificateSerial?: string;
}

/** Decides whether a live session's identity is revoked. */
export type RevokedMatcher = (identity: ZoneIdentity) => boolean | Promise<boolean>;

/** Proves a dialing zone's identity. */
export interface ZoneAuthenticator {
  /** False when it proves nothing (insecure mode); the global then warns. */
  readonly secure: boolean;
  /** How zones are proven, for logs ("zone tokens", ...). */
  readonly description: string;
  /**
   * Proves that the caller is `credentials.zone`. Throws `unauthenticated`
   * (no valid credential) or `permission_denied` (a valid credential for
   * another zone), with the reason and what to do.
   */
  authenticate(credentials: ZoneCredentials, signal?: AbortSignal): Promise<ZoneIdentity>;
  /** Throws when `identity` is no longer valid (revoked since it was proven). */
  revalidate?(identity: ZoneIdentity, signal?: AbortSignal): Promise<void>;
  /**
   * Until `signal` aborts, calls `onRevoked` whenever identities may have
   * been revoked (from any instance sharing the store), with a matcher that
   * picks the live sessions to end and the reason to give them.
   */
  follow?(
    signal: AbortSignal,
    onRevoked: (matches: RevokedMatcher, reason: string) => void,
  ): Promise<void>;
}

/** Options of {@link TokenZoneAuthenticator}. */
export interface TokenZoneAuthenticatorOptions {
  /** The global's admin API address, for the command a zone without a token is told. */
  readonly adminUrl?: () => string;
  /**
   * Also admit a zone by a client certificate that the server verified
   * (mutual TLS) and that names the zone by the rule of `certificateZone`
   * (its URI or DNS SANs, else its one CN), unless it was revoked. Default false.
   */
  readonly certificates?: boolean;
}

/** The command that creates a zone token, as refusals tell it. */
export function zoneTokenCommand(zone: string, server: string): string {
  return `kds-mux generate zone-token --zone ${zone} --server ${server} > ${zone}.token`;
}

/** The refusal of a zone that presented no credential. */
export function missingTokenMessage(zone: string, server: string, certificates: boolean): string {
  return (
    `zone "${zone}" presented no token. A zone proves its name with a zone token in the "authorization: Bearer <token>" header` +
    `${certificates ? " (or a client certificate that names it: a SAN spiffe://<trust-domain>/zone/<name> or <name>, or its only CN)" : ""}. Create one on the global and start the zone with it:\n\n` +
    `  ${zoneTokenCommand(zone, server)}\n  kds-mux zone --name ${zone} --token-file ${zone}.token --global <global-url>`
  );
}

/** Admits zones by zone token (and optionally by client certificate). */
export class TokenZoneAuthenticator implements ZoneAuthenticator {
  readonly secure = true;
  readonly description: string;
  readonly #authority: TokenAuthority;
  readonly #adminUrl: () => string;
  readonly #certificates: boolean;

  /**
   * @param authority - verifies tokens against the store's keys and revocations
   * @param options - admin URL for messages, certificates
   */
  constructor(authority: TokenAuthority, options: TokenZoneAuthenticatorOptions = {}) {
    this.#authority = authority;
    this.#adminUrl = options.adminUrl ?? (() => "<global-admin-url>");
    this.#certificates = options.certificates ?? false;
    this.description = this.#certificates ? "client certificates or zone tokens" : "zone tokens";
  }

  async authenticate(credentials: ZoneCredentials, signal?: AbortSignal): Promise<ZoneIdentity> {
    const { zone } = credentials;
    const certificate = this.#certificates ? credentials.peer?.certificate : undefined;
    const token = bearerToken(credentials.headers);
    if (certificate !== undefined && (certificate.authorized || token === undefined)) {
      if (!certificate.authorized) {
        throw new KdsError(
          "unauthenticated",
          `zone "${zone}"'s client certificate is not trusted (${certificate.authorizationError ?? "unknown reason"}); use a certificate signed by the CA the global trusts for zones, or a zone token`,
        );
      }
      const proven = certificateZone(certificate, zone);
      if (proven !== zone) {
        throw new KdsError(
          "permission_denied",
          `the client certificate proves zone "${proven}", but the stream names itself "${zone}" in client-id; a zone may only connect as itself`,
        );
      }
      const keys = certificateKeys(certificate);
      const revocation = await this.#authority.certificates.find(keys, signal);
      if (revocation !== undefined) {
        throw new KdsError(
          "unauthenticated",
          `zone "${zone}"'s client certificate was revoked (${describeCertificateRevocation(revocation)}, at ${revocation.revokedAt.toISOString()}); issue the zone a new certificate, or have it dial with a zone token and no client certificate`,
        );
      }
      return {
        zone,
        proof: "certificate",
        certificate: keys.fingerprint,
        certificateSerial: keys.serial,
        ...(certificate.notAfter === undefined ? {} : { expiresAt: certificate.notAfter }),
      };
    }
    if (token === undefined)
      throw new KdsError(
        "unauthenticated",
        missingTokenMessage(zone, this.#adminUrl(), this.#certificates),
      );
    const claims = await this.#authority.verifyZoneToken(token, signal);
    if (claims.zone !== zone) {
      throw new KdsError(
        "permission_denied",
        `the zone token proves zone "${claims.zone}", but the stream names itself "${zone}" in client-id; a zone may only connect as itself`,
      );
    }
    return {
      zone,
      proof: "token",
      tokenId: claims.tokenId,
      keyId: claims.keyId,
      issuedAt: claims.issuedAt,
      expiresAt: claims.expiresAt,
    };
  }

  async revalidate(identity: ZoneIdentity, signal?: AbortSignal): Promise<void> {
    if (identity.proof === "certificate") {
      const revocation = await this.#authority.certificates.find(
        { serial: identity.certificateSerial, fingerprint: identity.certificate },
        signal,
      );
      if (revocation !== undefined)
        throw new KdsError(
          "unauthenticated",
          `zone "${identity.zone}"'s client certificate was revoked (${describeCertificateRevocation(revocation)})`,
        );
      return;
    }
    if (
      identity.proof !== "token" ||
      identity.tokenId === undefined ||
      identity.issuedAt === undefined
    )
      return;
    if (
      identity.keyId === undefined ||
      (await this.#authority.keys.verifier(identity.keyId, signal)) === undefined
    ) {
      throw new KdsError(
        "unauthenticated",
        `the key that signed zone "${identity.zone}"'s token was retired`,
      );
    }
    const revocation = await this.#authority.revocations.find(
      { tokenId: identity.tokenId, zone: identity.zone, issuedAt: identity.issuedAt },
      signal,
    );
    if (revocation !== undefined)
      throw new KdsError("unauthenticated", `zone "${identity.zone}"'s token was revoked`);
  }

  follow(
    signal: AbortSignal,
    onRevoked: (matches: RevokedMatcher, reason: string) => void,
  ): Promise<void> {
    return this.#authority.follow(signal, (change: AuthChange) => {
      switch (change.kind) {
        case "revoked": {
          const r = change.revocation;
          onRevoked(
            (id) =>
              id.proof === "token" &&
              id.tokenId !== undefined &&
              id.issuedAt !== undefined &&
              revokes(r, { tokenId: id.tokenId, zone: id.zone, issuedAt: id.issuedAt }),
            r.scope === "token"
              ? `its zone token was revoked by ${r.revokedBy}`
              : `every token of the zone was revoked by ${r.revokedBy}`,
          );
          return;
        }
        case "certificate-revoked": {
          const r = change.revocation;
          onRevoked(
            (id) =>
              id.proof === "certificate" &&
              revokesCertificate(r, { serial: id.certificateSerial, fingerprint: id.certificate }),
            `its client certificate was revoked (${describeCertificateRevocation(r)}) by ${r.revokedBy}`,
          );
          return;
        }
        case "key-retired":
          onRevoked(
            (id) => id.proof === "token" && id.keyId === change.keyId,
            `the key that signed its zone token (${change.keyId}) was retired`,
          );
          return;
        case "resync":
          onRevoked(
            (id) =>
              this.revalidate(id).then(
                () => false,
                // Only a definite "no longer valid" ends the session; any other failure goes to the caller, which logs it.
                (error: unknown) => {
                  if (KdsError.is(error, "unauthenticated")) return true;
                  throw error;
                },
              ),
            "its zone token or client certificate is no longer valid",
          );
          return;
      }
    });
  }
}

/**
 * Trusts the `client-id` header: any client can be any zone. For local
 * development only (`kds-mux global --insecure-no-zone-auth`); the global
 * logs a loud warning when it runs with it.
 */
export function insecureZoneAuthenticator(): ZoneAuthenticator {
  return {
    secure: false,
    description: "NONE: any client that sets client-id is that zone",
    authenticate: (credentials) => Promise.resolve({ zone: credentials.zone, proof: "none" }),
  };
}
