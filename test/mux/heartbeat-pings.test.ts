// Who pings, and when: a side pings only when it has heard nothing from its
// peer for a heartbeat interval, and at least every four intervals for a
// fresh round-trip time. Two kds-mux sessions wired to each other, with an
// injected clock and fake timers: every frame each side sends is counted.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { MuxSession } from "../../src/mux/session.ts";
import { silence } from "../support/silence.ts";

/** `frames`, each counted by kind into `counts` as it passes. */
function counted(frames: AsyncIterable<Frame>, counts: Map<string, number>): AsyncIterable<Frame> {
  return {
    [Symbol.asyncIterator]: () => {
      const inner = frames[Symbol.asyncIterator]();
      return {
        next: async () => {
          const r = await inner.next();
          if (r.done !== true) {
            const kind = r.value.value.case ?? "unknown";
            counts.set(kind, (counts.get(kind) ?? 0) + 1);
          }
          return r;
        },
        return: async () => inner.return?.() ?? { done: true, value: undefined },
      };
    },
  };
}

describe("heartbeat pings", () => {
  let now = 0;
  const interval = 1_000;
  const options = { heartbeatIntervalMs: interval, heartbeatTimeoutMs: 4 * interval };
  /** Moves the clock and the sessions' timers on to `ms`, 50 ms at a time, letting frames flow between steps. */
  const at = async (ms: number): Promise<void> => {
    while (now < ms) {
      now = Math.min(ms, now + 50);
      await vi.advanceTimersByTimeAsync(50);
    }
  };

  /** A zone's and a global's session on the test's clock, not yet wired to each other. */
  const sessions = (): { zone: MuxSession; global: MuxSession } => ({
    zone: new MuxSession({ role: "zone", localId: "zone-1", now: () => now, options }),
    global: new MuxSession({
      role: "global",
      localId: "global",
      peerId: "zone-1",
      now: () => now,
      options,
    }),
  });

  beforeEach(() => {
    now = 0;
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval", "setTimeout", "clearTimeout"] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("between two live sides, about one ping per interval in all (not one per side), and each side's round-trip time stays fresh", async () => {
    const fromZone = new Map<string, number>();
    const fromGlobal = new Map<string, number>();
    const { zone, global } = sessions();
    zone.attach(counted(global.outbound, fromGlobal));
    global.attach(counted(zone.outbound, fromZone));
    await at(500);
    expect(zone.peer).toBeDefined();
    expect(global.peer).toBeDefined();
    const pings = (): number => (fromZone.get("ping") ?? 0) + (fromGlobal.get("ping") ?? 0);
    const first = pings(); // each side's first ping, right after the peer's hello
    expect(first).toBe(2);
    await at(40_500); // 40 intervals
    const quiet = pings() - first;
    // Both sides pinging every interval would be about 80; one ping per interval is 40, and each side's
    // refresh (every fourth interval at most) may add one where it was not the side that pinged.
    expect(quiet).toBeGreaterThanOrEqual(30);
    expect(quiet).toBeLessThanOrEqual(52);
    expect(fromZone.get("pong") ?? 0).toBe(fromGlobal.get("ping") ?? 0);
    expect(fromGlobal.get("pong") ?? 0).toBe(fromZone.get("ping") ?? 0);
    // Each side still measures its own round trip, at least every four intervals.
    expect(fromZone.get("ping") ?? 0).toBeGreaterThanOrEqual(10);
    expect(fromGlobal.get("ping") ?? 0).toBeGreaterThanOrEqual(10);
    expect(zone.stats().heartbeatRttMs).toBeDefined();
    expect(global.stats().heartbeatRttMs).toBeDefined();
    expect(zone.end).toBeUndefined();
    expect(global.end).toBeUndefined();
    const closing = Promise.all([zone.close(), global.close()]);
    await at(now + 5_000);
    await closing;
  });

  it("pings a silent peer every interval until the heartbeat timeout ends the session", async () => {
    const sent = new Map<string, number>();
    const { zone, global } = sessions();
    // The global hears the zone's hello, then nothing more: the zone's frames stop after its hello.
    let zoneFrames = 0;
    const upToHello: AsyncIterable<Frame> = {
      [Symbol.asyncIterator]: () => {
        const inner = zone.outbound[Symbol.asyncIterator]();
        return {
          next: async () => (zoneFrames++ === 0 ? inner.next() : new Promise(() => undefined)),
          return: async () => ({ done: true, value: undefined }),
        };
      },
    };
    global.attach(upToHello);
    zone.attach(silence());
    const reader = counted(global.outbound, sent)[Symbol.asyncIterator]();
    void (async () => {
      for (;;) if ((await reader.next()).done === true) return;
    })();
    await at(3_900);
    expect(global.end).toBeUndefined();
    // The first ping after the hello, then one each interval the zone stayed silent.
    expect(sent.get("ping") ?? 0).toBeGreaterThanOrEqual(3);
    await at(4_600);
    expect(global.end?.code).toBe("heartbeat_timeout");
    const closing = zone.close();
    await at(now + 5_000);
    await closing;
  });
});
