// The node:http2 server helper over TLS and mutual TLS, and the global's own controls.
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { beforeAll, describe, expect, it } from "vitest";
import { serveGlobal } from "../../src/adapters/node/serve-global.ts";
import { GlobalServer } from "../../src/global/global-server.ts";
import { InMemoryZoneRegistry } from "../../src/global/zone-registry.ts";
import { silentLogger, type Logger } from "../../src/log.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { TokenAuthority } from "../../src/auth/token-authority.ts";
import { TokenZoneAuthenticator } from "../../src/auth/zone-authenticator.ts";
import { halfDuplexMuxTransport } from "../../src/transport/half-duplex/client.ts";
import { eventually, request, response, startGlobal } from "../contract/harness.ts";
import { createCa, type Pem, type TestCa } from "../support/certs.ts";

describe("serveGlobal over TLS", () => {
  let ca: TestCa;
  let server: Pem;
  let key: string;
  let cert: string;
  beforeAll(async () => {
    ca = await createCa("kds-mux test CA");
    server = await ca.issue({ commonName: "localhost", server: true });
    ({ key, cert } = server);
  });

  const tokenGlobal = (certificates = false) => {
    const tokens = new TokenAuthority({ issuer: "global" });
    const global = new GlobalServer({
      registry: new InMemoryZoneRegistry(["zone-1", "zone-2"]),
      logger: silentLogger,
      authenticator: new TokenZoneAuthenticator(tokens, { certificates }),
    });
    return { tokens, global };
  };

  it("serves the mux over h2 with TLS", async () => {
    const { tokens, global } = tokenGlobal();
    const served = await serveGlobal(global, { tls: { key, cert } });
    try {
      expect(served.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      const transport = createGrpcTransport({ baseUrl: served.url, nodeOptions: { ca: ca.cert } });
      const token = (await tokens.issueZoneToken("zone-1")).token;
      const zone = await new ZoneClient({
        name: "zone-1",
        token,
        transport: connectMuxTransport(transport),
        logger: silentLogger,
      }).dial();
      await eventually(() => global.session("zone-1") !== undefined, "session listed");
      const gs = global.session("zone-1");
      await zone.client.send(request("type.tls", "1"));
      expect((await gs?.server.recv())?.responseNonce).toBe("1");
      await zone.close();
    } finally {
      await served.close();
    }
  });

  it("is refused by a zone that does not trust the certificate", async () => {
    const { tokens, global } = tokenGlobal();
    const served = await serveGlobal(global, { tls: { key, cert } });
    try {
      const token = (await tokens.issueZoneToken("zone-1")).token;
      const zone = new ZoneClient({
        name: "zone-1",
        token,
        transport: connectMuxTransport(createGrpcTransport({ baseUrl: served.url })),
        logger: silentLogger,
      });
      await expect(zone.dial()).rejects.toMatchObject({ code: "transport" });
    } finally {
      await served.close();
    }
  });

  it("carries the half-duplex transport over HTTPS, on HTTP/2 and HTTP/1.1", async () => {
    const { tokens, global } = tokenGlobal();
    const served = await serveGlobal(global, { tls: { key, cert } });
    try {
      for (const httpVersion of ["2", "1.1"] as const) {
        const transport = halfDuplexMuxTransport(
          createConnectTransport({
            baseUrl: served.url,
            httpVersion,
            nodeOptions: { ca: ca.cert },
          }),
        );
        const token = (await tokens.issueZoneToken("zone-1")).token;
        const zone = await new ZoneClient({
          name: "zone-1",
          token,
          transport,
          logger: silentLogger,
        }).dial();
        await eventually(
          () => global.session("zone-1") === zone || global.session("zone-1")?.peerId === "zone-1",
          "session listed",
        );
        await zone.client.send(request("type.hd", httpVersion));
        const gs = global.session("zone-1");
        expect((await gs?.server.recv())?.responseNonce).toBe(httpVersion);
        await zone.close();
      }
    } finally {
      await served.close();
    }
  });

  it("admits a zone by its client certificate (mutual TLS), and only as the certificate's CN", async () => {
    const zonesCa = await createCa("kds-mux zones CA");
    const { global } = tokenGlobal(true);
    const served = await serveGlobal(global, { tls: { key, cert, clientCa: zonesCa.cert } });
    try {
      const zone1 = await zonesCa.issue({ commonName: "zone-1", client: true });
      const dial = (name: string, client: Pem) =>
        new ZoneClient({
          name,
          transport: connectMuxTransport(
            createGrpcTransport({
              baseUrl: served.url,
              nodeOptions: { ca: ca.cert, cert: client.cert, key: client.key },
            }),
          ),
          logger: silentLogger,
        }).dial();
      const zone = await dial("zone-1", zone1);
      await eventually(() => global.session("zone-1") !== undefined, "session listed");
      expect(global.identity(global.session("zone-1") as never)).toMatchObject({
        zone: "zone-1",
        proof: "certificate",
      });
      await zone.close();
      // zone-1's certificate does not make its holder zone-2.
      await expect(dial("zone-2", zone1)).rejects.toMatchObject({
        code: "permission_denied",
        message: expect.stringContaining('proves zone "zone-1"'),
      });
      // A certificate from a CA the global does not trust proves nothing.
      const stranger = await (await createCa("someone else's CA")).issue({
        commonName: "zone-1",
        client: true,
      });
      await expect(dial("zone-1", stranger)).rejects.toMatchObject({
        code: "unauthenticated",
        message: expect.stringContaining("not trusted"),
      });
      // No certificate and no token: told how to get a token.
      const bare = new ZoneClient({
        name: "zone-1",
        transport: connectMuxTransport(
          createGrpcTransport({ baseUrl: served.url, nodeOptions: { ca: ca.cert } }),
        ),
        logger: silentLogger,
      });
      await expect(bare.dial()).rejects.toMatchObject({
        code: "unauthenticated",
        message: expect.stringContaining("kds-mux generate zone-token --zone zone-1"),
      });
    } finally {
      await served.close();
    }
  });
});

describe("GlobalServer", () => {
  it("revokes a zone's session with a reason the zone can read", async () => {
    const t = await startGlobal("grpc");
    try {
      const zone = await new ZoneClient({
        name: "zone-1",
        transport: t.transport(),
        logger: silentLogger,
      }).dial();
      await eventually(() => t.global.session("zone-1") !== undefined, "session listed");
      expect(await t.global.revoke("zone-1")).toBe(true);
      const end = await zone.closed;
      expect(end).toMatchObject({ code: "zone_revoked", initiator: "peer", graceful: true });
      expect(await t.global.revoke("zone-1")).toBe(false);
    } finally {
      await t.close();
    }
  });

  it("calls onSession when a zone is ready and refuses zones once closed", async () => {
    const seen: string[] = [];
    const t = await startGlobal("memory", { onSession: (s) => void seen.push(s.peerId) });
    const zone = new ZoneClient({ name: "zone-2", transport: t.transport(), logger: silentLogger });
    const s = await zone.dial();
    await eventually(() => seen.length === 1, "onSession called");
    expect(seen).toEqual(["zone-2"]);
    await t.close();
    expect((await s.closed).code).toBe("shutdown");
    await expect(zone.dial()).rejects.toMatchObject({ code: "session_closed" });
  });

  it("rejects an invalid client-id and keeps serving", async () => {
    const t = await startGlobal("memory");
    try {
      const bad = new Headers({ "client-id": "Not A Zone" });
      await expect(
        t.global.accept(
          bad,
          (async function* () {
            // No frame: the headers are refused before any is read.
          })(),
          new AbortController().signal,
        ),
      ).rejects.toMatchObject({ code: "invalid_argument" });
      const zone = await new ZoneClient({
        name: "zone-1",
        transport: t.transport(),
        logger: silentLogger,
      }).dial();
      await zone.server.send(response("x"));
      await zone.close();
    } finally {
      await t.close();
    }
  });

  it("logs an onSessionEnded callback that throws, and still forgets the session", async () => {
    const errors: string[] = [];
    const logger: Logger = { ...silentLogger, error: (message) => void errors.push(message) };
    const t = await startGlobal("memory", {
      logger,
      onSessionEnded: () => {
        throw new Error("callback broke (test)");
      },
    });
    try {
      const zone = await new ZoneClient({
        name: "zone-1",
        transport: t.transport(),
        logger: silentLogger,
      }).dial();
      await eventually(() => t.global.session("zone-1") !== undefined, "session listed");
      const session = t.global.session("zone-1");
      expect(session).toBeDefined();
      await zone.close();
      await eventually(
        () => errors.includes('onSessionEnded failed for zone "zone-1"'),
        "the callback's failure is logged",
      );
      // The session's bookkeeping ran past the callback (it used to stop at the throw).
      await eventually(
        () => session !== undefined && t.global.identity(session) === undefined,
        "the ended session is forgotten",
      );
    } finally {
      await t.close();
    }
  });
});
