// The listen backlog of serveRoutes/serveGlobal: how many connections the
// kernel holds for the process while it is busy, so a burst of zones
// reconnecting at once waits in the queue instead of having its SYNs dropped.
import * as net from "node:net";
import { describe, expect, it, vi } from "vitest";
import { DEFAULT_LISTEN_BACKLOG, serveRoutes } from "../../src/adapters/node/serve-global.ts";
import { KdsError } from "../../src/errors.ts";

/** The backlog every server.listen call of `serve` asked for. */
async function backlogs(serve: () => Promise<{ close(): Promise<void> }>): Promise<unknown[]> {
  const listen = vi.spyOn(net.Server.prototype, "listen");
  try {
    const served = await serve();
    await served.close();
    return listen.mock.calls.map((args) => (args[0] as { backlog?: unknown }).backlog);
  } finally {
    listen.mockRestore();
  }
}

describe("serveRoutes listen backlog", () => {
  it("asks for the default backlog, larger than Node's 511", async () => {
    expect(DEFAULT_LISTEN_BACKLOG).toBeGreaterThan(511);
    expect(await backlogs(() => serveRoutes(() => undefined))).toEqual([DEFAULT_LISTEN_BACKLOG]);
  });

  it("asks for the backlog it is given, on every kind of listener", async () => {
    expect(await backlogs(() => serveRoutes(() => undefined, { backlog: 64 }))).toEqual([64]);
    expect(
      await backlogs(() => serveRoutes(() => undefined, { backlog: 64, httpVersion: "both" })),
    ).toEqual([64]);
    expect(
      await backlogs(() => serveRoutes(() => undefined, { backlog: 64, httpVersion: "1.1" })),
    ).toEqual([64]);
  });

  it("refuses a backlog that is not a positive integer", async () => {
    for (const backlog of [0, -1, 1.5, Number.NaN]) {
      const error = await serveRoutes(() => undefined, { backlog }).catch((e: unknown) => e);
      expect(KdsError.is(error) && error.code === "invalid_argument").toBe(true);
    }
  });
});
