// Credit in bytes as well as frames, checked when a frame arrives; the
// per-process memory budget; and the bound on pongs a ping flood can queue.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it, vi } from "vitest";
import { GoAwayReason, FrameSchema, PingSchema } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import {
  DeltaDiscoveryResponseSchema,
  DiscoveryRequestSchema,
  ResourceSchema,
} from "../../src/gen/kds/v1/discovery_pb.ts";
import { MemoryBudget, type BudgetHolder } from "../../src/mux/budget.ts";
import { creditSize } from "../../src/mux/frame-size.ts";
import { requestFrame, responseFrame } from "../../src/mux/frames.ts";
import { Inbox } from "../../src/mux/inbox.ts";
import { resolveSessionOptions } from "../../src/mux/options.ts";
import { Outbox } from "../../src/mux/outbox.ts";
import { MuxSession } from "../../src/mux/session.ts";
import {
  eventually,
  RawPeer,
  request,
  response,
  sessionPair,
  settle,
} from "../contract/harness.ts";

/** A request of exactly `bytes` bytes of credit (its encoded length). */
function requestOfSize(bytes: number, nonce: string): ReturnType<typeof request> {
  for (let pad = 0; pad < 8; pad++) {
    for (let n = Math.max(0, bytes - 40); n <= bytes; n++) {
      const r = create(DiscoveryRequestSchema, {
        typeUrl: `type.x${"y".repeat(pad)}`,
        responseNonce: nonce,
        resourceNames: ["n".repeat(n)],
      });
      if (creditSize(requestFrame(r)) === bytes) return r;
    }
  }
  throw new Error(`no request of exactly ${bytes} bytes`);
}

/** A request of about `bytes` bytes of credit (its resource names carry them). */
function bigRequest(bytes: number, nonce = ""): ReturnType<typeof request> {
  return create(DiscoveryRequestSchema, {
    typeUrl: "type.x",
    responseNonce: nonce,
    resourceNames: ["n".repeat(bytes)],
  });
}

describe("creditSize", () => {
  it("is the same for the frame a sender built and the frame its peer decoded, and counts what a peer can make large", () => {
    const frames = [
      responseFrame(response("type.ü", "nonce", 5000)),
      requestFrame(
        create(DiscoveryRequestSchema, {
          typeUrl: "t",
          resourceNames: ["a", "b"],
          node: {
            id: "z",
            metadata: { fields: { k: { kind: { case: "stringValue", value: "v".repeat(300) } } } },
          },
        }),
      ),
    ];
    for (const frame of frames) {
      const decoded = fromBinary(FrameSchema, toBinary(FrameSchema, frame));
      expect(creditSize(decoded)).toBe(creditSize(frame));
    }
    expect(creditSize(frames[0]!)).toBeGreaterThan(5000);
    expect(creditSize(frames[1]!)).toBeGreaterThan(300); // free-form node metadata counts too
    // Fields this version does not know (a hostile or newer peer) still count.
    const known = toBinary(FrameSchema, requestFrame(request("t")));
    const unknownField = new Uint8Array([0xfa, 0x3e, 0x90, 0x4e, ...new Uint8Array(10_000)]); // field 999 (length-delimited), 10000 bytes
    const withUnknown = fromBinary(FrameSchema, new Uint8Array([...known, ...unknownField]));
    expect(creditSize(withUnknown)).toBeGreaterThan(10_000);
  });
});

