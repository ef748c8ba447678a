// Zone replicas electing one leader through a lease (src/zone/leadership.ts),
// on the memory store and a manual clock: one leads, the others stand by; a
// leader that cannot renew stops before its lease expires in the store; a
// paused leader (its timers late) reads as no leader the moment it resumes;
// a standby's writes are refused naming the leader; a term's writes are
// fenced by the store.
import { create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it } from "vitest";
import { DataplaneSpecSchema, exampleTypes } from "../../examples/example-kinds/index.ts";
import { KdsError } from "../../src/errors.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { silentLogger } from "../../src/log.ts";
import type { Lease, LeaseStore } from "../../src/store/lease.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { fencedStore } from "../../src/zone/fenced-store.ts";
import {
  Leadership,
  nextLeadership,
  renewDeadline,
  type LeadershipState,
} from "../../src/zone/leadership.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import type { MuxTransport } from "../../src/transport/transport.ts";
import { ManualClock } from "../support/manual-clock.ts";

const types = createTypeRegistry(exampleTypes);
const dataplane = (name: string) => ({
  kind: "Dataplane",
  mesh: "default",
  name,
  spec: create(DataplaneSpecSchema, { address: "10.0.0.1" }),
});

/** Lets pending promise callbacks run (the memory store answers with resolved promises). */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

/** Advances `clock` in steps of `step` ms, letting promises settle between steps. */
async function advance(clock: ManualClock, ms: number, step = 100): Promise<void> {
  for (let done = 0; done < ms; done += step) {
    clock.advance(Math.min(step, ms - done));
    await settle();
  }
}

interface Replica {
  readonly leadership: Leadership;
  readonly terms: AbortSignal[];
  readonly stop: AbortController;
  readonly running: Promise<void>;
}

const stops: AbortController[] = [];
afterEach(() => {
  for (const s of stops.splice(0)) s.abort();
});

function replica(
  lease: LeaseStore,
  clock: ManualClock,
  holder: string,
  options: { durationMs?: number } = {},
): Replica {
  const leadership = new Leadership({
    store: lease,
    name: "east",
    holder,
    durationMs: options.durationMs ?? 10_000,
    address: () => `http://admin-of-${holder}`,
    logger: silentLogger,
    clock,
  });
  const terms: AbortSignal[] = [];
  const stop = new AbortController();
  stops.push(stop);
  const running = leadership.run(stop.signal, (term) => {
    terms.push(term);
    return new Promise<void>((resolve) =>
      term.aborted ? resolve() : term.addEventListener("abort", () => resolve(), { once: true }),
    );
  });
  return { leadership, terms, stop, running };
}

/** A lease store whose renewals fail (an unreachable store) while `failing` is set. */
class FlakyLeases implements LeaseStore {
  failing = false;
  constructor(readonly inner: InMemoryStore) {}
  acquireLease(...args: Parameters<LeaseStore["acquireLease"]>) {
    if (this.failing)
      return Promise.reject(new KdsError("store_unavailable", "the store is unreachable"));
    return this.inner.acquireLease(...args);
  }
  renewLease(lease: Lease) {
    if (this.failing)
      return Promise.reject(new KdsError("store_unavailable", "the store is unreachable"));
    return this.inner.renewLease(lease);
  }
  releaseLease(lease: Lease) {
    return this.inner.releaseLease(lease);
  }
  readLease(name: string) {
    return this.inner.readLease(name);
  }
}

