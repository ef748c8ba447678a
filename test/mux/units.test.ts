// Unit tests of the session's building blocks.
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { KdsError } from "../../src/errors.ts";
import { controlFrame, requestFrame, responseFrame } from "../../src/mux/frames.ts";
import { Inbox } from "../../src/mux/inbox.ts";
import { resolveSessionOptions } from "../../src/mux/options.ts";
import { Outbox } from "../../src/mux/outbox.ts";
import { WRITE_FRAMES } from "../../src/mux/frame-push.ts";
import { transition, type SessionEnd, type SessionState } from "../../src/mux/state.ts";
import { fromConnectError, toConnectError } from "../../src/connect-errors.ts";
import { Ring } from "../../src/util/ring.ts";
import { backoffCeiling, backoffDelay, resolveBackoff } from "../../src/util/backoff.ts";
import { request, response } from "../contract/harness.ts";

describe("Ring", () => {
  it("is FIFO, refuses to grow, and removes from the middle", () => {
    const r = new Ring<number>(3);
    expect([r.push(1), r.push(2), r.push(3), r.push(4)]).toEqual([true, true, true, false]);
    expect(r.shift()).toBe(1);
    expect(r.push(5)).toBe(true);
    expect(r.remove((x) => x === 3)).toBe(true);
    expect(r.drain()).toEqual([2, 5]);
    expect(r.size).toBe(0);
    expect(() => new Ring(0)).toThrow(RangeError);
  });
});

