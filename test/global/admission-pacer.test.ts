// The retry hint a zone refused as overloaded gets: measured from the rate at
// which handshake slots free up, one slot per refused zone, jittered within
// it, capped; and the global sends it (kds-retry-after-ms) on a refusal for
// maxHandshakes, not on one for maxHandshakesPerZone. Injected clock and
// randomness: no timing.
import { describe, expect, it } from "vitest";
import { insecureZoneAuthenticator } from "../../src/auth/zone-authenticator.ts";
import {
  KDS_RETRY_AFTER_MS_HEADER,
  fromConnectError,
  retryAfter,
  toConnectError,
} from "../../src/connect-errors.ts";
import { KdsError } from "../../src/errors.ts";
import { AdmissionPacer } from "../../src/global/admission-pacer.ts";
import { GlobalServer } from "../../src/global/global-server.ts";
import { InMemoryZoneRegistry } from "../../src/global/zone-registry.ts";
import type { Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { silentLogger } from "../../src/log.ts";

function clock(start = 1_000): { now: () => number; advance: (ms: number) => void } {
  let t = start;
  return {
    now: () => t,
    advance: (ms) => {
      t += ms;
    },
  };
}

describe("AdmissionPacer", () => {
  it("spreads refused zones one slot apart at the floor rate before any slot freed", () => {
    const c = clock();
    const pacer = new AdmissionPacer({ now: c.now, random: () => 0, minRatePerSecond: 10 });
    expect(pacer.ratePerSecond()).toBe(10);
    expect([1, 2, 3, 4].map(() => pacer.retryAfterMs())).toEqual([0, 100, 200, 300]);
  });

  it("measures the rate slots free at, and spaces refusals by it", () => {
    const c = clock();
    const pacer = new AdmissionPacer({
      now: c.now,
      random: () => 0,
      windowMs: 1_000,
      minRatePerSecond: 1,
    });
    // 400 slots freed within one second: 400 a second.
    for (let i = 0; i < 400; i++) {
      pacer.freed();
      c.advance(2.5);
    }
    // Counted in tenths of the window: the oldest tenth may have left it.
    expect(pacer.ratePerSecond()).toBeGreaterThanOrEqual(360);
    expect(pacer.ratePerSecond()).toBeLessThanOrEqual(400);
    const hints = Array.from({ length: 800 }, () => pacer.retryAfterMs());
    // 800 refused zones are spread over the 2 s the global needs to admit them.
    expect(hints[0]).toBe(0);
    expect(hints[799]).toBe(Math.round((799 * 1000) / pacer.ratePerSecond()));
    for (let i = 1; i < hints.length; i++)
      expect(hints[i] as number).toBeGreaterThanOrEqual(hints[i - 1] as number);
  });

  it("jitters each zone within its slot", () => {
    const c = clock();
    const draws = [0.5, 0.99];
    const pacer = new AdmissionPacer({
      now: c.now,
      random: () => draws.shift() ?? 0,
      minRatePerSecond: 10,
    });
    expect(pacer.retryAfterMs()).toBe(50);
    expect(pacer.retryAfterMs()).toBe(199);
  });

  it("forgets reservations that passed, and slots that fell out of the window", () => {
    const c = clock();
    const pacer = new AdmissionPacer({
      now: c.now,
      random: () => 0,
      windowMs: 1_000,
      minRatePerSecond: 10,
    });
    for (let i = 0; i < 50; i++) pacer.retryAfterMs();
    c.advance(10_000);
    expect(pacer.retryAfterMs()).toBe(0);
    for (let i = 0; i < 100; i++) pacer.freed();
    expect(pacer.ratePerSecond()).toBe(1000); // 100 in the first 100 ms (one bucket)
    c.advance(2_000);
    expect(pacer.ratePerSecond()).toBe(10); // the window moved past them: the floor
  });

  it("never tells a zone to wait longer than the ceiling", () => {
    const c = clock();
    const pacer = new AdmissionPacer({
      now: c.now,
      random: () => 0.999,
      minRatePerSecond: 1,
      maxRetryAfterMs: 5_000,
    });
    const hints = Array.from({ length: 50 }, () => pacer.retryAfterMs());
    expect(Math.max(...hints)).toBe(5_000);
    expect(hints.slice(0, 4)).toEqual([999, 1999, 2999, 3999]);
  });

  it("rejects a non-positive option", () => {
    expect(() => new AdmissionPacer({ minRatePerSecond: 0 })).toThrow(/minRatePerSecond/);
  });
});

describe("kds-retry-after-ms on the wire", () => {
  it("travels as error metadata next to kds-error-code and reads back into retryAfterMs", () => {
    const connectError = toConnectError(
      new KdsError("overloaded", "busy", { retryAfterMs: 1234.4 }),
    );
    expect(connectError.metadata.get(KDS_RETRY_AFTER_MS_HEADER)).toBe("1234");
    const back = fromConnectError(connectError, "global");
    expect(back.code).toBe("overloaded");
    expect(back.retryAfterMs).toBe(1234);
    expect(
      toConnectError(new KdsError("overloaded", "busy")).metadata.has(KDS_RETRY_AFTER_MS_HEADER),
    ).toBe(false);
  });

  it("ignores a malformed hint and bounds a huge one", () => {
    expect(retryAfter(null)).toBeUndefined();
    expect(retryAfter("-5")).toBeUndefined();
    expect(retryAfter("1.5")).toBeUndefined();
    expect(retryAfter("soon")).toBeUndefined();
    expect(retryAfter(" 250 ")).toBe(250);
    expect(retryAfter("99999999999")).toBe(3_600_000);
  });
});

describe("the global's overloaded refusal", () => {
  it("carries a retry hint for maxHandshakes, none for maxHandshakesPerZone", async () => {
    const c = clock();
    const global = new GlobalServer({
      registry: new InMemoryZoneRegistry(["zone-1", "zone-2", "zone-3"]),
      authenticator: insecureZoneAuthenticator(),
      logger: silentLogger,
      maxHandshakes: 2,
      maxHandshakesPerZone: 1,
      admissionPacer: { now: c.now, random: () => 0.5, minRatePerSecond: 10 },
    });
    const stop = new AbortController();
    async function* silent(): AsyncIterable<Frame> {
      // A zone that holds its stream and never says hello, until the test ends.
      await new Promise((resolve) => stop.signal.addEventListener("abort", resolve));
    }
    const dial = (zone: string): Promise<unknown> =>
      global.accept(new Headers({ "client-id": zone }), silent(), stop.signal);
    try {
      await dial("zone-1");
      const perZone = await dial("zone-1").catch((e: unknown) => e);
      expect(perZone).toMatchObject({ code: "overloaded", retryAfterMs: undefined });
      await dial("zone-2");
      const refused = await dial("zone-3").catch((e: unknown) => e);
      expect(refused).toMatchObject({ code: "overloaded", retryAfterMs: 50 });
      expect((refused as KdsError).message).toMatch(/retries in 50 ms/);
      const next = await dial("zone-3").catch((e: unknown) => e);
      expect(next).toMatchObject({ code: "overloaded", retryAfterMs: 150 });
    } finally {
      stop.abort();
      await global.close();
    }
  });
});
