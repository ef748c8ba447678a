import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SmallMap } from "../../src/util/small-map.ts";

/** One step on both maps. */
type Op =
  | { readonly op: "set"; readonly key: string; readonly value: number }
  | { readonly op: "delete"; readonly key: string }
  | { readonly op: "clear" }
  | { readonly op: "drain"; readonly stopAt: string };

// Few keys, so sets hit existing entries and deletes find them; enough of them (20) to pass the array's 8.
const key = fc.integer({ min: 0, max: 19 }).map((i) => `k${i}`);
const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({ op: fc.constant("set" as const), key, value: fc.integer() }),
  },
  { weight: 4, arbitrary: fc.record({ op: fc.constant("delete" as const), key }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("clear" as const) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("drain" as const), stopAt: key }) },
);

describe("SmallMap", () => {
  it("behaves as a Map, in insertion order, across the spill to a Map and back", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const model = new Map<string, number>();
        const map = new SmallMap<number>();
        for (const o of ops) {
          if (o.op === "set") {
            map.set(o.key, o.value);
            model.set(o.key, o.value);
          } else if (o.op === "delete") {
            expect(map.delete(o.key)).toBe(model.delete(o.key));
          } else if (o.op === "clear") {
            map.clear();
            model.clear();
          } else {
            // Takes keys until stopAt, which stays with the rest.
            const offered: string[] = [];
            const all = map.drain((k) => {
              offered.push(k);
              return k !== o.stopAt;
            });
            const expected: string[] = [];
            for (const k of model.keys()) {
              expected.push(k);
              if (k === o.stopAt) break;
              model.delete(k);
            }
            expect(offered).toEqual(expected);
            expect(all).toBe(!expected.includes(o.stopAt));
          }
          expect(map.size).toBe(model.size);
          expect([...map.keys()]).toEqual([...model.keys()]);
          const entries: Array<[string, number]> = [];
          map.forEach((v, k) => {
            entries.push([k, v]);
          });
          expect(entries).toEqual([...model.entries()]);
          expect(map.firstKey()).toBe(model.keys().next().value);
          for (let i = 0; i < 20; i++) {
            expect(map.get(`k${i}`)).toBe(model.get(`k${i}`));
            expect(map.has(`k${i}`)).toBe(model.has(`k${i}`));
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it("keeps a value that is undefined or null apart from a missing key", () => {
    const map = new SmallMap<string | null>();
    map.set("a", null);
    expect(map.has("a")).toBe(true);
    expect(map.get("a")).toBeNull();
    expect(map.get("b")).toBeUndefined();
    expect(map.has("b")).toBe(false);
  });
});