describe("byte credit", () => {
  it("holds a sender back by bytes even with frames of window left, and lets it go as the receiver consumes", async () => {
    const windowBytes = 16 * 1024;
    const { zone, global } = sessionPair(
      { maxMessageBytes: 8 * 1024, responseWindowBytes: windowBytes },
      {},
    );
    await zone.ready;
    await global.ready;
    expect(global.peer?.responseWindowBytes).toBe(windowBytes);
    const sent = Array.from({ length: 10 }, (_, i) =>
      global.server.send(response("type.big", String(i), 5000)),
    );
    const settled = sent.map(() => false);
    sent.forEach((p, i) => void p.then(() => (settled[i] = true)));
    await eventually(
      () => zone.stats().buffered.responses === 3,
      "three 5 KB responses fill the 16 KiB window",
    );
    await new Promise((r) => setTimeout(r, 50));
    expect(zone.stats().buffered.responses).toBe(3);
    expect(zone.stats().bufferedBytes.responses).toBeLessThanOrEqual(windowBytes);
    expect(settled.filter(Boolean).length).toBe(3); // frames window is 64: only bytes hold the rest back
    for (let i = 0; i < 10; i++)
      expect(((await zone.client.recv()) as { nonce: string }).nonce).toBe(String(i));
    await Promise.all(sent);
    expect(zone.end).toBeUndefined();
    await zone.close();
  });

  it("refuses a frame larger than the peer's whole byte window instead of waiting forever; the session goes on", async () => {
    const outbox = new Outbox(16, () => 0);
    outbox.openLanes({ requests: 8, responses: 8 }, { requests: 2048, responses: 2048 }, 1 << 20);
    await expect(outbox.send("requests", requestFrame(bigRequest(4096)))).rejects.toMatchObject({
      code: "message_too_large",
    });
    await outbox.send("requests", requestFrame(bigRequest(1000)));
  });

  it("ends the session with PROTOCOL_ERROR the moment a peer sends past its byte credit, naming the window", async () => {
    const session = new MuxSession({
      role: "global",
      localId: "global",
      peerId: "zone-1",
      options: { maxMessageBytes: 4096, requestWindowBytes: 8192 },
    });
    const peer = new RawPeer(session);
    peer.hello("zone-1", 64, 1 << 20);
    for (let i = 0; i < 3; i++) peer.write({ case: "request", value: bigRequest(3000, String(i)) });
    const end = await session.closed;
    expect(end.code).toBe("protocol_error");
    expect(end.message).toMatch(/overran the requests byte window: .*window 8192 bytes/);
    expect(session.stats().received.requests).toBe(3); // the third, not some later frame, ended it
    const goaway = await peer.readUntil("goaway");
    expect(goaway?.value.case === "goaway" && goaway.value.value.reason).toBe(
      GoAwayReason.PROTOCOL_ERROR,
    );
    peer.end();
  });

  it("ends the session when a peer sends past its frame credit although the buffer has room (credit not yet returned)", async () => {
    const session = new MuxSession({
      role: "global",
      localId: "global",
      peerId: "zone-1",
      options: { requestWindow: 8 },
    });
    const peer = new RawPeer(session);
    peer.hello("zone-1", 64, 1 << 20);
    for (let i = 0; i < 8; i++)
      peer.write({ case: "request", value: request("type.x", String(i)) });
    await eventually(
      () => session.stats().buffered.requests === 8,
      "the window's 8 requests arrive",
    );
    await session.server.recv(); // one taken: the buffer has room, but credit goes back in quarters of the window
    peer.write({ case: "request", value: request("type.x", "9") });
    const end = await session.closed;
    expect(end.code).toBe("protocol_error");
    expect(end.message).toMatch(
      /overran the requests window: frame 9 of this lane arrived with 8 frames granted in all \(window 8 frames\)/,
    );
    peer.end();
  });

  it("ends a peer that overruns its byte window by one byte with PROTOCOL_ERROR naming the window, whatever the consumer took", async () => {
    const windowBytes = 4096;
    const session = new MuxSession({
      role: "global",
      localId: "global",
      peerId: "zone-1",
      options: { maxMessageBytes: 4096, requestWindowBytes: windowBytes },
    });
    const peer = new RawPeer(session);
    peer.hello("zone-1", 64);
    // Three requests of exactly the window's bytes, by encoded length; then, with one of them consumed, one byte more than is left.
    for (const [i, bytes] of [1500, 1500, 1096].entries())
      peer.write({ case: "request", value: requestOfSize(bytes, String(i)) });
    await eventually(
      () => session.stats().buffered.requests === 3,
      "the window's 4096 bytes arrive",
    );
    expect(session.stats().bufferedBytes.requests).toBe(windowBytes);
    expect(session.end).toBeUndefined();
    await session.server.recv(); // consumed: its credit goes back only through a window update, which the peer has not had
    peer.write({ case: "request", value: requestOfSize(1501, "x") });
    const end = await session.closed;
    expect(end.code).toBe("protocol_error");
    expect(end.message).toMatch(
      /overran the requests byte window: a frame of 1501 bytes arrived with \d+ bytes of credit left/,
    );
    expect(end.message).toMatch(/window 4096 bytes/);
    peer.end();
  });

  it("ends a peer whose control frame holds too many elements (a ping of 600,000 unknown fields), even where the transport decoded it", async () => {
    const session = new MuxSession({ role: "global", localId: "global", peerId: "zone-1" });
    const peer = new RawPeer(session);
    peer.hello("zone-1", 64);
    await session.ready;
    const unknown = Array.from({ length: 600_000 }, () => ({
      no: 2,
      wireType: 0,
      data: new Uint8Array([0]),
    }));
    peer.write({ case: "ping", value: { ...create(PingSchema, { id: 1n }), $unknown: unknown } });
    const end = await session.closed;
    expect(end.code).toBe("protocol_error");
    expect(end.message).toMatch(/the peer sent a ping frame: .*over the 524288 a frame may hold/);
    peer.end();
  });

  it("refuses a hello that grants no byte windows (protocol version 2 requires them)", async () => {
    const session = new MuxSession({ role: "global", localId: "global", peerId: "zone-1" });
    const peer = new RawPeer(session);
    peer.hello("zone-1", 64, 0);
    const end = await session.closed;
    expect(end.code).toBe("protocol_error");
    expect(end.message).toMatch(/must grant both byte windows/);
    peer.end();
  });

  it("refuses a frame that would decode to far more than its length (empty messages), before it is buffered", async () => {
    const session = new MuxSession({ role: "zone", localId: "zone-1", peerId: "global" });
    const peer = new RawPeer(session);
    peer.hello("global", 64);
    await session.ready;
    const dense = create(DeltaDiscoveryResponseSchema, {
      typeUrl: "t",
      nonce: "1",
      resources: Array.from({ length: 100_000 }, () => create(ResourceSchema)),
    });
    expect(creditSize(responseFrame(dense))).toBeLessThan(1 << 20); // within the window and the frame limit: only its density is wrong
    peer.write({ case: "deltaResponse", value: dense });
    const end = await session.closed;
    expect(end.code).toBe("protocol_error");
    expect(end.message).toMatch(
      /decodes to an estimated \d+ bytes of objects, over 16 times its length/,
    );
    expect(session.stats().bufferedBytes.responses).toBe(0);
    peer.end();
  });

  it("ends a peer whose unconsumed frames hold more decoded memory than a lane buffers (frames of empty strings) with RESOURCE_EXHAUSTED", async () => {
    const session = new MuxSession({
      role: "zone",
      localId: "zone-1",
      peerId: "global",
      options: { maxMessageBytes: 1 << 20, responseWindowBytes: 1 << 20 },
    });
    const peer = new RawPeer(session);
    peer.hello("global", 64);
    await session.ready;
    // 2 encoded bytes per empty string and about 8 held decoded: each frame is within the density limit, but a lane holds at most 4 times its window.
    const empties = (n: number) =>
      create(DeltaDiscoveryResponseSchema, {
        typeUrl: "t",
        removedResources: Array.from({ length: n }, () => ""),
      });
    for (let i = 0; i < 8; i++) peer.write({ case: "deltaResponse", value: empties(60_000) });
    const end = await session.closed;
    expect(end.code).toBe("resource_exhausted");
    expect(end.message).toMatch(/more than the 4194304 this side holds per lane/);
    peer.end();
  });

  it("grants bytes back as frames are consumed, so a long exchange never runs out of byte credit", async () => {
    const { zone, global } = sessionPair({ maxMessageBytes: 4096, responseWindowBytes: 8192 }, {});
    await zone.ready;
    const sender = (async () => {
      for (let i = 0; i < 300; i++) await global.server.send(response("type.t", String(i), 2000));
    })();
    for (let i = 0; i < 300; i++) await zone.client.recv();
    await sender;
    expect(zone.stats().received.responses).toBe(300);
    await zone.close();
  });
});

