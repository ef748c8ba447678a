// The observe layer's parts with an injected clock: the sync lag clocks per
// key, the store timing wrapper, and the outbox's time without credit.
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { describe, expect, it } from "vitest";
import type { Snapshot, SnapshotSource } from "../../src/discovery/types.ts";
import { KdsError } from "../../src/errors.ts";
import { Outbox } from "../../src/mux/outbox.ts";
import { requestFrame } from "../../src/mux/frames.ts";
import { noopMetrics, type Metrics } from "../../src/metrics.ts";
import { instrumentStore } from "../../src/observe/store.ts";
import { streamObservers } from "../../src/sync/sync-observers.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { request } from "../contract/harness.ts";
import { mesh } from "../sync/helpers.ts";

/** Records every event as a line. */
function recorder(): { metrics: Metrics; events: string[] } {
  const events: string[] = [];
  return {
    events,
    metrics: {
      ...noopMetrics,
      discovery: (event, peer, kind) => events.push(`${event} ${peer} ${kind}`),
      syncLag: (peer, kind, ms) => events.push(`lag ${peer} ${kind} ${ms}`),
      storeOperation: (op, ms, ok) => events.push(`store ${op} ${ms} ${ok ? "ok" : "error"}`),
      creditWait: (lane, ms) => events.push(`credit ${lane} ${ms}`),
    },
  };
}

/** A source whose changes the test fires by hand. */
function manualSource(): { source: SnapshotSource; change(typeUrl: string, key?: string): void } {
  let listener: ((typeUrl: string, key?: string) => void) | undefined;
  const empty: Snapshot = {
    version: "v",
    resources: { get: () => undefined, [Symbol.iterator]: () => [][Symbol.iterator]() },
  };
  return {
    source: {
      typeUrls: ["t"],
      snapshot: () => Promise.resolve(empty),
      onChange: (l) => {
        listener = l;
      },
    },
    change: (typeUrl, key) => listener?.(typeUrl, key),
  };
}

/** A stream's observers on a clock the test sets, with its source's changes fired by hand. */
function lagClocks(peer: string): {
  o: ReturnType<typeof streamObservers>;
  events: string[];
  change(typeUrl: string, key?: string): void;
  clock: { now: number };
} {
  const clock = { now: 0 };
  const { metrics, events } = recorder();
  const o = streamObservers(
    metrics,
    peer,
    () => "Mesh",
    () => clock.now,
  );
  const { source, change } = manualSource();
  o.source(source).onChange(() => undefined, new AbortController().signal);
  return { o, events, change, clock };
}

/** A delta response sent with `nonce`, carrying `keys`. */
function sent(o: ReturnType<typeof streamObservers>, nonce: string, keys: string[]): void {
  o.server.sent?.("t", {
    version: nonce,
    nonce,
    resources: keys.length,
    removed: 0,
    bytes: 1,
    keys,
  });
}

describe("sync lag clocks", () => {
  it("run from a key's first unsent change to the ACK of the delta response carrying it", () => {
    const { o, events, change, clock } = lagClocks("zone-1");
    change("t", "a"); // clock of a starts at 0
    clock.now = 5;
    change("t", "a"); // a second change of a keeps the earlier start
    change("t", "b"); // b starts at 5
    clock.now = 10;
    sent(o, "n1", ["a"]);
    clock.now = 30;
    o.server.acked?.("t", "1", "n1");
    expect(events).toEqual(["response zone-1 Mesh", "ack zone-1 Mesh", "lag zone-1 Mesh 30"]);
    sent(o, "n2", ["b"]);
    clock.now = 42;
    o.server.acked?.("t", "2", "n2");
    expect(events.at(-1)).toBe("lag zone-1 Mesh 37");
  });

  it("keep running across a NACK until a resend is ACKed", () => {
    const { o, events, change, clock } = lagClocks("z");
    change("t", "a");
    sent(o, "n1", ["a"]);
    clock.now = 100;
    o.server.nacked?.("t", "1", "bad", "n1");
    sent(o, "n2", ["a"]);
    clock.now = 250;
    o.server.acked?.("t", "1", "n2");
    expect(events.filter((e) => e.startsWith("lag") || e.startsWith("nack"))).toEqual([
      "nack z Mesh",
      "lag z Mesh 250",
    ]);
  });

  it("a state-of-the-world response carries every pending change of its type; stale ACKs measure nothing", () => {
    const { o, events, change, clock } = lagClocks("z");
    change("t", "a");
    clock.now = 4;
    change("t", "b");
    o.server.sent?.("t", { version: "1", nonce: "n1", resources: 2, removed: 0, bytes: 1 });
    clock.now = 10;
    o.server.acked?.("t", "0", "unknown-nonce");
    o.server.acked?.("t", "1", "n1");
    expect(events.filter((e) => e.startsWith("lag"))).toEqual(["lag z Mesh 10", "lag z Mesh 6"]);
  });

  it("a key's clock runs alone, beside others, and alone again; a NACK puts back its earlier start", () => {
    const { o, events, change, clock } = lagClocks("z");
    change("t", "a"); // a alone, from 0
    clock.now = 2;
    change("t", "b"); // a and b, from 0 and 2
    sent(o, "n1", ["b", "c"]); // carries b only
    clock.now = 5;
    sent(o, "n2", ["a"]);
    change("t", "c"); // c alone again, from 5
    clock.now = 9;
    o.server.nacked?.("t", "2", "bad", "n2"); // a runs again from 0, beside c
    sent(o, "n3", ["c", "a"]);
    clock.now = 20;
    o.server.acked?.("t", "1", "n1");
    o.server.acked?.("t", "3", "n3");
    expect(events.filter((e) => e.startsWith("lag"))).toEqual([
      "lag z Mesh 18",
      "lag z Mesh 15",
      "lag z Mesh 20",
    ]);
  });
});

