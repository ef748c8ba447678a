// One test per rule of the discovery server, for SotW and for delta. The
// server runs on a manual clock; "nothing more is sent" is checked with
// s.waiting() once the server has settled (see fixtures.ts), never by
// waiting N ms for silence.
import { describe, expect, it } from "vitest";
import { toBinary } from "@bufbuild/protobuf";
import {
  DeltaDiscoveryResponseSchema,
  DiscoveryResponseSchema,
  type DeltaDiscoveryResponse,
} from "../../src/gen/kds/v1/discovery_pb.ts";
import { DiscoveryServer } from "../../src/discovery/server.ts";
import { FakeSource, T, startServer } from "./fixtures.ts";

/** A delta response's resources as `name@version`, in the order it carried them. */
const upserts = (response: DeltaDiscoveryResponse | undefined): string[] | undefined =>
  response?.resources.map((r) => `${r.name}@${r.version}`);

describe("discovery server, state of the world", () => {
  it("answers a subscription, takes an ACK, and never resends an unchanged set", async () => {
    const source = new FakeSource();
    source.set("a", "1");
    source.set("b", "1");
    const s = startServer(source);
    try {
      await s.sotw();
      const r1 = await s.recvSotw();
      expect(r1?.typeUrl).toBe(T);
      expect(r1?.resources).toHaveLength(2);
      await s.sotw({ versionInfo: r1?.versionInfo, responseNonce: r1?.nonce });
      source.set("a", "1"); // same version: the set is unchanged
      expect(await s.waiting()).toBe(0);
      expect(s.recorded.sent).toBe(1);
      expect(s.recorded.acked).toEqual([r1?.versionInfo]);
      source.set("a", "2");
      const r2 = await s.recvSotw();
      expect(r2?.versionInfo).not.toBe(r1?.versionInfo);
      expect(r2?.nonce).not.toBe(r1?.nonce);
    } finally {
      await s.close();
    }
  });

  it("keeps one response in flight and ignores ACKs with a stale nonce", async () => {
    const source = new FakeSource();
    source.set("a", "1");
    const s = startServer(source);
    try {
      await s.sotw();
      const r1 = await s.recvSotw();
      source.set("a", "2");
      source.set("a", "3");
      expect(await s.waiting()).toBe(0); // r1 is not ACKed yet: nothing else leaves
      await s.sotw({ versionInfo: r1?.versionInfo, responseNonce: "not-a-nonce" });
      expect(await s.waiting()).toBe(0); // a stale nonce ACKs nothing
      await s.sotw({ versionInfo: r1?.versionInfo, responseNonce: r1?.nonce });
      const r2 = await s.recvSotw();
      expect(r2?.resources).toHaveLength(1);
      expect(s.recorded.sent).toBe(2);
    } finally {
      await s.close();
    }
  });

  it("after a NACK, resends only once the backoff has passed", async () => {
    const source = new FakeSource();
    source.set("a", "1");
    const s = startServer(source, { nackBackoffMs: 1_000 });
    try {
      await s.sotw();
      const r1 = await s.recvSotw();
      await s.sotw({ versionInfo: "", responseNonce: r1?.nonce, error: "bad spec" });
      expect(await s.waiting()).toBe(0);
      s.advance(999);
      expect(await s.waiting()).toBe(0); // 1 ms before the backoff ends
      s.advance(1);
      expect(await s.waiting()).toBe(1);
      const r2 = await s.recvSotw();
      expect(r2?.versionInfo).toBe(r1?.versionInfo);
      expect(r2?.nonce).not.toBe(r1?.nonce);
      expect(s.recorded.nacked).toEqual(["bad spec"]);
    } finally {
      await s.close();
    }
  });

  it("reports a set too large for one message instead of sending it", async () => {
    const source = new FakeSource();
    for (let i = 0; i < 10; i++) source.set(`r${i}`, "1", 1_000);
    const s = startServer(source, { maxMessageBytes: 8_000 });
    try {
      await s.sotw();
      expect(await s.waiting()).toBe(0);
      expect(s.recorded.oversized).toEqual(["*"]);
      for (let i = 5; i < 10; i++) source.delete(`r${i}`);
      const r = await s.recvSotw();
      expect(r?.resources).toHaveLength(5);
      expect(s.zone.end).toBeUndefined();
    } finally {
      await s.close();
    }
  });

  it("sends a set that fits the maximum with its envelope, however small the maximum", async () => {
    const source = new FakeSource();
    source.set("fits", "1", 1_200);
    const max = 1_600;
    const s = startServer(source, { maxMessageBytes: max });
    try {
      await s.sotw();
      const r = await s.recvSotw();
      expect(r?.resources).toHaveLength(1);
      expect(toBinary(DiscoveryResponseSchema, r).byteLength).toBeLessThanOrEqual(max);
      expect(s.recorded.oversized).toEqual([]);
    } finally {
      await s.close();
    }
  });

  it("reports a set of more than maxResponseResources resources instead of sending it (the client would NACK it)", async () => {
    const source = new FakeSource();
    for (let i = 0; i < 6; i++) source.set(`r${i}`, "1");
    const s = startServer(source, { maxResponseResources: 5 });
    try {
      await s.sotw();
      expect(await s.waiting()).toBe(0);
      expect(s.recorded.sent).toBe(0);
      expect(s.recorded.oversized).toEqual(["*"]);
      source.delete("r5");
      const r = await s.recvSotw();
      expect(r?.resources).toHaveLength(5);
    } finally {
      await s.close();
    }
  });

  it("reports a response not ACKed in time once and keeps waiting for its answer, sending nothing again", async () => {
    // The session delivers every frame in order: a late answer is a slow peer (a global whose store write takes
    // longer than the timeout). A resend would queue a copy behind the original and make the original's ACK stale.
    const source = new FakeSource();
    source.set("a", "1");
    const s = startServer(source, { ackTimeoutMs: 200 });
    try {
      await s.sotw();
      const r1 = await s.recvSotw();
      s.advance(200);
      expect(await s.waiting()).toBe(0); // not late yet
      expect(s.recorded.stalled).toEqual([]);
      s.advance(1);
      expect(await s.waiting()).toBe(0); // late: reported, nothing sent again
      expect(s.recorded.stalled).toEqual([r1?.nonce]);
      s.advance(1000);
      expect(await s.waiting()).toBe(0);
      expect(s.recorded.stalled).toEqual([r1?.nonce]); // reported once
      await s.sotw({ versionInfo: r1?.versionInfo, responseNonce: r1?.nonce }); // the late ACK counts
      expect(await s.waiting()).toBe(0);
      expect(s.recorded.acked).toEqual([r1?.versionInfo]);
      expect(s.recorded.sent).toBe(1);
      // What changes meanwhile goes as usual once the ACK came.
      source.set("b", "1");
      const r2 = await s.recvSotw();
      expect(r2?.resources).toHaveLength(2);
    } finally {
      await s.close();
    }
  });

  it("does not resend a type fetched once (the kind catalog) when its ACK is late, and takes the late ACK as stale", async () => {
    const source = new FakeSource();
    source.set("a", "1");
    const s = startServer(source, { ackTimeoutMs: 200 }, source.typeUrls);
    try {
      await s.sotw();
      const r1 = await s.recvSotw();
      s.advance(201);
      expect(await s.waiting()).toBe(0); // late, but nothing is sent again
      expect(s.recorded.stalled).toEqual([r1?.nonce]);
      await s.sotw({ versionInfo: r1?.versionInfo, responseNonce: r1?.nonce });
      expect(await s.waiting()).toBe(0);
      expect(s.recorded.nacked).toEqual([]);
      expect(s.recorded.sent).toBe(1);
      // A new request is answered as any other.
      await s.sotw();
      expect((await s.recvSotw())?.resources).toHaveLength(1);
    } finally {
      await s.close();
    }
  });
});