describe("window updates", () => {
  /** Session options whose tick (and so the fallback grant) comes only after minutes: a test relying on it would time out. */
  const noTick = {
    heartbeatIntervalMs: 600_000,
    heartbeatTimeoutMs: 2_400_000,
    sendTimeoutMs: 2_400_000,
    handshakeTimeoutMs: 2_400_000,
  };

  it("costs one window update per quarter of the window in steady traffic, not one per frame", async () => {
    const session = new MuxSession({
      role: "global",
      localId: "global",
      peerId: "zone-1",
      options: noTick,
    });
    const peer = new RawPeer(session);
    peer.hello("zone-1", 64, 1 << 20);
    await session.ready;
    // Everything the session writes is read as soon as it is written, so no window update is merged into the next.
    const granted: number[] = [];
    const reading = (async () => {
      for (;;) {
        const frame = await peer.read();
        if (frame === undefined || frame.value.case === "response") return;
        if (frame.value.case === "windowUpdate") granted.push(frame.value.value.requests);
      }
    })();
    // One request at a time, each consumed before the next: the buffer empties 100 times.
    for (let i = 0; i < 100; i++) {
      peer.write({ case: "request", value: request("type.x", String(i)) });
      await session.server.recv();
      await settle(0);
    }
    await session.server.send(response("type.x", "end"));
    await reading;
    expect(granted).toEqual([16, 16, 16, 16, 16, 16]); // a quarter of the 64-frame window each; 100 frames never outran the window
    peer.end();
    await session.close();
  });

  it("keeps credit back through the session's ticks: one window update per quarter of the window when the peer sends a frame now and then", async () => {
    // A zone's ACK of each change, with seconds between changes: the session's tick runs between any two
    // frames. The credit kept back must still wait for a quarter of the window, not go out at the next tick.
    let now = 0;
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval", "setTimeout", "clearTimeout"] });
    try {
      const session = new MuxSession({
        role: "global",
        localId: "global",
        peerId: "zone-1",
        now: () => now,
        options: { heartbeatIntervalMs: 1_000, heartbeatTimeoutMs: 4_000 },
      });
      const peer = new RawPeer(session);
      peer.hello("zone-1", 64, 1 << 20);
      await session.ready;
      const granted: number[] = [];
      let pings = 0;
      const reading = (async () => {
        for (;;) {
          const frame = await peer.read();
          if (frame === undefined || frame.value.case === "response") return;
          if (frame.value.case === "windowUpdate") granted.push(frame.value.value.requests);
          if (frame.value.case === "ping") pings++;
        }
      })();
      for (let i = 0; i < 48; i++) {
        peer.write({ case: "request", value: request("type.x", String(i)) });
        await session.server.recv();
        // 1.5 heartbeat intervals, 50 ms at a time: at least one tick (the session's tick is its heartbeat interval here).
        for (let step = 0; step < 30; step++) {
          now += 50;
          await vi.advanceTimersByTimeAsync(50);
        }
        if ((i + 1) % 16 !== 0) expect(granted.length).toBe(Math.floor((i + 1) / 16));
      }
      // The ticks ran: the session pinged a peer quiet for a heartbeat interval (pings come only from the tick).
      expect(pings).toBeGreaterThanOrEqual(24);
      expect(session.end).toBeUndefined(); // each request is within the heartbeat timeout of the last
      await session.server.send(response("type.x", "end"));
      await reading;
      expect(granted).toEqual([16, 16, 16]);
      peer.end();
      const closing = session.close();
      await vi.advanceTimersByTimeAsync(5_000);
      await closing;
    } finally {
      vi.useRealTimers();
    }
  });

  it("still grants when the buffer empties if the peer's byte credit might not hold its largest frame (else it would wait forever)", async () => {
    // The window is the largest frame: after any frame, the peer's credit is short of a full-size one.
    const windowBytes = 8192;
    const { zone, global } = sessionPair(
      { ...noTick, maxMessageBytes: windowBytes, responseWindowBytes: windowBytes },
      noTick,
    );
    await zone.ready;
    await global.ready;
    await global.server.send(response("type.t", "small", 100));
    await zone.client.recv();
    const big = response("type.t", "big", windowBytes - 200);
    expect(creditSize(responseFrame(big))).toBeGreaterThan(
      windowBytes - creditSize(responseFrame(response("type.t", "small", 100))),
    );
    await global.server.send(big); // resolves only once the zone returned the small frame's credit
    expect(((await zone.client.recv()) as { nonce: string }).nonce).toBe("big");
    await zone.close();
  });
});

