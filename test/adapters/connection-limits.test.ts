// The pure parts of the connection limits: logging a flood once per burst, reading the
// descriptor limit, and the default caps derived from it. The real listeners are tested
// with real processes in test/hostile/connections.test.ts.
import { describe, expect, it } from "vitest";
import {
  checkConnectionLimits,
  defaultConnectionCaps,
  openFilesSoftLimit,
} from "../../src/adapters/node/connection-limits.ts";
import { KdsError } from "../../src/errors.ts";
import { BurstLog } from "../../src/util/burst-log.ts";
import { ManualClock } from "../support/manual-clock.ts";

describe("BurstLog", () => {
  it("reports the first event at once, then at most one count per interval, and starts over after a quiet interval", () => {
    const clock = new ManualClock(0);
    const reports: [number, number][] = [];
    const log = new BurstLog((count, windowMs) => reports.push([count, windowMs]), 10_000, clock);
    log.note();
    expect(reports).toEqual([[1, 0]]);
    for (let i = 0; i < 500; i++) {
      clock.advance(10); // 500 events over 5 s: counted, not reported
      log.note();
    }
    expect(reports).toEqual([[1, 0]]);
    clock.advance(5_000); // 10 s after the first: this event reports the 501 of the window
    log.note();
    expect(reports).toEqual([
      [1, 0],
      [501, 10_000],
    ]);
    log.note(); // counted in the next window
    clock.advance(25_000); // quiet for more than an interval: a new burst, and the one left over is reported
    log.note();
    expect(reports).toEqual([
      [1, 0],
      [501, 10_000],
      [1, 25_000],
      [1, 0],
    ]);
  });
});

describe("connection limits", () => {
  const limits = (soft: string): string =>
    `Limit                     Soft Limit           Hard Limit           Units\nMax processes             63704                63704                processes\nMax open files            ${soft}                 1048576              files\n`;

  it("reads the soft open-files limit, and nothing where it cannot", () => {
    expect(openFilesSoftLimit(() => limits("1024"))).toBe(1024);
    expect(openFilesSoftLimit(() => limits("unlimited"))).toBeUndefined();
    expect(
      openFilesSoftLimit(() => {
        throw new Error("ENOENT");
      }),
    ).toBeUndefined();
    expect(openFilesSoftLimit()).toBeGreaterThan(0); // this machine is Linux
  });

  it("keeps both default caps together below the soft limit with headroom, and bounded when the limit is huge", () => {
    for (const soft of [64, 256, 1024, 4096, 20_000, 1_048_576]) {
      const caps = defaultConnectionCaps(soft);
      expect(caps.zones).toBeGreaterThanOrEqual(1);
      expect(caps.admin).toBeGreaterThanOrEqual(1);
      if (soft >= 256)
        expect(caps.zones + caps.admin).toBeLessThanOrEqual(soft - Math.max(64, soft / 8));
      expect(caps.zones).toBeLessThanOrEqual(10_000);
      expect(caps.admin).toBeLessThanOrEqual(128);
    }
    expect(defaultConnectionCaps(1024)).toEqual({
      zones: 784,
      admin: 112,
      softLimit: 1024,
      measured: true,
    });
    expect(defaultConnectionCaps(undefined)).toMatchObject({ softLimit: 1024, measured: false });
  });

  it("refuses limits that are not positive integers, naming the field", () => {
    const bad = (patch: object): unknown => {
      try {
        checkConnectionLimits({
          listener: "zones",
          maxConnections: 10,
          idleTimeoutMs: 1_000,
          ...patch,
        });
      } catch (error) {
        return error;
      }
      return undefined;
    };
    expect(bad({})).toBeUndefined();
    for (const [patch, field] of [
      [{ maxConnections: 0 }, "maxConnections"],
      [{ idleTimeoutMs: 1.5 }, "idleTimeoutMs"],
      [{ maxStreamsPerConnection: -1 }, "maxStreamsPerConnection"],
    ] as const) {
      const error = bad(patch);
      expect(KdsError.is(error, "invalid_argument")).toBe(true);
      expect((error as Error).message).toContain(field);
    }
  });
});
