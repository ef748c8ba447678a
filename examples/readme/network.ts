// docs/library.md's "Over a network" snippet, as it runs: the session layer
// without sync, a global served on node:http2 and a zone dialing it over
// gRPC. The page quotes this file between the region markers, with
// "kds-mux" for ../../src (test/docs/snippets.test.ts checks it, and runs it).
// Run: npx tsx examples/readme/network.ts
// #region readme
import { create } from "@bufbuild/protobuf";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { TokenAuthority, TokenZoneAuthenticator, connectMuxTransport } from "../../src/index.ts";
import { GlobalServer, InMemoryZoneRegistry } from "../../src/global/index.ts";
import { DiscoveryRequestSchema, DiscoveryResponseSchema } from "../../src/schema.ts";
import { ZoneClient } from "../../src/zone/index.ts";
import { serveGlobal } from "../../src/adapters/node/index.ts";

const tokens = new TokenAuthority({ issuer: "global" }); // signs zone tokens (key in memory here)
const global = new GlobalServer({
  registry: new InMemoryZoneRegistry(["zone-east"]),
  authenticator: new TokenZoneAuthenticator(tokens), // admits a zone only with its own valid token
  onSession: async (session) => {
    const request = await session.server.recv(session.signal); // the zone asks for global resources
    await session.server.send(
      create(DiscoveryResponseSchema, { typeUrl: request.typeUrl, versionInfo: "1", nonce: "g-1" }),
    );
  },
});
const served = await serveGlobal(global, { port: 0 }); // node:http2, h2c on 127.0.0.1

const zone = new ZoneClient({
  name: "zone-east",
  token: (await tokens.issueZoneToken("zone-east")).token, // what `kds-mux generate zone-token` prints
  transport: connectMuxTransport(createGrpcTransport({ baseUrl: served.url })),
});
const session = await zone.dial(); // or zone.run(signal): dial, hand over, reconnect forever
await session.client.send(create(DiscoveryRequestSchema, { typeUrl: "example.Mesh" }));
console.log(await session.client.recv()); // the global's response
await session.close();
await served.close();
// #endregion readme
