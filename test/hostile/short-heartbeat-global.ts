// A global control plane process with a short heartbeat (interval 200 ms,
// timeout 1 s), for foreign-clients.test.ts: the CLI does not expose the
// heartbeat settings. Zones are trusted by client-id (no tokens) and
// "foreign" is registered. Prints {"url"} once listening; logs to stderr;
// stops when stdin closes.
import { serveGlobal } from "../../src/adapters/node/serve-global.ts";
import { insecureZoneAuthenticator } from "../../src/auth/zone-authenticator.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { consoleLogger } from "../../src/log.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { exampleTypes } from "../../examples/example-kinds/index.ts";

const stop = new AbortController();
const global = new GlobalControlPlane({
  types: createTypeRegistry(exampleTypes),
  authenticator: insecureZoneAuthenticator(),
  session: { heartbeatIntervalMs: 200, heartbeatTimeoutMs: 1_000 },
  logger: consoleLogger(),
});
global.start(stop.signal);
await global.registerZone("foreign");
const served = await serveGlobal(global.server);
console.log(JSON.stringify({ url: served.url }));
process.stdin.on("data", () => undefined);
process.stdin.on("end", () => {
  stop.abort();
  void served.close().finally(() => process.exit(0));
});