describe("Inbox", () => {
  it("grants credit in batches as the consumer takes frames, and flags overrun", async () => {
    const grants: number[] = [];
    const inbox = new Inbox<number>("requests", 8, 1 << 20, (_lane, n) => grants.push(n));
    for (let i = 0; i < 8; i++) expect(inbox.deliver(i, 1)).toBeUndefined();
    const overrun = inbox.deliver(8, 1);
    expect(overrun?.code).toBe("protocol_error");
    for (let i = 0; i < 8; i++) expect(await inbox.recv()).toBe(i);
    expect(grants).toEqual([2, 2, 2, 2]);
    expect(grants.reduce((a, b) => a + b, 0)).toBe(8);
  });

  it("keeps credit back when the buffer empties while the peer's credit still holds its largest frame, until a quarter of the window was consumed", async () => {
    const grants: [number, number][] = [];
    const inbox = new Inbox<number>(
      "requests",
      64,
      8192,
      (_lane, n, bytes) => grants.push([n, bytes]),
      undefined,
      4096,
    );
    expect(inbox.deliver(1, 100)).toBeUndefined();
    await inbox.recv();
    expect(grants).toEqual([]); // 8092 bytes of credit left hold a 4096-byte frame
    // One small frame at a time, each taken before the next (a zone's ACK of each change): credit
    // comes back once a quarter of the window (16 frames) was consumed, not once per frame.
    for (let i = 2; i <= 16; i++) {
      expect(inbox.deliver(i, 100)).toBeUndefined();
      await inbox.recv();
      if (i < 16) expect(grants).toEqual([]);
    }
    expect(grants).toEqual([[16, 1600]]);
  });

  it("grants at once when the buffer empties and the peer's byte credit is short of its largest frame", async () => {
    const grants: [number, number][] = [];
    // 5000 bytes of window, frames up to 4096: a quarter of the window is 1250 bytes.
    const inbox = new Inbox<number>(
      "requests",
      64,
      5000,
      (_lane, n, bytes) => grants.push([n, bytes]),
      undefined,
      4096,
    );
    expect(inbox.deliver(1, 500)).toBeUndefined();
    await inbox.recv();
    expect(grants).toEqual([]); // 4500 left hold a 4096-byte frame
    expect(inbox.deliver(2, 400)).toBeUndefined();
    expect(inbox.deliver(3, 200)).toBeUndefined();
    await inbox.recv();
    expect(grants).toEqual([]); // 3900 left, but a frame is still buffered: taking it returns the credit
    await inbox.recv();
    expect(grants).toEqual([[3, 1100]]);
  });

  it("honours the signal of every recv when one signal is passed to each, and a recv with another signal or none", async () => {
    const inbox = new Inbox<number>("responses", 4, 1 << 20, () => undefined);
    const first = new AbortController();
    const taken = inbox.recv(first.signal);
    inbox.deliver(1, 1);
    expect(await taken).toBe(1);
    const pending = inbox.recv(first.signal); // the same signal, still listened to
    first.abort();
    await expect(pending).rejects.toMatchObject({ code: "aborted" });
    const unsignalled = inbox.recv(); // no signal: the earlier signal no longer matters
    inbox.deliver(2, 1);
    expect(await unsignalled).toBe(2);
    const third = new AbortController();
    const last = inbox.recv(third.signal);
    inbox.close(new KdsError("session_closed", "gone"));
    await expect(last).rejects.toMatchObject({ code: "session_closed" });
    third.abort(); // the listener went with the close: nothing to reject twice
  });

  it("rejects a recv on a signal that aborted while no recv waited on it", async () => {
    const inbox = new Inbox<number>("responses", 4, 1 << 20, () => undefined);
    const controller = new AbortController();
    const taken = inbox.recv(controller.signal); // the inbox now listens to this signal
    inbox.deliver(1, 1);
    expect(await taken).toBe(1);
    controller.abort(); // nobody waits: the listener only forgets the signal
    inbox.deliver(2, 1);
    expect(await inbox.recv(controller.signal)).toBe(2); // a buffered frame is handed out, as before any abort check
    await expect(inbox.recv(controller.signal)).rejects.toMatchObject({ code: "aborted" });
  });

  it("allows one pending recv, honours its signal, and drains before reporting the close", async () => {
    const inbox = new Inbox<number>("responses", 4, 1 << 20, () => undefined);
    const controller = new AbortController();
    const pending = inbox.recv(controller.signal);
    await expect(inbox.recv()).rejects.toMatchObject({ code: "busy" });
    controller.abort();
    await expect(pending).rejects.toMatchObject({ code: "aborted" });
    inbox.deliver(1, 1);
    inbox.close(new KdsError("session_closed", "gone"));
    expect(await inbox.recv()).toBe(1);
    await expect(inbox.recv()).rejects.toMatchObject({ code: "session_closed" });
  });

  it("hands recvTo's frames and failures to its receiver from a later microtask, under recv's rules", async () => {
    const inbox = new Inbox<number>("responses", 4, 1 << 20, () => undefined);
    const got: string[] = [];
    const receiver = {
      take: (n: number) => got.push(`take ${n}`),
      fail: (error: unknown) => got.push(`fail ${(error as KdsError).code}`),
    };
    const turn = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 0));
    // A frame already buffered, and one that arrives while the receiver waits: neither inside the call.
    inbox.deliver(1, 1);
    inbox.recvTo(receiver);
    expect(got).toEqual([]);
    await turn();
    inbox.recvTo(receiver);
    inbox.deliver(2, 1);
    expect(got).toEqual(["take 1"]);
    await turn();
    expect(got).toEqual(["take 1", "take 2"]);
    // One receive pending at a time, of either kind; the signal aborts the waiting one.
    const controller = new AbortController();
    inbox.recvTo(receiver, controller.signal);
    await expect(inbox.recv()).rejects.toMatchObject({ code: "busy" });
    inbox.recvTo(receiver);
    controller.abort();
    await turn();
    expect(got.slice(2)).toEqual(["fail busy", "fail aborted"]);
    // A close fails the one waiting, and every receive after the buffer drained.
    inbox.recvTo(receiver);
    inbox.close(new KdsError("session_closed", "gone"));
    inbox.recvTo(receiver);
    await turn();
    expect(got.slice(4)).toEqual(["fail session_closed", "fail session_closed"]);
  });
});

