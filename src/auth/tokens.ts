/**
 * The two tokens kds-mux issues, as JWTs signed with ES256:
 *
 * - a **zone token** (`aud: "kds-mux/zone"`) proves a zone's name (`zone`
 *   claim) to the global; the zone sends it in `authorization: Bearer`;
 * - an **admin token** (`aud: "kds-mux/admin"`) gives its holder (`sub`) a
 *   role (`role`: `read-only` or `admin`) on an admin API.
 *
 * Both carry `jti` (the id to revoke it by), `iat`, `exp` and `iss` (the
 * issuing control plane's name, informational); the header carries `kid`,
 * the signing key's id. docs/protocol.md lists them for other languages.
 *
 * @module
 */
import { SignJWT, decodeProtectedHeader, errors, jwtVerify, type JWTPayload } from "jose";
import { KdsError } from "../errors.ts";
import { SIGNING_ALGORITHM, type ActiveSigningKey } from "./signing-keys.ts";

/** Audience of zone tokens. */
export const ZONE_TOKEN_AUDIENCE = "kds-mux/zone";
/** Audience of admin tokens. */
export const ADMIN_TOKEN_AUDIENCE = "kds-mux/admin";

/** Roles an admin token grants: read everything, or also write. */
export const ADMIN_ROLES = ["read-only", "admin"] as const;
/** An admin role. */
export type AdminRole = (typeof ADMIN_ROLES)[number];

/** What every verified token says. */
export interface TokenClaims {
  /** The token's id (`jti`). */
  readonly tokenId: string;
  /** The id of the key that signed it (`kid`). */
  readonly keyId: string;
  /** When it was issued (`iat`). */
  readonly issuedAt: Date;
  /** When it expires (`exp`). */
  readonly expiresAt: Date;
}

/** A verified zone token. */
export interface ZoneTokenClaims extends TokenClaims {
  /** The zone it proves. */
  readonly zone: string;
}

/** A verified admin token. */
export interface AdminTokenClaims extends TokenClaims {
  /** Who holds it (`sub`). */
  readonly name: string;
  /** What it may do. */
  readonly role: AdminRole;
}

/** A token just issued. */
export interface IssuedToken {
  /** The compact JWT. */
  readonly token: string;
  /** Its id, for revoking it. */
  readonly tokenId: string;
  /** When it expires. */
  readonly expiresAt: Date;
}

/** Signs a token for `audience` with `claims` and `sub`, valid for `validForMs` from `now`. */
export async function signToken(
  key: ActiveSigningKey,
  init: {
    audience: string;
    subject: string;
    claims: Record<string, string>;
    issuer: string;
    validForMs: number;
    now: Date;
  },
): Promise<IssuedToken> {
  if (!Number.isFinite(init.validForMs) || init.validForMs < 1000) {
    throw new KdsError(
      "invalid_argument",
      `a token must be valid for at least 1 s, got ${init.validForMs} ms`,
    );
  }
  const tokenId = crypto.randomUUID();
  const issuedAt = Math.floor(init.now.getTime() / 1000);
  const expiresAt = issuedAt + Math.floor(init.validForMs / 1000);
  const token = await new SignJWT(init.claims)
    .setProtectedHeader({ alg: SIGNING_ALGORITHM, kid: key.id, typ: "JWT" })
    .setIssuer(init.issuer)
    .setSubject(init.subject)
    .setAudience(init.audience)
    .setJti(tokenId)
    .setIssuedAt(issuedAt)
    .setExpirationTime(expiresAt)
    .sign(key.privateKey);
  return { token, tokenId, expiresAt: new Date(expiresAt * 1000) };
}

/** What a token is called in messages. */
function what(audience: string): string {
  return audience === ZONE_TOKEN_AUDIENCE ? "zone token" : "admin token";
}

/**
 * Verifies `token`'s signature, audience and expiry with the key its `kid`
 * names (`verifier` looks it up). Throws `unauthenticated` with the reason;
 * never says more than the holder of the token already knows.
 */
export async function verifyToken(
  token: string,
  audience: string,
  verifier: (keyId: string) => Promise<CryptoKey | undefined>,
  now: Date,
): Promise<{ payload: JWTPayload; keyId: string }> {
  const name = what(audience);
  let keyId: string | undefined;
  try {
    keyId = decodeProtectedHeader(token).kid;
  } catch (error) {
    throw new KdsError(
      "unauthenticated",
      `the ${name} is not a JWT (a token is three base64url parts joined by '.'); check the token file`,
      { cause: error },
    );
  }
  if (keyId === undefined || keyId === "")
    throw new KdsError(
      "unauthenticated",
      `the ${name} names no signing key (kid); it was not issued by kds-mux`,
    );
  const key = await verifier(keyId);
  if (key === undefined) {
    throw new KdsError(
      "unauthenticated",
      `the ${name} was signed by key "${keyId}", which this control plane does not hold (the key was retired, or the token comes from another control plane); create a new token`,
    );
  }
  try {
    const { payload } = await jwtVerify(token, key, {
      algorithms: [SIGNING_ALGORITHM],
      audience,
      currentDate: now,
      requiredClaims: ["jti", "iat", "exp", "sub"],
    });
    return { payload, keyId };
  } catch (error) {
    if (error instanceof errors.JWTExpired) {
      const exp =
        typeof error.payload.exp === "number"
          ? ` at ${new Date(error.payload.exp * 1000).toISOString()}`
          : "";
      throw new KdsError("unauthenticated", `the ${name} expired${exp}; create a new one`, {
        cause: error,
      });
    }
    if (error instanceof errors.JWSSignatureVerificationFailed) {
      throw new KdsError(
        "unauthenticated",
        `the ${name}'s signature does not verify: it was altered or forged`,
        { cause: error },
      );
    }
    if (error instanceof errors.JWTClaimValidationFailed && error.claim === "aud") {
      throw new KdsError(
        "unauthenticated",
        `the token is not a ${name} (audience ${JSON.stringify(error.payload.aud)})`,
        { cause: error },
      );
    }
    if (error instanceof errors.JOSEError)
      throw new KdsError("unauthenticated", `the ${name} is not valid: ${error.message}`, {
        cause: error,
      });
    throw error;
  }
}

/** The common claims of a verified payload. */
export function commonClaims(payload: JWTPayload, keyId: string): TokenClaims {
  return {
    tokenId: String(payload.jti),
    keyId,
    issuedAt: new Date(Number(payload.iat) * 1000),
    expiresAt: new Date(Number(payload.exp) * 1000),
  };
}

/** Reads the bearer token of an `authorization` header; undefined when there is none. */
export function bearerToken(headers: Headers): string | undefined {
  const value = headers.get("authorization");
  if (value === null) return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(value);
  if (m === null)
    throw new KdsError("unauthenticated", 'the authorization header must be "Bearer <token>"');
  return m[1];
}