// Every delta rule holds however the source gives its set: later (the server awaits it) or at once.
describe.each([
  ["a set given later", false],
  ["a set given at once (snapshotNow)", true],
])("discovery server, delta, %s", (_how, now) => {
  it("sends only what changed, and removals as removed_resources", async () => {
    const source = new FakeSource({ now });
    source.set("a", "1");
    source.set("b", "1");
    source.set("c", "1");
    const s = startServer(source);
    try {
      await s.delta({ subscribe: ["*"] });
      const r1 = await s.recvDelta();
      expect(r1?.resources.map((r) => r.name).sort()).toEqual(["a", "b", "c"]);
      await s.delta({ nonce: r1?.nonce });
      source.set("b", "2");
      const r2 = await s.recvDelta();
      expect(upserts(r2)).toEqual(["b@2"]);
      await s.delta({ nonce: r2?.nonce });
      source.delete("c");
      const r3 = await s.recvDelta();
      expect(r3?.resources).toHaveLength(0);
      expect(r3?.removedResources).toEqual(["c"]);
      await s.delta({ nonce: r3?.nonce });
      expect(await s.waiting()).toBe(0);
      expect(s.recorded.sent).toBe(3);
    } finally {
      await s.close();
    }
  });

  it("still takes a timed-out response of a type fetched once as held after the next response's ACK", async () => {
    const source = new FakeSource({ now });
    source.set("a", "1");
    const s = startServer(source, { ackTimeoutMs: 200 }, source.typeUrls);
    try {
      await s.delta({ subscribe: ["*"] });
      const r1 = await s.recvDelta();
      expect(upserts(r1)).toEqual(["a@1"]);
      s.advance(201); // r1 times out and is not sent again: the client is taken to hold a@1
      expect(await s.waiting()).toBe(0);
      source.set("b", "1");
      const r2 = await s.recvDelta();
      expect(upserts(r2)).toEqual(["b@1"]);
      await s.delta({ nonce: r2?.nonce }); // the only response in flight; the server still counts on a@1
      expect(await s.waiting()).toBe(0);
      source.set("a", "1"); // looked at again, unchanged: nothing to send
      expect(await s.waiting()).toBe(0);
      source.set("a", "2");
      const r3 = await s.recvDelta();
      expect(upserts(r3)).toEqual(["a@2"]);
      await s.delta({ nonce: r3?.nonce });
      source.delete("b"); // known since r2 was sent, nothing in flight: its removal is sent
      const r4 = await s.recvDelta();
      expect(r4?.removedResources).toEqual(["b"]);
      await s.delta({ nonce: r4?.nonce });
      expect(await s.waiting()).toBe(0);
      expect(s.recorded.sent).toBe(4);
    } finally {
      await s.close();
    }
  });

  it("takes an option given as undefined as its default, as if absent", async () => {
    const source = new FakeSource({ now });
    source.set("a", "1");
    source.set("b", "1");
    // What a caller passing its own optional settings through writes; this threw invalid_argument on every stream.
    const s = startServer(source, {
      maxResponseResources: undefined,
      deltaResponseBytes: undefined,
      maxDeltaInFlight: undefined,
      maxMessageBytes: undefined,
    });
    try {
      await s.delta({ subscribe: ["*"] });
      const r1 = await s.recvDelta();
      expect(r1?.resources.map((r) => r.name).sort()).toEqual(["a", "b"]);
    } finally {
      await s.close();
    }
  });

  it("resumes from initial_resource_versions: only the difference crosses", async () => {
    const source = new FakeSource({ now });
    source.set("a", "1");
    source.set("b", "2");
    source.set("c", "1");
    const s = startServer(source);
    try {
      await s.delta({ subscribe: ["*"], initial: { a: "1", b: "1", gone: "7" } });
      const r = await s.recvDelta();
      expect(r?.resources.map((x) => `${x.name}@${x.version}`).sort()).toEqual(["b@2", "c@1"]);
      expect(r?.removedResources).toEqual(["gone"]);
    } finally {
      await s.close();
    }
  });

  it("splits a large change into responses no larger than the maximum, one in flight at a time", async () => {
    const source = new FakeSource({ now });
    for (let i = 0; i < 40; i++) source.set(`r${String(i).padStart(2, "0")}`, "1", 400);
    const max = 4_096;
    const s = startServer(source, { maxMessageBytes: max, maxDeltaInFlight: 1 });
    try {
      await s.delta({ subscribe: ["*"] });
      const names = new Set<string>();
      let responses = 0;
      while ((await s.waiting()) > 0) {
        expect(responses).toBeLessThan(40); // at least one resource per response
        const r = await s.recvDelta();
        responses++;
        expect(toBinary(DeltaDiscoveryResponseSchema, r).byteLength).toBeLessThanOrEqual(max);
        expect(await s.waiting()).toBe(0); // the next chunk waits for this ACK
        for (const x of r.resources) names.add(x.name);
        await s.delta({ nonce: r.nonce });
      }
      expect(responses).toBeGreaterThan(4);
      expect(names.size).toBe(40);
    } finally {
      await s.close();
    }
  });

  it("keeps up to maxDeltaInFlight parts of a split change in flight, never resending a part", async () => {
    const source = new FakeSource({ now });
    for (let i = 0; i < 40; i++) source.set(`r${String(i).padStart(2, "0")}`, "1", 400);
    const s = startServer(source, { maxMessageBytes: 4_096, maxDeltaInFlight: 2 });
    try {
      await s.delta({ subscribe: ["*"] });
      const first = await s.recvDelta();
      const second = await s.recvDelta();
      expect(await s.waiting()).toBe(0); // a third waits for an ACK
      const seen = new Set<string>();
      for (const r of [...(first?.resources ?? []), ...(second?.resources ?? [])]) seen.add(r.name);
      expect(seen.size).toBe((first?.resources.length ?? 0) + (second?.resources.length ?? 0));
      await s.delta({ nonce: first?.nonce });
      // A resource of the unsent rest is deleted, and one already in flight too: removals follow.
      source.delete("r39");
      source.delete(second?.resources[0]?.name ?? "");
      await s.delta({ nonce: second?.nonce });
      let pending = 0;
      while ((await s.waiting()) > 0) {
        expect(pending).toBeLessThan(40);
        const r = await s.recvDelta();
        for (const x of r.resources) {
          expect(seen.has(x.name)).toBe(false);
          seen.add(x.name);
        }
        for (const gone of r.removedResources) seen.delete(gone);
        pending++;
        await s.delta({ nonce: r.nonce });
      }
      expect(pending).toBeGreaterThan(0);
      expect(seen.size).toBe(38);
      expect(seen.has("r39")).toBe(false);
    } finally {
      await s.close();
    }
  });

  it("closes a response at deltaResponseBytes; a larger resource goes alone, up to the maximum", async () => {
    const source = new FakeSource({ now });
    for (let i = 0; i < 20; i++) source.set(`r${String(i).padStart(2, "0")}`, "1", 400);
    source.set("big", "1", 3_000); // larger than the target, smaller than the maximum
    const max = 8_192;
    const target = 2_048;
    const s = startServer(source, {
      maxMessageBytes: max,
      deltaResponseBytes: target,
      maxDeltaInFlight: 64,
    });
    try {
      await s.delta({ subscribe: ["*"] });
      const waiting = await s.waiting();
      expect(waiting).toBeGreaterThan(5); // every part left without waiting for an ACK
      const names: string[] = [];
      for (let i = 0; i < waiting; i++) {
        const r = await s.recvDelta();
        const bytes = toBinary(DeltaDiscoveryResponseSchema, r).byteLength;
        if (r.resources.some((x) => x.name === "big")) {
          expect(r.resources).toHaveLength(1);
          expect(bytes).toBeLessThanOrEqual(max);
        } else expect(bytes).toBeLessThanOrEqual(target);
        names.push(...r.resources.map((x) => x.name));
      }
      expect(names.sort()).toEqual([...source.resources.keys()].sort());
    } finally {
      await s.close();
    }
  });

  it("closes a response at maxResponseResources resources plus removals, however small they are", async () => {
    const source = new FakeSource({ now });
    for (let i = 0; i < 10; i++) source.set(`r${i}`, "1", 20);
    // The client holds 13 keys the source no longer has: 13 removals to send too.
    const initial = Object.fromEntries(Array.from({ length: 13 }, (_, i) => [`gone-${i}`, "1"]));
    const s = startServer(source, { maxResponseResources: 4, maxDeltaInFlight: 64 });
    try {
      await s.delta({ subscribe: ["*"], initial });
      const waiting = await s.waiting();
      expect(waiting).toBe(6); // 23 entries, at most 4 per response
      const names: string[] = [];
      const removed: string[] = [];
      for (let i = 0; i < waiting; i++) {
        const r = await s.recvDelta();
        expect(r.resources.length + r.removedResources.length).toBeLessThanOrEqual(4);
        names.push(...r.resources.map((x) => x.name));
        removed.push(...r.removedResources);
      }
      expect(names.sort()).toEqual([...source.resources.keys()].sort());
      expect(removed.sort()).toEqual(Object.keys(initial).sort());
    } finally {
      await s.close();
    }
  });

  it("streams a split change while its resources keep changing: each version once, nothing stale left", async () => {
    const source = new FakeSource({ now });
    const key = (i: number): string => `r${String(i).padStart(2, "0")}`;
    for (let i = 0; i < 40; i++) source.set(key(i), "1", 400);
    const s = startServer(source, {
      maxMessageBytes: 8_192,
      deltaResponseBytes: 1_024,
      maxDeltaInFlight: 3,
    });
    try {
      await s.delta({ subscribe: ["*"] });
      const held = new Map<string, string>();
      const sent = new Set<string>();
      for (let round = 0; (await s.waiting()) > 0; round++) {
        expect(round).toBeLessThan(200);
        const r = await s.recvDelta();
        for (const x of r.resources) {
          expect(sent.has(`${x.name}@${x.version}`)).toBe(false); // never resent
          sent.add(`${x.name}@${x.version}`);
          held.set(x.name, x.version);
        }
        for (const gone of r.removedResources) held.delete(gone);
        // Change one resource already sent and one not sent yet; delete one; add one.
        if (round === 2) {
          source.set(key(0), "2", 400);
          source.set(key(39), "2", 400);
          source.delete(key(38));
          source.set("new", "1", 400);
        }
        await s.delta({ nonce: r.nonce });
      }
      expect(held).toEqual(new Map([...source.resources.values()].map((x) => [x.key, x.version])));
      expect(held.get(key(0))).toBe("2");
      expect(held.get(key(39))).toBe("2");
      expect(held.has(key(38))).toBe(false);
    } finally {
      await s.close();
    }
  });

  it("never sends the unsent rest of a split change as it was once the set changed: a deleted resource not at all, a changed one only at its new version", async () => {
    const source = new FakeSource({ now });
    const key = (i: number): string => `r${String(i).padStart(2, "0")}`;
    for (let i = 0; i < 40; i++) source.set(key(i), "1", 400);
    const s = startServer(source, { maxMessageBytes: 4_096, maxDeltaInFlight: 1 });
    try {
      await s.delta({ subscribe: ["*"] });
      const first = await s.recvDelta();
      const sent = new Set(first.resources.map((x) => x.name));
      expect(sent.has(key(38)) || sent.has(key(39))).toBe(false);
      // Both are in the rest of the full diff, not sent yet.
      source.delete(key(38));
      source.set(key(39), "2", 400);
      await s.delta({ nonce: first.nonce });
      const versions: string[] = [];
      const removed: string[] = [];
      for (let round = 0; (await s.waiting()) > 0; round++) {
        expect(round).toBeLessThan(40);
        const r = await s.recvDelta();
        for (const x of r.resources) {
          if (x.name === key(38)) throw new Error(`${key(38)} was sent after it was deleted`);
          if (x.name === key(39)) versions.push(x.version);
          sent.add(x.name);
        }
        removed.push(...r.removedResources);
        await s.delta({ nonce: r.nonce });
      }
      expect(versions).toEqual(["2"]);
      expect(removed).toEqual([]); // never sent, so nothing to remove
      expect(sent.size).toBe(39);
    } finally {
      await s.close();
    }
  });

  it("after an ACK, counts on the newer version a later response in flight carries", async () => {
    const source = new FakeSource({ now });
    source.set("a", "1");
    const s = startServer(source, { maxDeltaInFlight: 2 });
    try {
      await s.delta({ subscribe: ["*"] });
      const r1 = await s.recvDelta();
      source.set("a", "2");
      const r2 = await s.recvDelta();
      expect(r2.resources.map((x) => `${x.name}@${x.version}`)).toEqual(["a@2"]);
      await s.delta({ nonce: r1.nonce });
      // A full diff (the subscription is restated) with r2 still in flight: a@2 is on its way, nothing to send.
      await s.delta({ subscribe: ["*"] });
      expect(await s.waiting()).toBe(0);
      await s.delta({ nonce: r2.nonce });
      source.set("b", "1");
      const r3 = await s.recvDelta();
      expect(r3.resources.map((x) => `${x.name}@${x.version}`)).toEqual(["b@1"]);
    } finally {
      await s.close();
    }
  });

  it("reports a single resource larger than the maximum and sends the rest", async () => {
    const source = new FakeSource({ now });
    source.set("small", "1", 100);
    source.set("huge", "1", 10_000);
    const s = startServer(source, { maxMessageBytes: 4_096 });
    try {
      await s.delta({ subscribe: ["*"] });
      const r = await s.recvDelta();
      expect(r?.resources.map((x) => x.name)).toEqual(["small"]);
      expect(s.recorded.oversized).toEqual(["huge"]);
      await s.delta({ nonce: r?.nonce });
      source.set("huge", "2", 100); // fits now
      expect((await s.recvDelta())?.resources.map((x) => x.name)).toEqual(["huge"]);
      expect(s.zone.end).toBeUndefined();
    } finally {
      await s.close();
    }
  });

  it("sends a resource that fits the maximum with its envelope, however small the maximum (a fixed 1 KiB reserve left it unsent)", async () => {
    const source = new FakeSource({ now });
    source.set("fits", "1", 1_200);
    source.set("huge", "1", 1_600);
    const max = 1_600;
    const s = startServer(source, { maxMessageBytes: max });
    try {
      await s.delta({ subscribe: ["*"] });
      const r = await s.recvDelta();
      expect(r?.resources.map((x) => x.name)).toEqual(["fits"]);
      expect(toBinary(DeltaDiscoveryResponseSchema, r).byteLength).toBeLessThanOrEqual(max);
      expect(s.recorded.oversized).toEqual(["huge"]);
    } finally {
      await s.close();
    }
  });

  it("applies subscription changes even with a stale nonce", async () => {
    const source = new FakeSource({ now });
    source.set("a", "1");
    source.set("b", "1");
    const s = startServer(source);
    try {
      await s.delta({ subscribe: ["a"] });
      const r1 = await s.recvDelta();
      expect(r1?.resources.map((x) => x.name)).toEqual(["a"]);
      await s.delta({ nonce: r1?.nonce });
      await s.delta({ nonce: "stale", subscribe: ["b"] });
      expect((await s.recvDelta())?.resources.map((x) => x.name)).toEqual(["b"]);
    } finally {
      await s.close();
    }
  });

  /** Runs `body` once a client subscribed to a and b has r1 (a@1, b@1), not answered yet. */
  async function withTwoSent(
    body: (
      s: ReturnType<typeof startServer>,
      source: FakeSource,
      r1: DeltaDiscoveryResponse,
    ) => Promise<void>,
  ): Promise<void> {
    const source = new FakeSource({ now });
    source.set("a", "1");
    source.set("b", "1");
    const s = startServer(source);
    try {
      await s.delta({ subscribe: ["a", "b"] });
      const r1 = await s.recvDelta();
      expect(upserts(r1)).toEqual(["a@1", "b@1"]);
      await body(s, source, r1);
    } finally {
      await s.close();
    }
  }

  it("resends a resource the client unsubscribed from and subscribes to again, after its response was ACKed", () =>
    withTwoSent(async (s, _source, r1) => {
      await s.delta({ nonce: r1.nonce });
      await s.delta({ unsubscribe: ["a"] }); // the client forgets a, and so does the server
      expect(await s.waiting()).toBe(0);
      await s.delta({ subscribe: ["a"] });
      expect(upserts(await s.recvDelta())).toEqual(["a@1"]);
    }));

  it("still removes a resource the client unsubscribed from while a response carrying it was in flight", () =>
    withTwoSent(async (s, source, r1) => {
      // Unsubscribed before r1 is answered: the client may still apply r1, and so hold a.
      await s.delta({ unsubscribe: ["a"] });
      await s.delta({ nonce: r1.nonce });
      expect(await s.waiting()).toBe(0); // both requests taken, nothing to send
      source.delete("a");
      const r2 = await s.recvDelta();
      expect(r2.removedResources).toEqual(["a"]);
      expect(upserts(r2)).toEqual([]);
    }));

  it("after a NACK keeps the client's versions and resends after the backoff", async () => {
    const source = new FakeSource({ now });
    source.set("a", "1");
    const s = startServer(source, { nackBackoffMs: 500 });
    try {
      await s.delta({ subscribe: ["*"] });
      const r1 = await s.recvDelta();
      await s.delta({ nonce: r1?.nonce, error: "rejected" });
      expect(await s.waiting()).toBe(0);
      s.advance(499);
      expect(await s.waiting()).toBe(0); // 1 ms before the backoff ends
      s.advance(1);
      const r2 = await s.recvDelta();
      expect(r2?.resources.map((x) => `${x.name}@${x.version}`)).toEqual(["a@1"]);
      expect(s.recorded.nacked).toEqual(["rejected"]);
    } finally {
      await s.close();
    }
  });

  it("after a NACK, still removes what a later response in flight may have delivered (the client applies each response on its own)", async () => {
    const source = new FakeSource({ now });
    source.set("a", "1");
    const s = startServer(source, { maxDeltaInFlight: 2, nackBackoffMs: 100 });
    try {
      await s.delta({ subscribe: ["*"] });
      const r1 = await s.recvDelta();
      source.set("b", "1");
      const r2 = await s.recvDelta();
      expect(r2.resources.map((x) => x.name)).toEqual(["b"]);
      // The client could not apply r1 (its store failed) but applied r2: it holds b, not a.
      await s.delta({ nonce: r1.nonce, error: "store unavailable" });
      await s.delta({ nonce: r2.nonce });
      source.delete("b");
      expect(await s.waiting()).toBe(0); // in the NACK's backoff
      s.advance(100);
      const held = new Set(["b"]);
      for (let round = 0; (await s.waiting()) > 0; round++) {
        expect(round).toBeLessThan(20);
        const r = await s.recvDelta();
        for (const x of r.resources) held.add(x.name);
        for (const gone of r.removedResources) held.delete(gone);
        await s.delta({ nonce: r.nonce });
      }
      expect([...held]).toEqual(["a"]);
    } finally {
      await s.close();
    }
  });
});

describe("discovery server, start", () => {
  it("rejects run, never throws from it, when the source fails at once", async () => {
    const source = new FakeSource();
    source.onChange = () => {
      throw new Error("the source cannot follow changes");
    };
    const view = {
      recv: () => new Promise<never>(() => undefined),
      send: () => Promise.resolve(),
    };
    const server = new DiscoveryServer({ view, source });
    const running = server.run(new AbortController().signal);
    await expect(running).rejects.toThrow(/cannot follow changes/);
  });
});
