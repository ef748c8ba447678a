// A zone refused as overloaded with a retry hint waits what the global said
// and does not grow its backoff; without a hint (an older global) it backs
// off as before. Injected randomness, a transport that refuses: no timing.
import { describe, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import { silentLogger } from "../../src/log.ts";
import type { MuxTransport } from "../../src/transport/transport.ts";
import { resolveBackoff } from "../../src/util/backoff.ts";
import {
  REFUSED_CEILING_MS,
  ZoneClient,
  connectionRefused,
  retryDelay,
  type RetryInfo,
} from "../../src/zone/zone-client.ts";

const backoff = resolveBackoff({ baseMs: 1_000, capMs: 60_000 });
const overloaded = (retryAfterMs?: number): KdsError =>
  new KdsError("overloaded", "busy", { retryAfterMs });

const input = (
  error: KdsError,
  over: Partial<Parameters<typeof retryDelay>[0]> = {},
): Parameters<typeof retryDelay>[0] => ({
  error,
  asked: false,
  attempt: 0,
  backoff,
  reconnectJitterMs: 1_000,
  downMs: undefined,
  random: () => 0.5,
  ...over,
});

describe("retryDelay", () => {
  it("takes the global's hint on an overloaded refusal, at most the cap", () => {
    expect(retryDelay(input(overloaded(2_500), { attempt: 5 }))).toEqual({
      delayMs: 2_500,
      ceilingMs: 2_500,
      told: true,
    });
    expect(retryDelay(input(overloaded(900_000))).delayMs).toBe(60_000);
  });

  it("backs off without a hint, and for any other error", () => {
    expect(retryDelay(input(overloaded(), { attempt: 3 }))).toEqual({
      delayMs: 4_000,
      ceilingMs: 8_000,
      told: false,
    });
    const hinted = new KdsError("transport", "refused", { retryAfterMs: 10 });
    expect(retryDelay(input(hinted)).told).toBe(false);
  });

  it("reconnects with a small jitter when asked", () => {
    expect(
      retryDelay(input(overloaded(5_000), { asked: true, attempt: 4, random: () => 0.25 })),
    ).toEqual({
      delayMs: 250,
      ceilingMs: 1_000,
      told: false,
    });
  });

  it("keeps an unreachable global's ceiling within the time since the healthy session ended", () => {
    const unreachable = new KdsError("transport", "connection refused");
    // Four quick failures 3 s after the end: the ceiling is 3 s, not 16 s.
    expect(retryDelay(input(unreachable, { attempt: 4, downMs: 3_000 })).ceilingMs).toBe(3_000);
    // Never below the base, never above the exponential ceiling.
    expect(retryDelay(input(unreachable, { attempt: 2, downMs: 10 })).ceilingMs).toBe(1_000);
    expect(retryDelay(input(unreachable, { attempt: 2, downMs: 30_000 })).ceilingMs).toBe(4_000);
    // Refused connections (nothing listens): at most REFUSED_CEILING_MS, however long it has been down.
    const refused = new KdsError("transport", "unreachable", {
      cause: new Error("connect", {
        cause: Object.assign(new Error("refused"), { code: "ECONNREFUSED" }),
      }),
    });
    expect(connectionRefused(refused)).toBe(true);
    expect(connectionRefused(unreachable)).toBe(false);
    expect(retryDelay(input(refused, { attempt: 9, downMs: 600_000 })).ceilingMs).toBe(
      REFUSED_CEILING_MS,
    );
    expect(retryDelay(input(unreachable, { attempt: 9, downMs: 600_000 })).ceilingMs).toBe(60_000);
    // Before any healthy session, and for a refusal, the backoff alone.
    expect(retryDelay(input(unreachable, { attempt: 4 })).ceilingMs).toBe(16_000);
    expect(retryDelay(input(overloaded(), { attempt: 4, downMs: 3_000 })).ceilingMs).toBe(16_000);
  });
});

describe("ZoneClient.run honours the hint", () => {
  it("keeps its attempt while told when to come back, and backs off from there after", async () => {
    const errors = [
      overloaded(3),
      overloaded(1),
      overloaded(),
      new KdsError("transport", "connection refused"),
    ];
    const retries: RetryInfo[] = [];
    const controller = new AbortController();
    const transport: MuxTransport = {
      name: "refusing",
      open: () => Promise.reject(errors.shift() ?? new KdsError("transport", "still down")),
    };
    const zone = new ZoneClient({
      name: "zone-1",
      transport,
      logger: silentLogger,
      backoff: { baseMs: 2, capMs: 8 },
      random: () => 0,
      onRetry: (info) => {
        retries.push(info);
        if (retries.length === 5) controller.abort();
      },
    });
    await zone.run(controller.signal);
    expect(retries.map((r) => [r.attempt, r.told, r.delayMs, r.ceilingMs])).toEqual([
      [0, true, 3, 3],
      [0, true, 1, 1],
      [0, false, 0, 2],
      [1, false, 0, 4],
      [2, false, 0, 8],
    ]);
  });
});
