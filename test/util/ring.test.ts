// Ring: a bounded FIFO that allocates no storage until its first push and grows up to its capacity.
import { describe, expect, it } from "vitest";
import { Ring } from "../../src/util/ring.ts";

describe("Ring", () => {
  it("keeps FIFO order while it grows from empty and wraps around", () => {
    const ring = new Ring<number>(100);
    expect(ring.peek()).toBeUndefined();
    expect(ring.shift()).toBeUndefined();
    expect(ring.remove(() => true)).toBe(false);
    let next = 0;
    let expected = 0;
    // Pushes outpace shifts: the storage grows several times with its head away from slot 0.
    for (let round = 0; round < 20; round++) {
      for (let i = 0; i < 3; i++) expect(ring.push(next++)).toBe(true);
      expect(ring.shift()).toBe(expected++);
    }
    expect(ring.size).toBe(40);
    expect(ring.at(0)).toBe(expected);
    expect(ring.at(39)).toBe(next - 1);
    expect(ring.remove((n) => n === expected + 1)).toBe(true);
    const rest = ring.drain();
    expect(rest).toEqual(
      Array.from({ length: 40 }, (_, i) => expected + i).filter((n) => n !== expected + 1),
    );
    expect(ring.size).toBe(0);
  });

  it("refuses a push past its capacity, also one smaller than the first storage", () => {
    const ring = new Ring<string>(2);
    expect(ring.push("a")).toBe(true);
    expect(ring.push("b")).toBe(true);
    expect(ring.push("c")).toBe(false);
    expect(ring.shift()).toBe("a");
    expect(ring.push("c")).toBe(true);
    expect(ring.drain()).toEqual(["b", "c"]);
    expect(() => new Ring(0)).toThrow(RangeError);
  });
});
