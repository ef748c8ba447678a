import { describe, expect, it } from "vitest";
import { Pulse, Waker } from "../../src/util/wake.ts";
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
