// Matrix cell, global side: a global control plane on node:http2 (whatever
// runtime runs this file), zones admitted by zone token only, the admin API
// on its own (loopback) listener. Prints {"url", "http1Url", "adminUrl"}
// once listening; stops when stdin closes.
import { adminListenerInterceptor, registerAdminRoutes } from "../../src/admin/admin-routes.ts";
import { serveGlobal, serveRoutes } from "../../src/adapters/node/serve-global.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { globalAdminBackend } from "../../src/admin/role-backends.ts";

const stop = new AbortController();
const global = new GlobalControlPlane({
  types: createTypeRegistry(exampleTypes),
  logger: silentLogger,
});
global.start(stop.signal);
const served = await serveGlobal(global.server);
// A second listener on plain HTTP/1.1 for half-duplex zones (fetch clients).
const http1 = await serveGlobal(global.server, { httpVersion: "1.1" });
const admin = await serveRoutes(
  (router) => registerAdminRoutes(router, globalAdminBackend(global)),
  {
    interceptors: [adminListenerInterceptor(globalAdminBackend(global), "127.0.0.1")],
  },
);
console.log(JSON.stringify({ url: served.url, http1Url: http1.url, adminUrl: admin.url }));
process.stdin.on("data", () => undefined);
process.stdin.on("end", () => {
  stop.abort();
  void Promise.all([served.close(), http1.close(), admin.close()]).finally(() => process.exit(0));
});
