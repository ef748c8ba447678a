import type { GlobalServer } from "../src/global/global-server.ts";
import type { Session } from "../src/mux/views.ts";

/** How long a bench waits for a dialing zone's session before it gives up. */
const SESSION_LIMIT_MS = 30_000;

/** Waits (polling every millisecond, at most {@link SESSION_LIMIT_MS}) until `global` holds `zone`'s session. */
export async function untilSession(global: GlobalServer, zone: string): Promise<Session> {
  const t0 = performance.now();
  for (;;) {
    const session = global.session(zone);
    if (session !== undefined) return session;
    if (performance.now() - t0 > SESSION_LIMIT_MS)
      throw new Error(`no session of zone ${zone} after ${SESSION_LIMIT_MS} ms`);
    await new Promise((r) => setTimeout(r, 1));
  }
}
