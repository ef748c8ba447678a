// The zone's reconnect loop against a real node:http2 global that goes away
// and comes back on the same port.
import { describe, expect, it } from "vitest";
import type { Logger } from "../../src/log.ts";
import { silentLogger } from "../../src/log.ts";
import type { Session } from "../../src/mux/views.ts";
import { ZoneClient, type RetryInfo } from "../../src/zone/zone-client.ts";
import { eventually, startGlobal } from "../contract/harness.ts";

function capturingLogger(lines: string[]): Logger {
  const push = (m: string): void => void lines.push(m);
  return { debug: () => undefined, info: () => undefined, warn: push, error: push };
}

describe("zone reconnect", () => {
  it("reconnects with growing, jittered delays after the global restarts", async () => {
    const first = await startGlobal("grpc");
    const port = Number(new URL(first.url as string).port);
    const retries: RetryInfo[] = [];
    const sessions: Session[] = [];
    const controller = new AbortController();
    const zone = new ZoneClient({
      name: "zone-1",
      transport: first.transport(),
      logger: silentLogger,
      backoff: { baseMs: 20, capMs: 320, resetAfterMs: 60_000 },
      onSession: (s) => void sessions.push(s),
      onRetry: (info) => void retries.push(info),
    });
    const running = zone.run(controller.signal);
    await eventually(() => sessions.length === 1, "first session");

    await first.close();
    await eventually(() => retries.length >= 6, "six retries while the global is down", 20_000);
    const second = await startGlobal("grpc", { port, tokens: first.tokens });
    try {
      await eventually(() => sessions.length === 2, "a new session after the restart", 20_000);
      const s = sessions[1] as Session;
      expect(s.end).toBeUndefined();
      expect(second.global.session("zone-1")).toBeDefined();
    } finally {
      controller.abort();
      await running;
      await second.close();
    }

    expect(sessions[0]?.end?.code).toBe("shutdown");
    expect(retries[0]?.error.code).toBe("session_closed");
    const ceilings = retries.map((r) => r.ceilingMs);
    expect(ceilings.slice(0, 6)).toEqual([20, 40, 80, 160, 320, 320]);
    for (const r of retries) {
      expect(r.delayMs).toBeGreaterThanOrEqual(0);
      expect(r.delayMs).toBeLessThan(r.ceilingMs);
    }
    const ratios = new Set(retries.map((r) => (r.delayMs / r.ceilingMs).toFixed(3)));
    expect(ratios.size).toBeGreaterThan(1);
    expect(retries.slice(1).every((r) => r.error.code === "transport")).toBe(true);
  }, 60_000);

  it("logs the global's registration instructions on every retry of an unregistered zone", async () => {
    const t = await startGlobal("grpc", { zones: [], adminUrl: "http://127.0.0.1:5681" });
    const lines: string[] = [];
    const retries: RetryInfo[] = [];
    const controller = new AbortController();
    const zone = new ZoneClient({
      name: "zone-7",
      transport: t.transport(),
      logger: capturingLogger(lines),
      backoff: { baseMs: 5, capMs: 20 },
      onRetry: (info) => void retries.push(info),
    });
    const running = zone.run(controller.signal);
    try {
      await eventually(() => retries.length >= 3, "three retries");
    } finally {
      controller.abort();
      await running;
      await t.close();
    }
    expect(retries.every((r) => r.error.code === "zone_not_registered")).toBe(true);
    expect(lines.length).toBeGreaterThanOrEqual(3);
    for (const line of lines) {
      expect(line).toContain(
        "kds-mux generate zone --name zone-7 | kds-mux apply -f - --server http://127.0.0.1:5681",
      );
      expect(line).toMatch(/retries in \d+ ms \(at \d{4}-\d\d-\d\dT/);
    }
  });

  it("resets the backoff after a session that stayed up long enough", async () => {
    const t = await startGlobal("memory");
    const retries: RetryInfo[] = [];
    const controller = new AbortController();
    let sessionsSeen = 0;
    const zone = new ZoneClient({
      name: "zone-1",
      transport: t.transport(),
      logger: silentLogger,
      backoff: { baseMs: 10, capMs: 1000, resetAfterMs: 50 },
      onRetry: (info) => void retries.push(info),
      onSession: async (s) => {
        sessionsSeen++;
        // The first two sessions die at once; the third lives past resetAfterMs.
        if (sessionsSeen < 3) await s.close();
        else setTimeout(() => void s.close(), 120);
      },
    });
    const running = zone.run(controller.signal);
    try {
      await eventually(() => retries.length >= 3, "three retries");
    } finally {
      controller.abort();
      await running;
      await t.close();
    }
    expect(retries.slice(0, 3).map((r) => r.attempt)).toEqual([0, 1, 0]);
  });
});