describe("Outbox", () => {
  it("sends control frames before data, alternates lanes, and respects credit", async () => {
    const outbox = new Outbox(16, () => 0);
    const frames = outbox.frames();
    outbox.setHello(controlFrame({ case: "hello", value: { protocolVersion: 1 } }));
    void outbox.send("requests", requestFrame(request("a")));
    void outbox.send("requests", requestFrame(request("b")));
    void outbox.send("responses", responseFrame(response("c")));
    outbox.ping(1n);
    expect((await frames.next()).value?.value.case).toBe("hello");
    expect((await frames.next()).value?.value.case).toBe("ping");
    outbox.openLanes(
      { requests: 1, responses: 5 },
      { requests: 1 << 20, responses: 1 << 20 },
      1 << 20,
    );
    const order: string[] = [];
    for (let i = 0; i < 2; i++) {
      const f = (await frames.next()).value;
      order.push(
        `${f?.value.case}:${(f?.value.value as { typeUrl: string } | undefined)?.typeUrl}`,
      );
    }
    expect(order).toEqual(["request:a", "response:c"]);
    // The request lane is out of credit: "b" waits until a window update arrives,
    // while a pong queued now still leaves first.
    outbox.pong(7n);
    expect((await frames.next()).value?.value.case).toBe("pong");
    const next = frames.next();
    outbox.addCredit(1, 0);
    const f = (await next).value;
    expect((f?.value.value as { typeUrl: string } | undefined)?.typeUrl).toBe("b");
  });

  it("bounds each lane's queue and fails sends on finish", async () => {
    const outbox = new Outbox(2, () => 0);
    const a = outbox.send("requests", requestFrame(request("a")));
    const b = outbox.send("requests", requestFrame(request("b")));
    await expect(outbox.send("requests", requestFrame(request("c")))).rejects.toMatchObject({
      code: "send_queue_full",
    });
    outbox.finish(new KdsError("session_closed", "bye"), {
      case: "goaway",
      value: { message: "bye" },
    });
    await expect(a).rejects.toMatchObject({ code: "session_closed" });
    await expect(b).rejects.toMatchObject({ code: "session_closed" });
    const frames = outbox.frames();
    expect((await frames.next()).value?.value.case).toBe("goaway");
    expect((await frames.next()).done).toBe(true);
  });

  it("accepts an offered frame at once and hands it to a pushed writer before returning, only when send would not wait", async () => {
    let now = 100;
    const outbox = new Outbox(4, () => now);
    const written: string[] = [];
    const flow = outbox.frames()[WRITE_FRAMES]({
      frame: (f) => {
        written.push(`${f.value.case}:${(f.value.value as { typeUrl?: string }).typeUrl ?? ""}`);
        return true;
      },
      end: () => undefined,
      fail: () => undefined,
    });
    // No window yet: refused, and nothing queued.
    expect(outbox.offer("responses", responseFrame(response("a")))).toBe(false);
    outbox.openLanes(
      { requests: 4, responses: 2 },
      { requests: 1 << 20, responses: 1 << 20 },
      1 << 20,
    );
    expect(outbox.offer("responses", responseFrame(response("b")))).toBe(true);
    expect(written).toEqual(["response:b"]); // written in the call, not from a later microtask
    // A frame that waits in the lane comes first: an offer behind it is refused.
    void outbox.send("responses", responseFrame(response("c")));
    expect(outbox.offer("responses", responseFrame(response("d")))).toBe(false);
    await Promise.resolve(); // the microtask that writes "c"
    expect(written).toEqual(["response:b", "response:c"]);
    // The window of 2 responses is used up, and nothing waits: refused all the same; so is an aborted signal's offer.
    expect(outbox.offer("responses", responseFrame(response("e")))).toBe(false);
    expect(outbox.offer("requests", requestFrame(request("f")), AbortSignal.abort())).toBe(false);
    expect(outbox.offer("requests", requestFrame(request("f")))).toBe(true);
    expect(written).toEqual(["response:b", "response:c", "request:f"]);
    flow.stop();
    // A writer that says it is full took that frame but no more: the next offered frame is accepted and kept,
    // the send timeout counting from the offer, and an offer behind it is refused.
    const paused = new Outbox(4, () => now);
    paused.openLanes(
      { requests: 4, responses: 4 },
      { requests: 1 << 20, responses: 1 << 20 },
      1 << 20,
    );
    const taken: string[] = [];
    paused.frames()[WRITE_FRAMES]({
      frame: (f) => {
        taken.push((f.value.value as { typeUrl: string }).typeUrl);
        return false;
      },
      end: () => undefined,
      fail: () => undefined,
    });
    now = 200;
    expect(paused.offer("responses", responseFrame(response("g")))).toBe(true);
    expect(paused.offer("responses", responseFrame(response("h")))).toBe(true);
    expect(taken).toEqual(["g"]);
    expect(paused.oldestWaitingSince()).toBe(200);
    expect(paused.offer("responses", responseFrame(response("i")))).toBe(false);
  });

  it("reports how long the oldest frame has waited", () => {
    let now = 100;
    const outbox = new Outbox(4, () => now);
    expect(outbox.oldestWaitingSince()).toBeUndefined();
    void outbox.send("responses", responseFrame(response("x")));
    now = 500;
    expect(outbox.oldestWaitingSince()).toBe(100);
  });
});

