// A session's two clocks before its peer's hello: the transport has
// openTimeoutMs to open the stream (a zone's connection may wait in a busy
// global's listen queue), and the hello is timed from the open
// (handshakeTimeoutMs). With an injected clock and fake interval timers.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { MuxSession } from "../../src/mux/session.ts";
import { silence } from "../support/silence.ts";

describe("a session's open and hello timeouts", () => {
  let now = 0;
  /** Moves the clock and the session's timers on to `ms`, 10 ms at a time. */
  const at = (ms: number): void => {
    while (now < ms) {
      now = Math.min(ms, now + 10);
      vi.advanceTimersByTime(10);
    }
  };
  const zone = (): MuxSession =>
    new MuxSession({
      role: "zone",
      localId: "zone-1",
      now: () => now,
      options: {
        handshakeTimeoutMs: 1_000,
        openTimeoutMs: 10_000,
        heartbeatIntervalMs: 1_000,
        heartbeatTimeoutMs: 4_000,
      },
    });

  beforeEach(() => {
    now = 0;
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval", "setTimeout", "clearTimeout"] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("waits for the transport past the hello and heartbeat timeouts, then times the hello from the open", () => {
    const session = zone();
    at(9_000); // 9x the hello timeout, 2x the heartbeat timeout: the stream is not open yet, so nothing is late
    expect(session.end).toBeUndefined();
    session.attach(silence());
    at(9_900);
    expect(session.end).toBeUndefined();
    at(10_300); // the first tick (every 250 ms) past 9 s + 1 s
    expect(session.end?.code).toBe("handshake_timeout");
    expect(session.end?.message).toMatch(/no hello within 1000 ms/);
  });

  it("ends with handshake_timeout, naming the open, when the transport does not open the stream in time", () => {
    const session = zone();
    at(9_900);
    expect(session.end).toBeUndefined();
    at(10_300);
    expect(session.end?.code).toBe("handshake_timeout");
    expect(session.end?.message).toMatch(/did not open the stream within 10000 ms/);
  });

  it("times a global's hello from its creation, as it is opened at once", () => {
    const session = new MuxSession({
      role: "global",
      localId: "global",
      peerId: "zone-1",
      now: () => now,
      options: { handshakeTimeoutMs: 1_000, openTimeoutMs: 10_000 },
    });
    session.attach(silence());
    at(900);
    expect(session.end).toBeUndefined();
    at(1_300);
    expect(session.end?.code).toBe("handshake_timeout");
  });
});
