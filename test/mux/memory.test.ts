// A long-lived session receiving 200k messages over real gRPC (HTTP/2) keeps
// its heap flat: nothing the session or the Connect call holds grows with the
// number of messages (the 2.3.0 leak this project pins away from would show
// here as tens of MB).
import { describe, expect, it } from "vitest";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { silentLogger } from "../../src/log.ts";
import type { Session } from "../../src/mux/views.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { eventually, response, startGlobal } from "../contract/harness.ts";
import { heapAfterGc } from "../support/heap.ts";

describe("memory", () => {
  it("stays flat while a session receives 200k messages", async () => {
    const t = await startGlobal("grpc");
    const zone = new ZoneClient({
      name: "zone-1",
      token: (await t.tokens.issueZoneToken("zone-1")).token,
      transport: connectMuxTransport(createGrpcTransport({ baseUrl: t.url as string }), {
        name: "grpc",
      }),
      logger: silentLogger,
    });
    const zs = await zone.dial();
    await eventually(() => t.global.session("zone-1") !== undefined, "session listed");
    const gs = t.global.session("zone-1") as Session;
    const template = response("type.bench", "n", 64);
    const pump = async (count: number): Promise<void> => {
      const sender = (async () => {
        for (let i = 0; i < count; i++) await gs.server.send(template);
      })();
      for (let i = 0; i < count; i++) await zs.client.recv();
      await sender;
    };
    try {
      await pump(20_000); // warm up: JIT, buffers, HTTP/2 windows
      const before = heapAfterGc();
      await pump(200_000);
      const after = heapAfterGc();
      const growthMiB = (after - before) / 2 ** 20;
      console.log(
        `heap before ${(before / 2 ** 20).toFixed(1)} MiB, after 200k messages ${(after / 2 ** 20).toFixed(1)} MiB, growth ${growthMiB.toFixed(2)} MiB`,
      );
      expect(zs.stats().received.responses).toBe(220_000);
      expect(growthMiB).toBeLessThan(4);
    } finally {
      await zs.close();
      await t.close();
    }
  }, 120_000);
});
