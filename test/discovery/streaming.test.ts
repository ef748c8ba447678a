// A server and a client on one session with tight mux windows, many types
// streaming split changes at once: every response still arrives. The server
// reads ACKs while a response waits for window, so a client blocked sending
// an ACK (its request window full of ACKs the server has not read) cannot
// stall the server's responses, and with them its own ACKs, forever.
import { describe, expect, it } from "vitest";
import { DiscoveryClient } from "../../src/discovery/client.ts";
import { DiscoveryServer } from "../../src/discovery/server.ts";
import { mergeSources, staticSource } from "../../src/discovery/static-source.ts";
import type { ReceivedResource, ResourceSink } from "../../src/discovery/types.ts";
import { sessionPair } from "../contract/harness.ts";
import { wire } from "./fixtures.ts";

const TYPES = Array.from({ length: 6 }, (_, i) => `type.googleapis.com/test.Thing${i}`);
const PER_TYPE = 12;

/** Holds what it receives, per type. */
class MemorySink implements ResourceSink {
  readonly held = new Map<string, Map<string, string>>();
  versions(): Promise<Map<string, string>> {
    return Promise.resolve(new Map());
  }
  replace(): Promise<{ rejected: [] }> {
    return Promise.reject(new Error("delta only"));
  }
  apply(
    typeUrl: string,
    resources: readonly ReceivedResource[],
    removed: readonly string[],
  ): Promise<{ rejected: [] }> {
    const held = this.held.get(typeUrl) ?? new Map<string, string>();
    this.held.set(typeUrl, held);
    for (const r of resources) held.set(r.key, r.version);
    for (const key of removed) held.delete(key);
    return Promise.resolve({ rejected: [] });
  }
  count(): number {
    let n = 0;
    for (const held of this.held.values()) n += held.size;
    return n;
  }
}

describe("discovery streaming over tight windows", () => {
  it("delivers every part of every type when the parts in flight outnumber both windows", async () => {
    // The zone lets 2 responses wait unconsumed; the global reads 2 requests ahead; 6 types x 4 parts in flight.
    const { zone, global } = sessionPair(
      { responseWindow: 2, requestWindow: 2 },
      { responseWindow: 2, requestWindow: 2 },
    );
    const source = mergeSources(
      TYPES.map((t) =>
        staticSource(
          t,
          Array.from({ length: PER_TYPE }, (_, i) => wire(`r${i}`, "1", 200)),
        ),
      ),
    );
    const server = new DiscoveryServer({
      view: global.server,
      source,
      options: { deltaResponseBytes: 1, maxDeltaInFlight: 4 },
    });
    const sink = new MemorySink();
    const client = new DiscoveryClient({ view: zone.client, typeUrls: TYPES, mode: "delta", sink });
    const serving = server.run(global.signal);
    const running = client.run(zone.signal);
    try {
      // A bound for a sync that must finish, not a timing assertion: a stall never finishes.
      const deadline = Date.now() + 20_000;
      while (sink.count() < TYPES.length * PER_TYPE && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 5));
      expect(sink.count()).toBe(TYPES.length * PER_TYPE);
    } finally {
      await zone.close();
      await Promise.all([running, serving]);
    }
  });
});
