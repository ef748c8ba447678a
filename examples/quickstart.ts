// A global and a zone in one script, over gRPC on HTTP/2 (h2c on loopback).
// Run: npm run example (or: npx tsx examples/quickstart.ts, bun examples/quickstart.ts)
import { create } from "@bufbuild/protobuf";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { TokenAuthority, TokenZoneAuthenticator, connectMuxTransport } from "../src/index.ts";
import { GlobalServer, InMemoryZoneRegistry } from "../src/global/index.ts";
import type { Session } from "../src/mux/index.ts";
import { DiscoveryRequestSchema, DiscoveryResponseSchema } from "../src/schema.ts";
import { ZoneClient } from "../src/zone/index.ts";
import { serveGlobal } from "../src/adapters/node/index.ts";

// The global: admits registered zones that prove their name with a zone token, and serves the mux on node:http2.
const tokens = new TokenAuthority({ issuer: "global" }); // signing key in memory; GlobalControlPlane keeps it in its store
const global = new GlobalServer({
  registry: new InMemoryZoneRegistry(["zone-east"]),
  authenticator: new TokenZoneAuthenticator(tokens),
  onSession: async (session: Session) => {
    // global -> zone: answer the zone's requests for global resources.
    const request = await session.server.recv(session.signal);
    console.log(`global: zone "${session.peerId}" asks for ${request.typeUrl}`);
    await session.server.send(
      create(DiscoveryResponseSchema, { typeUrl: request.typeUrl, versionInfo: "1", nonce: "g-1" }),
    );
    // zone -> global: ask the zone for its resources.
    await session.client.send(create(DiscoveryRequestSchema, { typeUrl: "example.Dataplane" }));
    const response = await session.client.recv(session.signal);
    console.log(`global: zone "${session.peerId}" sent ${response.typeUrl}`);
  },
});
const served = await serveGlobal(global, { host: "127.0.0.1", port: 0 });
console.log(`global listening on ${served.url}`);

// The zone: dials the global once and keeps the session (run() would also reconnect).
const zone = new ZoneClient({
  name: "zone-east",
  token: (await tokens.issueZoneToken("zone-east")).token, // what `kds-mux generate zone-token` prints
  transport: connectMuxTransport(createGrpcTransport({ baseUrl: served.url }), {
    name: "grpc",
    target: served.url,
  }),
});
const session = await zone.dial();
console.log(`zone: connected to global "${session.peerId}"`);

await session.client.send(create(DiscoveryRequestSchema, { typeUrl: "example.Mesh" }));
const [fromGlobal, globalAsks] = await Promise.all([session.client.recv(), session.server.recv()]);
console.log(
  `zone: got ${fromGlobal.typeUrl} version ${"versionInfo" in fromGlobal ? fromGlobal.versionInfo : ""}`,
);
await session.server.send(
  create(DiscoveryResponseSchema, { typeUrl: globalAsks.typeUrl, versionInfo: "1", nonce: "z-1" }),
);

await new Promise((r) => setTimeout(r, 50));
const end = await session.close({ message: "quickstart done" });
console.log(`zone: session ended (${end.code})`);
await served.close();