describe("session state machine", () => {
  const end: SessionEnd = { code: "shutdown", message: "bye", initiator: "local", graceful: true };
  const peer = {
    peerId: "g",
    requestWindow: 1,
    responseWindow: 1,
    requestWindowBytes: 1024,
    responseWindowBytes: 1024,
    maxMessageBytes: 1024,
    calls: false,
    protocolVersions: { min: 2, max: 3 },
    softwareVersion: "",
    protocolVersion: 3,
    features: [],
  };
  it("moves handshaking -> open -> ending -> closed and keeps the first end", () => {
    let s: SessionState = { kind: "handshaking" };
    s = transition(s, { type: "hello", peer });
    expect(s.kind).toBe("open");
    s = transition(s, { type: "end", end });
    expect(s).toMatchObject({ kind: "ending", end, peer });
    s = transition(s, { type: "end", end: { ...end, code: "transport" } });
    expect(s).toMatchObject({ kind: "ending", end });
    s = transition(s, { type: "released" });
    expect(s).toMatchObject({ kind: "closed", end });
    expect(transition({ kind: "handshaking" }, { type: "released" })).toEqual({
      kind: "handshaking",
    });
  });
});

describe("options", () => {
  it("fills defaults and names a bad option", () => {
    expect(resolveSessionOptions().requestWindow).toBe(64);
    expect(() => resolveSessionOptions({ requestWindow: 0 })).toThrow(
      /requestWindow must be an integer from 1/,
    );
    expect(() =>
      resolveSessionOptions({ heartbeatIntervalMs: 10, heartbeatTimeoutMs: 10 }),
    ).toThrow(/must be larger than heartbeatIntervalMs/);
  });
});

describe("backoff", () => {
  it("grows exponentially to the cap, with full jitter below the ceiling", () => {
    const b = resolveBackoff({ baseMs: 100, capMs: 1000 });
    expect([0, 1, 2, 3, 4, 10].map((a) => backoffCeiling(a, b))).toEqual([
      100, 200, 400, 800, 1000, 1000,
    ]);
    expect(backoffDelay(3, b, () => 0.5)).toBe(400);
    expect(backoffDelay(3, b, () => 0)).toBe(0);
    expect(backoffDelay(3, b, () => 0.999)).toBeLessThan(800);
    expect(() => resolveBackoff({ baseMs: 10, capMs: 5 })).toThrow(/capMs/);
  });
});

describe("Connect error mapping", () => {
  it("carries the kds code across the wire and back", () => {
    const original = new KdsError("zone_not_registered", "register it");
    const wire = toConnectError(original);
    expect(wire.code).toBe(Code.FailedPrecondition);
    const back = fromConnectError(
      new ConnectError(wire.rawMessage, wire.code, wire.metadata),
      "global",
    );
    expect(back.code).toBe("zone_not_registered");
    expect(back.message).toBe("register it");
    const unreachable = fromConnectError(
      new ConnectError("connect ECONNREFUSED", Code.Unavailable),
      "http://127.0.0.1:1",
    );
    expect(unreachable.code).toBe("transport");
    expect(unreachable.message).toContain("check that the global is running and reachable");
  });
});
