/**
 * Revoked tokens, kept in the control plane's store as internal
 * `TokenRevocation` resources: one per revoked token (named by the token's
 * id), or one per zone whose tokens issued until a time are all revoked
 * (named `zone.<zone>`; zone names hold no '.', token ids are UUIDs, so the
 * two never collide).
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { TokenRevocationSpecSchema, type TokenRevocationSpec } from "../gen/kds/v1/auth_pb.ts";
import type { ResourceStore } from "../store/contract.ts";
import { TOKEN_REVOCATION_KIND } from "../kinds/builtin-types.ts";

/** What a revocation check needs to know about a token. */
export interface RevocableToken {
  /** The token's id (`jti`). */
  readonly tokenId: string;
  /** The zone a zone token proves (undefined for admin tokens). */
  readonly zone?: string;
  /** When it was issued. */
  readonly issuedAt: Date;
}

/** A revocation as read from the store. */
export type Revocation =
  | {
      readonly scope: "token";
      readonly tokenId: string;
      readonly revokedAt: Date;
      readonly revokedBy: string;
    }
  | {
      readonly scope: "zone";
      readonly zone: string;
      readonly issuedBefore: Date;
      readonly revokedAt: Date;
      readonly revokedBy: string;
    };

/** The resource name of the zone-wide revocation of `zone`. */
export function zoneRevocationName(zone: string): string {
  return `zone.${zone}`;
}

/** Reads a stored revocation's spec. */
export function revocationOf(spec: TokenRevocationSpec): Revocation {
  const revokedAt = spec.revokedAt === undefined ? new Date(0) : timestampDate(spec.revokedAt);
  if (spec.tokenId !== "")
    return { scope: "token", tokenId: spec.tokenId, revokedAt, revokedBy: spec.revokedBy };
  return {
    scope: "zone",
    zone: spec.zone,
    issuedBefore: spec.issuedBefore === undefined ? new Date(0) : timestampDate(spec.issuedBefore),
    revokedAt,
    revokedBy: spec.revokedBy,
  };
}

/**
 * Whether `revocation` covers `token`. A zone-wide revocation covers tokens
 * issued up to and including the second it was made (a token's `iat` has
 * one-second precision).
 */
export function revokes(revocation: Revocation, token: RevocableToken): boolean {
  if (revocation.scope === "token") return revocation.tokenId === token.tokenId;
  return (
    token.zone === revocation.zone &&
    Math.floor(token.issuedAt.getTime() / 1000) <=
      Math.floor(revocation.issuedBefore.getTime() / 1000)
  );
}

/** Revocations over a store (contract v2). */
export class Revocations {
  readonly #store: ResourceStore;
  readonly #now: () => Date;

  /**
   * @param store - the control plane's store; its types must include TokenRevocation
   * @param now - the clock (tests inject one)
   */
  constructor(store: ResourceStore, now: () => Date = () => new Date()) {
    this.#store = store;
    this.#now = now;
  }

  /** Revokes one token by its id. */
  async revokeToken(tokenId: string, revokedBy: string, signal?: AbortSignal): Promise<Revocation> {
    const spec = create(TokenRevocationSpecSchema, {
      tokenId,
      revokedAt: timestampFromDate(this.#now()),
      revokedBy,
    });
    await this.#store.put({ kind: TOKEN_REVOCATION_KIND, name: tokenId, spec }, { signal });
    return revocationOf(spec);
  }

  /** Revokes every token of `zone` issued until now. */
  async revokeZone(zone: string, revokedBy: string, signal?: AbortSignal): Promise<Revocation> {
    const now = timestampFromDate(this.#now());
    const spec = create(TokenRevocationSpecSchema, {
      zone,
      issuedBefore: now,
      revokedAt: now,
      revokedBy,
    });
    await this.#store.put(
      { kind: TOKEN_REVOCATION_KIND, name: zoneRevocationName(zone), spec },
      { signal },
    );
    return revocationOf(spec);
  }

  /** The revocation covering `token`, if any (reads the store: every instance sees every revocation). */
  async find(token: RevocableToken, signal?: AbortSignal): Promise<Revocation | undefined> {
    const byId = await this.#store.get(TOKEN_REVOCATION_KIND, "", token.tokenId, { signal });
    if (byId !== undefined) return revocationOf(byId.spec as TokenRevocationSpec);
    if (token.zone === undefined) return undefined;
    const byZone = await this.#store.get(
      TOKEN_REVOCATION_KIND,
      "",
      zoneRevocationName(token.zone),
      { signal },
    );
    if (byZone === undefined) return undefined;
    const revocation = revocationOf(byZone.spec as TokenRevocationSpec);
    return revokes(revocation, token) ? revocation : undefined;
  }
}
