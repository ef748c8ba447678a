/**
 * A control plane's token authority: issues zone and admin tokens with the
 * signing key kept in its store, verifies them (signature, audience, expiry,
 * revocation), revokes them and zones' client certificates, rotates the key,
 * and follows the store's change feed so a revocation made on any instance
 * acts on every instance at once.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import { consoleLogger, type Logger } from "../log.ts";
import { ZONE_NAME_PATTERN, assertZoneName } from "../names.ts";
import type { ResourceStore, StoreChange } from "../store/contract.ts";
import { followStore } from "../store/follow.ts";
import { InMemoryStore } from "../store/memory.ts";
import {
  CERTIFICATE_REVOCATION_KIND,
  SIGNING_KEY_KIND,
  TOKEN_REVOCATION_KIND,
  authTypes,
} from "../kinds/builtin-types.ts";
import { TypeRegistry } from "../kinds/resource-types.ts";
import type { CertificateRevocationSpec, TokenRevocationSpec } from "../gen/kds/v1/auth_pb.ts";
import {
  CertificateRevocations,
  certificateRevocationOf,
  type CertificateRevocation,
  type CertificateTarget,
} from "./certificate-revocations.ts";
import { Revocations, revocationOf, type Revocation } from "./revocations.ts";
import { SigningKeys } from "./signing-keys.ts";
import {
  ADMIN_ROLES,
  ADMIN_TOKEN_AUDIENCE,
  ZONE_TOKEN_AUDIENCE,
  commonClaims,
  signToken,
  verifyToken,
  type AdminRole,
  type AdminTokenClaims,
  type IssuedToken,
  type ZoneTokenClaims,
} from "./tokens.ts";

/** Default validity of a token: 30 days. */
export const DEFAULT_TOKEN_VALIDITY_MS = 720 * 3_600_000;

/** What changed in the store that may end live sessions. */
export type AuthChange =
  | { readonly kind: "revoked"; readonly revocation: Revocation }
  | { readonly kind: "certificate-revoked"; readonly revocation: CertificateRevocation }
  | { readonly kind: "key-retired"; readonly keyId: string }
  /** The change feed could not resume: re-check every live identity. */
  | { readonly kind: "resync" };

/** Options of {@link TokenAuthority}. */
export interface TokenAuthorityOptions {
  /**
   * The store keeping keys and revocations (contract v2), shared by every
   * instance; its types must include the internal identity kinds (as
   * `createTypeRegistry` does). Default: a store in memory (one instance).
   */
  readonly store?: ResourceStore;
  /** The issuing control plane's name, written to `iss`. */
  readonly issuer: string;
  /** The clock. Default `() => new Date()`. */
  readonly now?: () => Date;
  /** Where to log. */
  readonly logger?: Logger;
}

/** Issues, verifies and revokes tokens. */
export class TokenAuthority {
  /** The signing keys. */
  readonly keys: SigningKeys;
  /** The revoked tokens. */
  readonly revocations: Revocations;
  /** The revoked client certificates. */
  readonly certificates: CertificateRevocations;
  readonly #store: ResourceStore;
  readonly #issuer: string;
  readonly #now: () => Date;
  readonly #logger: Logger;

