import { describe, expect, it } from "vitest";
import { Pulse, Ticker, Turns, Waker } from "../../src/util/wake.ts";
import { ManualClock } from "../support/manual-clock.ts";

/** Lets every settled promise's callbacks run. */
const flush = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 0));

describe("Waker", () => {
  it("remembers one wake that came before the wait, and only one", async () => {
    const waker = new Waker();
    waker.wake();
    waker.wake();
    await waker.wait();
    let woke = false;
    void waker.wait().then(() => (woke = true));
    await flush();
    expect(woke).toBe(false);
    waker.wake();
    await flush();
    expect(woke).toBe(true);
  });

  it("ends a wait when the signal aborts, and a later wake is remembered for the next wait", async () => {
    const waker = new Waker();
    const abort = new AbortController();
    let woke = false;
    void waker.wait(abort.signal).then(() => (woke = true));
    abort.abort();
    await flush();
    expect(woke).toBe(true);
    waker.wake(); // nobody waits now: remembered
    let again = false;
    void waker.wait().then(() => (again = true));
    await flush();
    expect(again).toBe(true);
  });
});

describe("Turns", () => {
  it("turns once per wake while parked, goes round again for a wake during a turn, and turns no more once stopped", async () => {
    const log: string[] = [];
    let wakeDuringTurn = false;
    const turns: Turns = new Turns(() => {
      log.push("turn");
      if (wakeDuringTurn) {
        wakeDuringTurn = false;
        turns.wake(); // a wake while the turn runs: remembered
      }
      while (!turns.park()) log.push("again");
    });
    expect(turns.parked).toBe(false); // not parked before the first turn ends
    turns.wake(); // a wake before the first turn: remembered, the first turn goes round once more
    expect(turns.park()).toBe(false);
    expect(turns.park()).toBe(true);
    expect(turns.parked).toBe(true);
    turns.wake();
    turns.wake(); // the first wake queued a turn and unparked the loop; this one makes that turn go round again
    expect(turns.parked).toBe(false);
    expect(log).toEqual([]); // a turn runs in a microtask, never inside wake()
    await flush();
    expect(log).toEqual(["turn", "again"]);
    wakeDuringTurn = true;
    turns.wake();
    await flush();
    expect(log).toEqual(["turn", "again", "turn", "again"]);
    turns.stop();
    turns.wake();
    await flush();
    expect(log).toHaveLength(4);
    expect(turns.park()).toBe(true);
    expect(turns.parked).toBe(false); // a stopped loop does not park: no wake turns it again
  });
});

describe("Pulse", () => {
  it("wakes every waiter of the moment and forgets a notify nobody waited for", async () => {
    const pulse = new Pulse();
    pulse.notify(); // not remembered
    const woken: number[] = [];
    for (const i of [1, 2, 3]) void pulse.next().then(() => woken.push(i));
    expect(pulse.waiting).toBe(3);
    await flush();
    expect(woken).toEqual([]);
    pulse.notify();
    await flush();
    expect(woken.sort()).toEqual([1, 2, 3]);
    expect(pulse.waiting).toBe(0);
  });

  it("ends a wait on abort or after its time on the injected clock, leaving no waiter behind", async () => {
    const clock = new ManualClock();
    const pulse = new Pulse();
    const abort = new AbortController();
    let aborted = false;
    let timedOut = false;
    void pulse.next(abort.signal).then(() => (aborted = true));
    void pulse.next(undefined, 1_000, clock).then(() => (timedOut = true));
    abort.abort();
    await flush();
    expect(aborted).toBe(true);
    expect(timedOut).toBe(false);
    clock.advance(999);
    await flush();
    expect(timedOut).toBe(false);
    clock.advance(1);
    await flush();
    expect(timedOut).toBe(true);
    expect(pulse.waiting).toBe(0);
  });
});

describe("Ticker", () => {
  it("calls each owner once every period, spread over the period, from one timer per period", () => {
    const clock = new ManualClock(0);
    const ticker = new Ticker(clock);
    const calls: [owner: number, at: number][] = [];
    const stops = [0, 1, 2, 3, 4, 5, 6, 7].map((i) =>
      ticker.every(8_000, () => calls.push([i, clock.now()])),
    );
    expect(ticker.periods).toBe(1);
    expect(clock.pending).toBe(1); // one timer for all eight owners
    clock.advance(8_000);
    // Each owner in a slot of its own, one slot per 1 s step: every owner called once within the period, none twice.
    const first = new Map(calls.map(([o, t]) => [o, t]));
    expect(calls).toHaveLength(8);
    expect([...first.values()].sort((x, y) => x - y)).toEqual(
      [1, 2, 3, 4, 5, 6, 7, 8].map((s) => s * 1_000),
    );
    calls.length = 0;
    clock.advance(16_000);
    for (const i of [0, 1, 2, 3, 4, 5, 6, 7]) {
      const at = calls.filter(([o]) => o === i).map(([, t]) => t);
      const t0 = first.get(i) as number;
      expect(at).toEqual([t0 + 8_000, t0 + 16_000]); // exactly a period apart
    }
    for (const stop of stops) stop();
    expect(ticker.periods).toBe(0);
    expect(clock.pending).toBe(0); // the timer goes with the last owner
  });

  it("wakes once per period for one owner, and brings the timer forward for an owner whose slot comes sooner", () => {
    const clock = new ManualClock(0);
    const ticker = new Ticker(clock);
    const calls: [owner: string, at: number][] = [];
    const stopA = ticker.every(8_000, () => calls.push(["a", clock.now()]));
    clock.advance(7_999);
    expect(calls).toEqual([]); // the empty slots are skipped: no wake-up before the period
    clock.advance(1);
    expect(calls).toEqual([["a", 8_000]]);
    clock.advance(500); // 8,500: a's next call is at 16,000; the next slot (b's) comes due at 9,000
    const stopB = ticker.every(8_000, () => calls.push(["b", clock.now()]));
    expect(clock.pending).toBe(1);
    clock.advance(8_000);
    expect(calls).toEqual([
      ["a", 8_000],
      ["b", 9_000],
      ["a", 16_000],
    ]);
    stopA();
    stopB();
    expect(clock.pending).toBe(0);
  });

  it("stops calling an owner that stopped, keeps the others, and gives a short period one slot", () => {
    const clock = new ManualClock(0);
    const ticker = new Ticker(clock);
    let a = 0;
    let b = 0;
    const stopA = ticker.every(50, () => a++);
    const stopB = ticker.every(50, () => b++);
    clock.advance(50); // one slot: both at each 50 ms
    expect([a, b]).toEqual([1, 1]);
    stopA();
    stopA(); // a second stop changes nothing
    clock.advance(100);
    expect([a, b]).toEqual([1, 3]);
    stopB();
    expect(clock.pending).toBe(0);
    clock.advance(1_000);
    expect([a, b]).toEqual([1, 3]);
  });

  it("goes on with its next turns after a callback threw", () => {
    const clock = new ManualClock(0);
    const ticker = new Ticker(clock);
    let calls = 0;
    const stopBad = ticker.every(10, () => {
      throw new Error("bug");
    });
    const stopGood = ticker.every(10, () => calls++);
    expect(() => clock.advance(10)).toThrow("bug");
    stopBad();
    clock.advance(10);
    expect(calls).toBe(1); // the next turn still comes
    stopGood();
  });
});
