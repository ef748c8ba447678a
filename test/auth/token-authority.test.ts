// Tokens, signing keys and revocations over the store contract v2, with an
// injected clock; two authorities over one store stand for two instances.
import { decodeProtectedHeader } from "jose";
import { describe, expect, it } from "vitest";
import { TokenAdminAuthorizer, isLoopback } from "../../src/auth/admin-authorizer.ts";
import type { AuthChange } from "../../src/auth/token-authority.ts";
import { TokenAuthority } from "../../src/auth/token-authority.ts";
import {
  TokenZoneAuthenticator,
  insecureZoneAuthenticator,
} from "../../src/auth/zone-authenticator.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { eventually } from "../contract/harness.ts";

function clock(start = Date.parse("2030-01-01T00:00:00Z")) {
  let now = start;
  return {
    now: () => new Date(now),
    advance: (ms: number): void => {
      now += ms;
    },
  };
}

const bearer = (token: string) => new Headers({ authorization: `Bearer ${token}` });

describe("TokenAuthority", () => {
  it("issues a zone token whose claims verify, and refuses it once expired", async () => {
    const c = clock();
    const tokens = new TokenAuthority({ issuer: "global", now: c.now });
    const issued = await tokens.issueZoneToken("zone-a", { validForMs: 60_000 });
    expect(decodeProtectedHeader(issued.token)).toMatchObject({
      alg: "ES256",
      kid: "signing-key-1",
      typ: "JWT",
    });
    const claims = await tokens.verifyZoneToken(issued.token);
    expect(claims).toMatchObject({
      zone: "zone-a",
      tokenId: issued.tokenId,
      keyId: "signing-key-1",
      expiresAt: issued.expiresAt,
    });
    c.advance(60_000);
    await expect(tokens.verifyZoneToken(issued.token)).rejects.toMatchObject({
      code: "unauthenticated",
      message: expect.stringContaining("expired at 2030-01-01T00:01:00.000Z"),
    });
  });

  it("keeps zone and admin tokens apart", async () => {
    const tokens = new TokenAuthority({ issuer: "global" });
    const zone = await tokens.issueZoneToken("zone-a");
    const admin = await tokens.issueAdminToken("alice", "read-only");
    await expect(tokens.verifyAdminToken(zone.token)).rejects.toMatchObject({
      code: "unauthenticated",
      message: expect.stringContaining("not a admin token"),
    });
    await expect(tokens.verifyZoneToken(admin.token)).rejects.toMatchObject({
      code: "unauthenticated",
      message: expect.stringContaining("not a zone token"),
    });
    expect(await tokens.verifyAdminToken(admin.token)).toMatchObject({
      name: "alice",
      role: "read-only",
    });
    await tokens.revoke({ tokenId: admin.tokenId }, "test");
    await expect(tokens.verifyAdminToken(admin.token)).rejects.toMatchObject({
      code: "unauthenticated",
      message: expect.stringContaining("admin token was revoked"),
    });
    await expect(tokens.issueAdminToken("bob", "root" as never)).rejects.toMatchObject({
      code: "invalid_argument",
    });
  });

  it("creates one first key even when two instances start at once, and both verify each other's tokens", async () => {
    const store = new InMemoryStore(createTypeRegistry());
    const a = new TokenAuthority({ store, issuer: "global" });
    const b = new TokenAuthority({ store, issuer: "global" });
    const [ka, kb] = await Promise.all([a.keys.active(), b.keys.active()]);
    expect(ka.id).toBe(kb.id);
    expect(await a.keys.list()).toHaveLength(1);
    const token = (await a.issueZoneToken("zone-a")).token;
    expect((await b.verifyZoneToken(token)).zone).toBe("zone-a");
  });

  it("rotates: the new key signs, the old one verifies until retired", async () => {
    const tokens = new TokenAuthority({ issuer: "global" });
    const old = (await tokens.issueZoneToken("zone-a")).token;
    expect(await tokens.keys.rotate()).toEqual({ id: "signing-key-2", retired: [] });
    const fresh = (await tokens.issueZoneToken("zone-a")).token;
    expect(decodeProtectedHeader(fresh).kid).toBe("signing-key-2");
    await tokens.verifyZoneToken(old);
    expect(await tokens.keys.rotate({ retirePrevious: true })).toEqual({
      id: "signing-key-3",
      retired: ["signing-key-2", "signing-key-1"],
    });
    await expect(tokens.verifyZoneToken(old)).rejects.toMatchObject({
      code: "unauthenticated",
      message: expect.stringContaining(
        'signed by key "signing-key-1", which this control plane does not hold',
      ),
    });
    await expect(tokens.verifyZoneToken(fresh)).rejects.toMatchObject({ code: "unauthenticated" });
    await tokens.verifyZoneToken((await tokens.issueZoneToken("zone-a")).token);
  });

  it("revokes one token, or a zone's tokens issued until then; another instance follows at once", async () => {
    const c = clock();
    const store = new InMemoryStore(createTypeRegistry());
    const a = new TokenAuthority({ store, issuer: "global", now: c.now });
    const b = new TokenAuthority({ store, issuer: "global", now: c.now });
    const seen: AuthChange[] = [];
    const stop = new AbortController();
    const following = a.follow(stop.signal, (change) => void seen.push(change));
    try {
      const one = await a.issueZoneToken("zone-a");
      const other = await a.issueZoneToken("zone-a");
      await b.revoke({ tokenId: one.tokenId }, "test");
      await expect(a.verifyZoneToken(one.token)).rejects.toMatchObject({
        code: "unauthenticated",
        message: expect.stringContaining("was revoked"),
      });
      await a.verifyZoneToken(other.token);
      await eventually(() => seen.length === 1, "instance a hears of the revocation");
      expect(seen[0]).toMatchObject({
        kind: "revoked",
        revocation: { scope: "token", tokenId: one.tokenId },
      });

      await b.revoke({ zone: "zone-a" }, "test");
      await expect(a.verifyZoneToken(other.token)).rejects.toMatchObject({
        code: "unauthenticated",
        message: expect.stringContaining('every token of zone "zone-a"'),
      });
      c.advance(1_000);
      await a.verifyZoneToken((await a.issueZoneToken("zone-a")).token); // issued after the revocation
      await a.verifyZoneToken((await a.issueZoneToken("zone-b")).token); // another zone
      await b.keys.rotate({ retirePrevious: true });
      await eventually(
        () => seen.some((s) => s.kind === "key-retired"),
        "instance a hears of the retired key",
      );
      expect(seen.find((s) => s.kind === "key-retired")).toEqual({
        kind: "key-retired",
        keyId: "signing-key-1",
      });
      await expect(a.revoke({ tokenId: "not-a-uuid" }, "test")).rejects.toMatchObject({
        code: "invalid_argument",
      });
    } finally {
      stop.abort();
      await following;
    }
  });
});