describe("options", () => {
  it("default to 16 MiB of buffers per session, and need a byte window that holds the largest frame", () => {
    const o = resolveSessionOptions();
    expect(o.requestWindowBytes + o.responseWindowBytes).toBe(16 * 1024 * 1024);
    expect(resolveSessionOptions({ maxMessageBytes: 10 * 1024 * 1024 }).requestWindowBytes).toBe(
      10 * 1024 * 1024,
    );
    expect(() => resolveSessionOptions({ requestWindowBytes: 1024 * 1024 })).toThrow(
      /requestWindowBytes \(1048576\) must be at least maxMessageBytes/,
    );
  });
});

describe("Inbox with a memory budget", () => {
  it("reserves what it holds, from arrival until the consumer asks for the next frame, and drops it on a failed close", async () => {
    const budget = new MemoryBudget(20_000);
    const holder: BudgetHolder = { name: "z", evict: () => undefined };
    const memory = {
      reserve: (n: number) => budget.reserve(holder, n),
      release: (n: number) => budget.release(holder, n),
    };
    const inbox = new Inbox<number>("requests", 8, 8000, () => undefined, memory);
    expect(inbox.deliver(1, 3000)).toBeUndefined();
    expect(inbox.deliver(2, 3000, 5000)).toBeUndefined(); // 3000 bytes of credit, 5000 held decoded
    expect(budget.stats().usedBytes).toBe(8000);
    expect(await inbox.recv()).toBe(1);
    expect(budget.stats().usedBytes).toBe(8000); // frame 1 is in the consumer's hands
    expect(await inbox.recv()).toBe(2);
    expect(budget.stats().usedBytes).toBe(5000); // done with frame 1; frame 2 in hand
    // A frame handed straight to a waiting consumer is held too, until the next recv.
    const waiting = inbox.recv();
    expect(budget.stats().usedBytes).toBe(0);
    expect(inbox.deliver(3, 1000, 4000)).toBeUndefined();
    expect(await waiting).toBe(3);
    expect(budget.stats().usedBytes).toBe(4000);
    expect(inbox.deliver(4, 1000)).toBeUndefined();
    inbox.close(
      new (await import("../../src/errors.ts")).KdsError("session_closed", "gone"),
      false,
    );
    expect(budget.stats().usedBytes).toBe(0);
    await expect(inbox.recv()).rejects.toMatchObject({ code: "session_closed" });
  });
});

