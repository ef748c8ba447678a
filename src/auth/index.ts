/**
 * Zone and admin tokens, signing keys, revocations, certificate identity and admin authorization.
 *
 * @module
 */
export {
  peerInfoKey,
  type PeerCertificate,
  type PeerInfo,
} from "./peer.ts";
export {
  TokenZoneAuthenticator,
  insecureZoneAuthenticator,
  type RevokedMatcher,
  type TokenZoneAuthenticatorOptions,
  type ZoneAuthenticator,
  type ZoneCredentials,
  type ZoneIdentity,
} from "./zone-authenticator.ts";
export {
  DEFAULT_TOKEN_VALIDITY_MS,
  TokenAuthority,
  type AuthChange,
  type TokenAuthorityOptions,
} from "./token-authority.ts";
export {
  ADMIN_ROLES,
  ADMIN_TOKEN_AUDIENCE,
  ZONE_TOKEN_AUDIENCE,
  bearerToken,
  type AdminRole,
  type AdminTokenClaims,
  type IssuedToken,
  type TokenClaims,
  type ZoneTokenClaims,
} from "./tokens.ts";
export {
  SIGNING_ALGORITHM,
  SigningKeys,
  type ActiveSigningKey,
} from "./signing-keys.ts";
export {
  Revocations,
  revokes,
  type RevocableToken,
  type Revocation,
} from "./revocations.ts";
export {
  CERTIFICATE_IDENTITY_RULE,
  certificateZone,
} from "./certificate-identity.ts";
export {
  CertificateRevocations,
  certificateKeys,
  normalizeFingerprint,
  normalizeSerial,
  revokesCertificate,
  type CertificateRevocation,
  type CertificateTarget,
  type RevocableCertificate,
} from "./certificate-revocations.ts";
export {
  TokenAdminAuthorizer,
  adminInterceptor,
  adminPrincipalKey,
  describePrincipal,
  isLoopback,
  type AdminAuthorizer,
  type AdminPrincipal,
  type TokenAdminAuthorizerOptions,
} from "./admin-authorizer.ts";