describe("sync lag clocks, bounds", () => {
  it("keep the clocks of the last 64 responses of a type in flight: an older one's ACK measures nothing, the newer ones' do", () => {
    const { o, events, change, clock } = lagClocks("z");
    // 70 responses in flight at once (a server that started over leaves its old ones unanswered), each carrying one change.
    for (let i = 0; i < 70; i++) {
      change("t", `k${i}`);
      sent(o, `n${i}`, [`k${i}`]);
      clock.now++;
    }
    clock.now = 100;
    o.server.acked?.("t", "0", "n0"); // dropped: one of the 6 oldest
    o.server.acked?.("t", "5", "n5"); // dropped too
    o.server.acked?.("t", "6", "n6"); // kept: the oldest of the last 64
    o.server.acked?.("t", "69", "n69");
    expect(events.filter((e) => e.startsWith("lag"))).toEqual(["lag z Mesh 94", "lag z Mesh 31"]);
    // An ACK takes its response out of flight: a second one measures nothing.
    o.server.acked?.("t", "69", "n69");
    expect(events.filter((e) => e.startsWith("lag"))).toHaveLength(2);
  });

  it("a response sent while nothing is pending carries no clocks; a later change is measured by the response that carries it", () => {
    const { o, events, change, clock } = lagClocks("z");
    sent(o, "n1", ["a"]);
    change("t", "a");
    clock.now = 3;
    o.server.acked?.("t", "1", "n1"); // the response left before the change: no lag
    sent(o, "n2", ["a"]);
    clock.now = 8;
    o.server.acked?.("t", "2", "n2");
    expect(events).toEqual([
      "response z Mesh",
      "ack z Mesh",
      "response z Mesh",
      "ack z Mesh",
      "lag z Mesh 8",
    ]);
  });
});

describe("store timing", () => {
  it("times each asynchronous call by method name, success and failure, and keeps results", async () => {
    let now = 0;
    const { metrics, events } = recorder();
    const types = createTypeRegistry(exampleTypes);
    const store = instrumentStore(new InMemoryStore(types), metrics, () => (now += 2));
    const put = await store.put(mesh("default"));
    expect((await store.get("Mesh", "", "default"))?.meta.version).toBe(put.meta.version);
    await expect(store.put({ ...mesh("other"), kind: "Nope" })).rejects.toBeInstanceOf(KdsError);
    expect(events).toEqual(["store put 2 ok", "store get 2 ok", "store put 2 error"]);
  });
});

describe("time without credit", () => {
  it("is reported per lane when the peer's credit lets the waiting sends go", async () => {
    let now = 0;
    const { metrics, events } = recorder();
    const outbox = new Outbox(
      16,
      () => now,
      64,
      (lane, ms) => metrics.creditWait(lane, ms),
    );
    outbox.openLanes(
      { requests: 1, responses: 1 },
      { requests: 1 << 20, responses: 1 << 20 },
      1 << 20,
    );
    await outbox.send("requests", requestFrame(request("t", "1"))); // within the window
    now = 10;
    const waiting = outbox.send("requests", requestFrame(request("t", "2"))); // no credit left: waits from 10
    now = 70;
    expect(events).toEqual([]);
    outbox.addCredit(1, 0);
    await waiting;
    expect(events).toEqual(["credit requests 60"]);
  });
});
