// TypeLagClocks against a plain model of the same rules (one map of running
// clocks, a list of responses in flight): any sequence of changes, sends,
// ACKs and NACKs (a timeout puts clocks back as a NACK does) reports the same
// lags in the same order. The bounds are tested through the observers
// (test/observe/units.test.ts).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MAX_TRACKED_RESPONSES, TypeLagClocks } from "../../src/sync/lag-clocks.ts";

/** The rules written plainly: what the clocks must behave as. */
class ModelClocks {
  readonly running = new Map<string, number>();
  readonly flight: { nonce: string; carried: [string, number][] }[] = [];

  start(key: string, since: number): void {
    const earlier = this.running.get(key);
    if (earlier !== undefined) {
      if (earlier <= since) return;
      this.running.delete(key);
    }
    this.running.set(key, since);
  }

  send(nonce: string, keys: readonly string[] | undefined): void {
    const carried: [string, number][] = [];
    if (keys === undefined) {
      carried.push(...this.running);
      this.running.clear();
    } else
      for (const key of keys) {
        const since = this.running.get(key);
        if (since === undefined) continue;
        carried.push([key, since]);
        this.running.delete(key);
      }
    if (carried.length === 0) return;
    if (this.flight.length >= MAX_TRACKED_RESPONSES) this.flight.shift();
    this.flight.push({ nonce, carried });
  }

  #take(nonce: string): [string, number][] | undefined {
    const i = this.flight.findIndex((f) => f.nonce === nonce);
    if (i < 0) return undefined;
    return this.flight.splice(i, 1)[0]?.carried;
  }

  stop(nonce: string, now: number, report: (ms: number) => void): void {
    for (const [, since] of this.#take(nonce) ?? []) report(now - since);
  }

  putBack(nonce: string): void {
    for (const [key, since] of this.#take(nonce) ?? []) this.start(key, since);
  }
}

const key = fc.constantFrom("a", "b", "c", "d");
const step = fc.oneof(
  fc.record({ op: fc.constant("change" as const), key, advance: fc.nat(5) }),
  fc.record({
    op: fc.constant("send" as const),
    keys: fc.option(fc.uniqueArray(key, { maxLength: 3 }), { nil: undefined }),
  }),
  fc.record({ op: fc.constantFrom("ack" as const, "nack" as const), back: fc.nat(6) }),
);

describe("lag clocks", () => {
  it("report what the plain rules report, for any sequence of events", () => {
    fc.assert(
      fc.property(fc.array(step, { maxLength: 200 }), (steps) => {
        const clocks = new TypeLagClocks("Mesh");
        const model = new ModelClocks();
        const got: number[] = [];
        const want: number[] = [];
        let now = 0;
        let sent = 0;
        for (const s of steps) {
          if (s.op === "change") {
            now += s.advance;
            clocks.start(s.key, now);
            model.start(s.key, now);
          } else if (s.op === "send") {
            const nonce = String(++sent);
            if (clocks.running) clocks.send(nonce, s.keys);
            model.send(nonce, s.keys);
          } else {
            // An answer to one of the last responses (or to one never sent, which changes nothing).
            const nonce = String(sent - s.back);
            if (s.op === "ack") {
              clocks.stop(nonce, () => now, { lag: (_kind, ms) => got.push(ms) });
              model.stop(nonce, now, (ms) => want.push(ms));
            } else {
              clocks.putBack(nonce);
              model.putBack(nonce);
            }
          }
        }
        expect(got).toEqual(want);
        expect(clocks.running).toBe(model.running.size > 0);
      }),
      { numRuns: 500 },
    );
  });
});
