// One global served twice for a test file: through serveGlobal's direct mux
// stream (src/adapters/node/mux-stream.ts) and through connect-node's handler
// (`directMuxStream: false`), so a test can check a zone sees the same either way.
import { afterAll, beforeAll } from "vitest";
import { serveGlobal, type ServedGlobal } from "../../src/adapters/node/serve-global.ts";
import { insecureZoneAuthenticator } from "../../src/auth/zone-authenticator.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import type { TypeRegistry } from "../../src/kinds/resource-types.ts";

/** The global and its two servers; set in the file's beforeAll. */
export interface ServedBothWays {
  global: GlobalControlPlane;
  direct: ServedGlobal;
  viaConnect: ServedGlobal;
}

/**
 * Registers beforeAll/afterAll that start a global (zone authentication off,
 * "zone-1" registered, `types` if given) and serve it both ways; read the
 * fields inside tests.
 */
export function globalServedBothWays(types?: TypeRegistry): ServedBothWays {
  const abort = new AbortController();
  const both = {} as ServedBothWays;
  beforeAll(async () => {
    both.global = new GlobalControlPlane({
      types,
      authenticator: insecureZoneAuthenticator(),
      logger: silentLogger,
    });
    both.global.start(abort.signal);
    await both.global.registerZone("zone-1");
    both.direct = await serveGlobal(both.global.server);
    both.viaConnect = await serveGlobal(both.global.server, { directMuxStream: false });
  });
  afterAll(async () => {
    abort.abort();
    await both.direct?.close();
    await both.viaConnect?.close();
  });
  return both;
}
