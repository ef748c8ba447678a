// One log line per burst of like events (src/util/burst-log.ts): the first at once, the rest counted and
// reported once an interval, and flushed on demand (a stopping process says what it counted).
import { describe, expect, it } from "vitest";
import { BurstLog } from "../../src/util/burst-log.ts";
import { ManualClock } from "../support/manual-clock.ts";

describe("BurstLog", () => {
  it("reports the first event at once, the rest once an interval, and what is left on flush", () => {
    const clock = new ManualClock();
    const lines: [number, number][] = [];
    const log = new BurstLog((count, windowMs) => lines.push([count, windowMs]), 10_000, clock);
    log.flush(); // nothing counted: nothing said
    log.note();
    expect(lines).toEqual([[1, 0]]);
    log.note();
    clock.advance(4_000);
    log.note();
    expect(lines).toHaveLength(1);
    clock.advance(6_000);
    log.note(); // an interval after the first: the three since are reported
    expect(lines).toEqual([
      [1, 0],
      [3, 10_000],
    ]);
    log.note();
    clock.advance(2_000);
    log.flush();
    expect(lines.at(-1)).toEqual([1, 2_000]);
    log.flush();
    expect(lines).toHaveLength(3);
    // Quiet for two intervals: a new burst, reported at once.
    clock.advance(20_000);
    log.note();
    expect(lines.at(-1)).toEqual([1, 0]);
  });
});
