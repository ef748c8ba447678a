// Two instances of a global sharing one store (keys and revocations live in
// it): a token issued by one admits on the other, and a revocation made on one ends
// the live session on the other at once.
import { describe, expect, it } from "vitest";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { memoryMuxTransport } from "../../src/transport/memory.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { eventually } from "../contract/harness.ts";

describe("global instances sharing a store", () => {
  it("admit each other's tokens and act on each other's revocations at once", async () => {
    const types = createTypeRegistry();
    const store = new InMemoryStore(types);
    const stop = new AbortController();
    const a = new GlobalControlPlane({ types, store, logger: silentLogger });
    const b = new GlobalControlPlane({ types, store, logger: silentLogger });
    a.start(stop.signal);
    b.start(stop.signal);
    try {
      await a.registerZone("zone-a");
      const first = await b.tokens.issueZoneToken("zone-a");
      const dial = (token: string) =>
        new ZoneClient({
          name: "zone-a",
          token,
          transport: memoryMuxTransport(a.server),
          logger: silentLogger,
        }).dial();
      const session = await dial(first.token);
      await eventually(() => a.server.session("zone-a") !== undefined, "admitted on a");
      expect(a.server.identity(a.server.session("zone-a") as never)).toMatchObject({
        proof: "token",
        tokenId: first.tokenId,
      });

      await b.tokens.revoke({ tokenId: first.tokenId }, "test");
      expect(await session.closed).toMatchObject({
        code: "zone_revoked",
        initiator: "peer",
        message: expect.stringContaining("its zone token was revoked"),
      });
      await expect(dial(first.token)).rejects.toMatchObject({ code: "unauthenticated" });

      // Retiring the signing key ends sessions admitted with tokens it signed.
      const second = await dial((await b.tokens.issueZoneToken("zone-a")).token);
      await b.tokens.keys.rotate({ retirePrevious: true });
      expect(await second.closed).toMatchObject({
        code: "zone_revoked",
        message: expect.stringContaining("was retired"),
      });
      const third = await dial((await a.tokens.issueZoneToken("zone-a")).token); // signed with the new key
      expect(third.end).toBeUndefined();
      await third.close();
    } finally {
      stop.abort();
      await Promise.all([a.close(), b.close()]);
    }
  });
});