describe("MemoryBudget", () => {
  it("ends the largest holder when full, and refuses the asker when it would hold the most", () => {
    const budget = new MemoryBudget(10_000);
    const evicted: string[] = [];
    const holder = (name: string): BudgetHolder => ({
      name,
      evict: (message) => {
        evicted.push(name);
        expect(message).toMatch(/had left the most unread/);
        budget.releaseAll(holders[name]!);
      },
    });
    const holders: Record<string, BudgetHolder> = {
      hog: holder("hog"),
      small: holder("small"),
      other: holder("other"),
    };
    expect(budget.reserve(holders.hog!, 7000)).toBeUndefined();
    expect(budget.reserve(holders.other!, 2000)).toBeUndefined();
    expect(budget.reserve(holders.small!, 1500)).toBeUndefined(); // the hog goes
    expect(evicted).toEqual(["hog"]);
    expect(budget.stats()).toMatchObject({ usedBytes: 3500, peakBytes: 9000, evictions: 1 });
    expect(budget.reserve(holders.other!, 6000)).toBeUndefined();
    const refused = budget.reserve(holders.other!, 1000); // "other" holds the most: it is refused, nobody else is ended
    expect(refused).toMatch(/cannot take 1000 more for "other"/);
    expect(evicted).toEqual(["hog"]);
    expect(() => new MemoryBudget(10)).toThrow(/at least 1024 bytes/);
  });

  it("ends the session whose peer never reads, and the well-behaved session sharing the budget goes on", async () => {
    // The budget counts decoded memory: a 12 KB request holds about twice that decoded (its string, once more).
    const budget = new MemoryBudget(128 * 1024);
    const options = { maxMessageBytes: 16 * 1024, requestWindowBytes: 48 * 1024 };
    const hog = new MuxSession({
      role: "global",
      localId: "global",
      peerId: "hog",
      options,
      budget,
    });
    const hogPeer = new RawPeer(hog);
    hogPeer.hello("hog", 64, 1 << 20);
    for (let i = 0; i < 4; i++)
      hogPeer.write({ case: "request", value: bigRequest(12_000, String(i)) }); // never consumed
    await eventually(() => hog.stats().buffered.requests === 4, "the hog's requests are buffered");

    const good = new MuxSession({
      role: "global",
      localId: "global",
      peerId: "good",
      options,
      budget,
    });
    const goodPeer = new RawPeer(good);
    goodPeer.hello("good", 64, 1 << 20);
    for (let i = 0; i < 3; i++)
      goodPeer.write({ case: "request", value: bigRequest(12_000, String(i)) }); // about 170 KB held in all: the budget is exceeded
    const end = await hog.closed;
    expect(end.code).toBe("resource_exhausted");
    expect(end.message).toMatch(/"hog" had left the most unread/);
    const goaway = await hogPeer.readUntil("goaway");
    expect(goaway?.value.case === "goaway" && goaway.value.value.reason).toBe(
      GoAwayReason.RESOURCE_EXHAUSTED,
    );
    for (let i = 0; i < 3; i++) expect((await good.server.recv()).responseNonce).toBe(String(i));
    expect(good.end).toBeUndefined();
    expect(budget.stats().peakBytes).toBeLessThanOrEqual(128 * 1024);
    expect(budget.stats().evictions).toBe(1);
    hogPeer.end();
    goodPeer.end();
    await good.close();
    expect(budget.stats().usedBytes).toBe(0); // the last frame good's consumer took was held until the session closed
    expect(budget.stats().holders).toBe(0); // each session was forgotten when it ended
  });

  it("keeps a holder that holds nothing between frames, and forgets it only when it ends", () => {
    const budget = new MemoryBudget(20_000);
    const a: BudgetHolder = { name: "a", evict: () => undefined };
    const b: BudgetHolder = { name: "b", evict: () => undefined };
    expect(budget.reserve(a, 1000)).toBeUndefined();
    budget.release(a, 1000);
    expect(budget.stats()).toMatchObject({ usedBytes: 0, holders: 1 });
    expect(budget.heldBy(a)).toBe(0);
    expect(budget.reserve(b, 500)).toBeUndefined();
    budget.release(b, 800); // more than it holds: only what it holds comes back
    expect(budget.stats()).toMatchObject({ usedBytes: 0, holders: 2 });
    expect(budget.reserve(a, 300)).toBeUndefined();
    budget.releaseAll(a);
    budget.release(a, 300); // a holder already forgotten gives back nothing more
    expect(budget.stats()).toMatchObject({ usedBytes: 0, holders: 1 });
    budget.releaseAll(b);
    expect(budget.stats().holders).toBe(0);
  });
});