  /** @param options - store, issuer, clock */
  constructor(options: TokenAuthorityOptions) {
    this.#store = options.store ?? new InMemoryStore(new TypeRegistry(authTypes));
    this.#issuer = options.issuer;
    this.#now = options.now ?? (() => new Date());
    this.#logger = options.logger ?? consoleLogger();
    this.keys = new SigningKeys(this.#store);
    this.revocations = new Revocations(this.#store, this.#now);
    this.certificates = new CertificateRevocations(this.#store, this.#now);
  }

  /** A token proving zone `zone`, valid for `validForMs` (default 30 days). */
  async issueZoneToken(
    zone: string,
    options: { validForMs?: number; signal?: AbortSignal } = {},
  ): Promise<IssuedToken> {
    assertZoneName(zone);
    const key = await this.keys.active(options.signal);
    return signToken(key, {
      audience: ZONE_TOKEN_AUDIENCE,
      subject: zone,
      claims: { zone },
      issuer: this.#issuer,
      validForMs: options.validForMs ?? DEFAULT_TOKEN_VALIDITY_MS,
      now: this.#now(),
    });
  }

  /** An admin token for `name` with `role`, valid for `validForMs` (default 30 days). */
  async issueAdminToken(
    name: string,
    role: AdminRole,
    options: { validForMs?: number; signal?: AbortSignal } = {},
  ): Promise<IssuedToken> {
    if (!(ADMIN_ROLES as readonly string[]).includes(role))
      throw new KdsError(
        "invalid_argument",
        `role must be one of ${ADMIN_ROLES.join(", ")}, got "${role}"`,
      );
    if (!/^[\w.@+-]{1,128}$/.test(name))
      throw new KdsError(
        "invalid_argument",
        `admin token name "${name}" must be 1 to 128 letters, digits, '.', '@', '+', '-' or '_'`,
      );
    const key = await this.keys.active(options.signal);
    return signToken(key, {
      audience: ADMIN_TOKEN_AUDIENCE,
      subject: name,
      claims: { role },
      issuer: this.#issuer,
      validForMs: options.validForMs ?? DEFAULT_TOKEN_VALIDITY_MS,
      now: this.#now(),
    });
  }

  /** Verifies a zone token; throws `unauthenticated` saying why it is not valid. */
  async verifyZoneToken(token: string, signal?: AbortSignal): Promise<ZoneTokenClaims> {
    const { payload, keyId } = await verifyToken(
      token,
      ZONE_TOKEN_AUDIENCE,
      (id) => this.keys.verifier(id, signal),
      this.#now(),
    );
    const zone = typeof payload.zone === "string" ? payload.zone : "";
    if (!ZONE_NAME_PATTERN.test(zone) || payload.sub !== zone)
      throw new KdsError("unauthenticated", "the zone token names no valid zone");
    const claims: ZoneTokenClaims = { ...commonClaims(payload, keyId), zone };
    await this.#assertNotRevoked("zone token", claims, signal);
    return claims;
  }

  /** Verifies an admin token; throws `unauthenticated` saying why it is not valid. */
  async verifyAdminToken(token: string, signal?: AbortSignal): Promise<AdminTokenClaims> {
    const { payload, keyId } = await verifyToken(
      token,
      ADMIN_TOKEN_AUDIENCE,
      (id) => this.keys.verifier(id, signal),
      this.#now(),
    );
    const role = payload.role;
    if (typeof role !== "string" || !(ADMIN_ROLES as readonly string[]).includes(role))
      throw new KdsError("unauthenticated", "the admin token names no valid role");
    const claims: AdminTokenClaims = {
      ...commonClaims(payload, keyId),
      name: String(payload.sub),
      role: role as AdminRole,
    };
    await this.#assertNotRevoked("admin token", claims, signal);
    return claims;
  }

  /** Revokes one token by id, or every token of a zone issued until now. */
  async revoke(
    target: { tokenId: string } | { zone: string },
    revokedBy: string,
    signal?: AbortSignal,
  ): Promise<Revocation> {
    if ("zone" in target) {
      assertZoneName(target.zone);
      return this.revocations.revokeZone(target.zone, revokedBy, signal);
    }
    if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(target.tokenId)) {
      throw new KdsError(
        "invalid_argument",
        `"${target.tokenId}" is not a token id (a UUID, the token's jti claim; kds-mux revoke zone-token --token-file FILE reads it from the token)`,
      );
    }
    return this.revocations.revokeToken(target.tokenId, revokedBy, signal);
  }

  /**
   * Revokes a client certificate by its serial number or SHA-256 fingerprint
   * (hex; colons and case do not matter): every instance sharing the store
   * refuses it from now on and ends the sessions it admitted.
   *
   * @throws KdsError `invalid_argument` when the serial or fingerprint is not hex
   */
  revokeCertificate(
    target: CertificateTarget,
    revokedBy: string,
    signal?: AbortSignal,
  ): Promise<CertificateRevocation> {
    return this.certificates.revoke(target, revokedBy, signal);
  }

  /**
   * Follows the store's change feed until `signal` aborts, calling
   * `onChange` for every revocation (of a token or a certificate) and
   * retired key, from any instance.
   * Store failures are logged and retried with backoff (`followStore`); a
   * feed that can no longer resume reports `resync`.
   */
  follow(signal: AbortSignal, onChange: (change: AuthChange) => void): Promise<void> {
    return followStore({
      store: this.#store,
      kinds: [TOKEN_REVOCATION_KIND, CERTIFICATE_REVOCATION_KIND, SIGNING_KEY_KIND],
      signal,
      what: "token and certificate revocations and signing keys",
      logger: this.#logger,
      begin: async (beginSignal, compacted) => {
        // After a gap in the feed, every live identity is checked again against the store.
        if (compacted) onChange({ kind: "resync" });
        return this.#store.revision({ signal: beginSignal });
      },
      onChange: (change) => {
        const event = authChange(change);
        if (event !== undefined) onChange(event);
      },
    });
  }

  async #assertNotRevoked(
    name: string,
    claims: { tokenId: string; zone?: string; issuedAt: Date },
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const revocation = await this.revocations.find(claims, signal);
    if (revocation === undefined) return;
    const scope =
      revocation.scope === "token"
        ? `token ${claims.tokenId}`
        : `every token of zone "${revocation.zone}" issued until ${revocation.issuedBefore.toISOString()}`;
    throw new KdsError(
      "unauthenticated",
      `the ${name} was revoked (${scope}, at ${revocation.revokedAt.toISOString()}); create a new one`,
    );
  }
}

function authChange(change: StoreChange): AuthChange | undefined {
  if (change.op === "put") {
    if (change.resource.kind === CERTIFICATE_REVOCATION_KIND)
      return {
        kind: "certificate-revoked",
        revocation: certificateRevocationOf(change.resource.spec as CertificateRevocationSpec),
      };
    if (change.resource.kind !== TOKEN_REVOCATION_KIND) return undefined;
    return {
      kind: "revoked",
      revocation: revocationOf(change.resource.spec as TokenRevocationSpec),
    };
  }
  return change.ref.kind === SIGNING_KEY_KIND
    ? { kind: "key-retired", keyId: change.ref.name }
    : undefined;
}
