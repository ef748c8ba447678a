// Matrix cell, global side: a global control plane on node:http2 (whatever
// runtime runs this file), with the admin API on the same address. Prints
// {"url": ...} once listening; stops when stdin closes.
import { registerAdmin } from "../../src/admin/admin-service.ts";
import { serveGlobal } from "../../src/adapters/node/serve-global.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";

const stop = new AbortController();
const global = new GlobalControlPlane({ logger: silentLogger });
global.start(stop.signal);
const served = await serveGlobal(global.server, { routes: (router) => registerAdmin(router, global.admin()) });
// A second listener on plain HTTP/1.1 for half-duplex zones (fetch clients).
const http1 = await serveGlobal(global.server, { httpVersion: "1.1" });
console.log(JSON.stringify({ url: served.url, http1Url: http1.url }));
process.stdin.on("data", () => undefined);
process.stdin.on("end", () => {
  stop.abort();
  void Promise.all([served.close(), http1.close()]).finally(() => process.exit(0));
});