describe("ping flood", () => {
  it("leaves at most one pong waiting, answering the latest ping", async () => {
    const session = new MuxSession({ role: "global", localId: "global", peerId: "zone-1" });
    const peer = new RawPeer(session);
    peer.hello("zone-1", 64, 1 << 20);
    const pings = 10_000;
    for (let i = 1; i <= pings; i++)
      peer.write({ case: "ping", value: create(PingSchema, { id: BigInt(i) }) });
    await eventually(() => session.stats().received.control === pings + 1, "every ping is read");
    // The session wrote nothing meanwhile (nobody read its stream): what waits is its hello, its own ping and one pong.
    const frames = [await peer.read(), await peer.read(), await peer.read()];
    const pongs = frames.filter((f) => f?.value.case === "pong");
    expect(pongs).toHaveLength(1);
    expect(pongs[0]?.value.value).toMatchObject({ id: BigInt(pings) });
    expect(frames.map((f) => f?.value.case).sort()).toEqual(["hello", "ping", "pong"]);
    peer.write({ case: "ping", value: create(PingSchema, { id: 1n }) });
    const next = await peer.read();
    expect(next?.value.case === "pong" && next.value.value.id).toBe(1n); // nothing else was queued behind
    expect(session.end).toBeUndefined();
    peer.end();
    await session.close();
  });
});