describe("TokenZoneAuthenticator", () => {
  it("admits a zone only with its own valid token, and says how to get one", async () => {
    const tokens = new TokenAuthority({ issuer: "global" });
    const auth = new TokenZoneAuthenticator(tokens, { adminUrl: () => "https://global:5681" });
    const token = (await tokens.issueZoneToken("zone-a")).token;
    expect(await auth.authenticate({ zone: "zone-a", headers: bearer(token) })).toMatchObject({
      zone: "zone-a",
      proof: "token",
      keyId: "signing-key-1",
    });
    await expect(
      auth.authenticate({ zone: "zone-b", headers: bearer(token) }),
    ).rejects.toMatchObject({ code: "permission_denied" });
    await expect(
      auth.authenticate({ zone: "zone-a", headers: new Headers() }),
    ).rejects.toMatchObject({
      code: "unauthenticated",
      message: expect.stringContaining(
        "kds-mux generate zone-token --zone zone-a --server https://global:5681 > zone-a.token",
      ),
    });
    await expect(
      auth.authenticate({ zone: "zone-a", headers: new Headers({ authorization: "Basic abc" }) }),
    ).rejects.toMatchObject({ code: "unauthenticated" });
    // A certificate is ignored unless certificates are enabled.
    await expect(
      auth.authenticate({
        zone: "zone-a",
        headers: new Headers(),
        peer: { certificate: { authorized: true, commonNames: ["zone-a"] } },
      }),
    ).rejects.toMatchObject({ code: "unauthenticated" });
    const mtls = new TokenZoneAuthenticator(tokens, { certificates: true });
    expect(
      await mtls.authenticate({
        zone: "zone-a",
        headers: new Headers(),
        peer: { certificate: { authorized: true, commonNames: ["zone-a"] } },
      }),
    ).toMatchObject({ proof: "certificate" });
  });

  it("is distinguishable from the insecure mode", () => {
    expect(new TokenZoneAuthenticator(new TokenAuthority({ issuer: "g" })).secure).toBe(true);
    expect(insecureZoneAuthenticator().secure).toBe(false);
  });
});

describe("TokenAdminAuthorizer", () => {
  it("trusts tokenless callers only on a loopback listener, and reads roles from tokens", async () => {
    const tokens = new TokenAuthority({ issuer: "global" });
    const local = new TokenAdminAuthorizer(tokens, { trustLocal: true });
    const open = new TokenAdminAuthorizer(tokens, { trustLocal: false, listen: "0.0.0.0" });
    expect(await local.authorize(new Headers())).toMatchObject({ role: "admin", via: "loopback" });
    await expect(open.authorize(new Headers())).rejects.toMatchObject({
      code: "unauthenticated",
      message: expect.stringContaining("needs an admin token"),
    });
    const reader = await tokens.issueAdminToken("auditor", "read-only");
    expect(await open.authorize(bearer(reader.token))).toMatchObject({
      name: "auditor",
      role: "read-only",
      via: "token",
      tokenId: reader.tokenId,
    });
    // A bad token is refused even where tokens are optional.
    await expect(local.authorize(bearer("nonsense"))).rejects.toMatchObject({
      code: "unauthenticated",
    });
    await expect(
      open.authorize(bearer((await tokens.issueZoneToken("zone-a")).token)),
    ).rejects.toMatchObject({ code: "unauthenticated" });
  });

  it("knows loopback addresses", () => {
    for (const host of ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"])
      expect(isLoopback(host), host).toBe(true);
    for (const host of ["0.0.0.0", "::", "10.0.0.1", "192.168.1.1", "example.com"])
      expect(isLoopback(host), host).toBe(false);
  });
});
