import { describe, expect, it } from "vitest";
import { heartbeatSession } from "../../src/cli/heartbeat-flags.ts";
import { KdsError } from "../../src/errors.ts";
import { resolveSessionOptions } from "../../src/mux/options.ts";

describe("--heartbeat-interval and --heartbeat-timeout", () => {
  it("set nothing when neither is given, so the session's defaults stay", () => {
    expect(heartbeatSession({})).toEqual({});
  });

  it("take four intervals as the timeout when only the interval is given", () => {
    expect(heartbeatSession({ heartbeatInterval: 60_000 })).toEqual({
      heartbeatIntervalMs: 60_000,
      heartbeatTimeoutMs: 240_000,
    });
  });

  it("keep the default interval under a longer timeout, and shorten it under a short one", () => {
    expect(heartbeatSession({ heartbeatTimeout: 120_000 })).toEqual({
      heartbeatIntervalMs: 15_000,
      heartbeatTimeoutMs: 120_000,
    });
    expect(heartbeatSession({ heartbeatTimeout: 20_000 })).toEqual({
      heartbeatIntervalMs: 5_000,
      heartbeatTimeoutMs: 20_000,
    });
  });

  it("give session options the session accepts", () => {
    const session = heartbeatSession({ heartbeatInterval: 30_000, heartbeatTimeout: 90_000 });
    const resolved = resolveSessionOptions(session);
    expect(resolved.heartbeatIntervalMs).toBe(30_000);
    expect(resolved.heartbeatTimeoutMs).toBe(90_000);
  });

  it("refuse a timeout that is not longer than the interval, naming both flags", () => {
    let caught: unknown;
    try {
      heartbeatSession({ heartbeatInterval: 60_000, heartbeatTimeout: 60_000 });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(KdsError);
    expect((caught as KdsError).code).toBe("invalid_argument");
    expect((caught as KdsError).message).toContain("--heartbeat-timeout (60000ms)");
    expect((caught as KdsError).message).toContain("--heartbeat-interval (60000ms)");
  });
});