describe("leadership state", () => {
  it("moves by one transition function", () => {
    const lease = { name: "east", holder: "a", revision: 3, durationMs: 9_000, address: "" };
    const standby: LeadershipState = { kind: "standby", leader: undefined };
    const leader = nextLeadership(standby, { type: "granted", lease, sentAt: 100 });
    expect(leader).toEqual({ kind: "leader", lease, until: renewDeadline(100, 9_000) });
    expect(renewDeadline(100, 9_000)).toBe(6_100);
    expect(nextLeadership(leader, { type: "deadline" }).kind).toBe("standby");
    expect(nextLeadership(leader, { type: "lost" }).kind).toBe("standby");
    const stopped = nextLeadership(leader, { type: "stop" });
    expect(stopped.kind).toBe("stopped");
    expect(nextLeadership(stopped, { type: "granted", lease, sentAt: 0 }).kind).toBe("stopped");
  });

  it("refuses a lease duration that is not a whole number of milliseconds", () => {
    const store = new InMemoryStore(types);
    for (const durationMs of [0, -5, 1.5, Number.NaN])
      expect(
        () =>
          new Leadership({ store, name: "east", holder: "a", durationMs, logger: silentLogger }),
      ).toThrow(/`leaseDurationMs` must be a whole number of milliseconds/);
  });
});

describe("zone replicas on one store", () => {
  it("elect one leader; the standby learns who leads and takes over only after the leader stops", async () => {
    const clock = new ManualClock();
    const store = new InMemoryStore(types, { clock });
    const a = replica(store, clock, "a");
    await settle();
    const b = replica(store, clock, "b");
    await advance(clock, 3_000);
    expect(a.leadership.leads()).toBe(true);
    expect(b.leadership.leads()).toBe(false);
    expect(a.terms).toHaveLength(1);
    expect(b.terms).toHaveLength(0);
    expect(b.leadership.state).toMatchObject({
      kind: "standby",
      leader: { holder: "a", address: "http://admin-of-a", revision: 1 },
    });
    // The leader renews: a minute later it still leads, in the same term.
    await advance(clock, 60_000);
    expect(a.leadership.leads()).toBe(true);
    expect(a.terms).toHaveLength(1);
    expect(b.terms).toHaveLength(0);
    // A clean stop releases the lease: the standby leads within one poll.
    a.stop.abort();
    await a.running;
    expect(a.terms[0]?.aborted).toBe(true);
    await advance(clock, 1_100);
    expect(b.leadership.leads()).toBe(true);
    expect(b.leadership.fence()).toEqual({ lease: "east", revision: 2 });
  });

  it("a leader that cannot renew stops at its renew deadline, before the store lets another take over", async () => {
    const clock = new ManualClock();
    const store = new InMemoryStore(types, { clock });
    const flaky = new FlakyLeases(store);
    const a = replica(flaky, clock, "a");
    await advance(clock, 100);
    expect(a.leadership.leads()).toBe(true);
    const grantedAt = clock.now() - 100;
    flaky.failing = true;
    const b = replica(store, clock, "b");
    // Up to the renew deadline (2/3 of the lease) the leader leads and nobody else can.
    await advance(clock, renewDeadline(grantedAt, 10_000) - clock.now() - 50, 50);
    expect(a.leadership.leads()).toBe(true);
    expect(a.terms[0]?.aborted).toBe(false);
    await advance(clock, 100, 50);
    // Past it: its work was stopped, and its fence is gone; the store still holds its term.
    expect(a.terms[0]?.aborted).toBe(true);
    expect(a.leadership.fence()).toBeUndefined();
    expect(b.leadership.leads()).toBe(false);
    expect((await store.readLease("east"))?.holder).toBe("a");
    // Once the lease expired in the store, the standby takes over with the next term.
    await advance(clock, 10_000 - (clock.now() - grantedAt) + 1_200);
    expect(b.leadership.leads()).toBe(true);
    expect(b.leadership.fence()?.revision).toBe(2);
    expect(a.leadership.leads()).toBe(false);
  });

  it("a leader whose work stopped on its own campaigns again and restarts it, never holding the lease idle", async () => {
    const clock = new ManualClock();
    const store = new InMemoryStore(types, { clock });
    const leadership = new Leadership({
      store,
      name: "east",
      holder: "a",
      logger: silentLogger,
      clock,
    });
    const stop = new AbortController();
    stops.push(stop);
    let started = 0;
    void leadership.run(stop.signal, (term) => {
      started++;
      // The first run of the work returns at once; the second runs until the term ends.
      if (started === 1) return Promise.resolve();
      return new Promise<void>((resolve) => term.addEventListener("abort", () => resolve()));
    });
    await advance(clock, 2_000);
    expect(started).toBe(2);
    expect(leadership.fence()).toEqual({ lease: "east", revision: 1 });
  });

  it("ends the term at its deadline even when the clock's timers fire a little early (as Node's can)", async () => {
    class EarlyClock extends ManualClock {
      override setTimer(fire: () => void, ms: number): () => void {
        return super.setTimer(fire, ms > 1 ? ms - 1 : ms);
      }
    }
    const clock = new EarlyClock();
    const flaky = new FlakyLeases(new InMemoryStore(types, { clock }));
    const a = replica(flaky, clock, "a");
    await advance(clock, 100);
    expect(a.leadership.leads()).toBe(true);
    flaky.failing = true;
    await advance(clock, 7_000, 50);
    expect(a.leadership.leads()).toBe(false);
    expect(a.terms[0]?.aborted).toBe(true);
  });

  it("a leader paused past its deadline (no timer ran) reads as not leading the moment it looks", async () => {
    // A clock whose timers never fire: the process is paused, its time moves on.
    let now = 0;
    const frozenTimers = { now: () => now, setTimer: () => () => undefined };
    const store = new InMemoryStore(types, { clock: frozenTimers });
    const leadership = new Leadership({
      store,
      name: "east",
      holder: "a",
      durationMs: 9_000,
      logger: silentLogger,
      clock: frozenTimers,
    });
    const stop = new AbortController();
    stops.push(stop);
    void leadership.run(stop.signal, () => new Promise(() => undefined));
    await settle();
    expect(leadership.fence()).toEqual({ lease: "east", revision: 1 });
    now = 5_999;
    expect(leadership.leads()).toBe(true);
    now = 6_000;
    expect(leadership.leads()).toBe(false);
    expect(leadership.fence()).toBeUndefined();
  });

  it("a standby's writes are refused naming the leader's address; the leader's are fenced by its term", async () => {
    const clock = new ManualClock();
    const store = new InMemoryStore(types, { clock });
    const a = replica(store, clock, "a");
    await settle();
    const b = replica(store, clock, "b");
    await advance(clock, 1_000);
    const onA = fencedStore(store, a.leadership);
    const onB = fencedStore(store, b.leadership);
    await onA.put(dataplane("dp-1"));
    let refused: unknown;
    try {
      await onB.apply([{ op: "put", input: dataplane("dp-2") }]);
    } catch (error) {
      refused = error;
    }
    expect(KdsError.is(refused, "not_leader")).toBe(true);
    expect((refused as Error).message).toContain("http://admin-of-a");
    // Reads work on the standby.
    expect((await onB.list("Dataplane")).resources.map((r) => r.meta.name)).toEqual(["dp-1"]);
    // A write of the leader's term that reaches the store after another term began is refused by the store.
    const fence = a.leadership.fence();
    if (fence === undefined) throw new Error("a leads");
    a.stop.abort();
    await a.running;
    await advance(clock, 1_100);
    expect(b.leadership.leads()).toBe(true);
    let stale: unknown;
    try {
      await store.put(dataplane("dp-3"), { fence });
    } catch (error) {
      stale = error;
    }
    expect(KdsError.is(stale, "not_leader")).toBe(true);
    expect((await store.list("Dataplane")).resources.map((r) => r.meta.name)).toEqual(["dp-1"]);
  });
});

describe("a zone client of a replica", () => {
  it("does not dial while mayDial says no, and run returns", async () => {
    let opened = 0;
    const transport: MuxTransport = {
      name: "counting",
      open: () => {
        opened++;
        return Promise.reject(new KdsError("transport", "nothing listens"));
      },
    };
    const client = new ZoneClient({
      name: "east",
      transport,
      logger: silentLogger,
      mayDial: () => false,
    });
    let refused: unknown;
    try {
      await client.dial();
    } catch (error) {
      refused = error;
    }
    expect(KdsError.is(refused, "not_leader")).toBe(true);
    await client.run(new AbortController().signal);
    expect(opened).toBe(0);
  });
});
