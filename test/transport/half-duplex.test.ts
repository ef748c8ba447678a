// The half-duplex transport over fetch and HTTP/1.1 when its legs break: Pull
// streams cut mid-flight, Push calls lost before or after the server saw
// them. Every frame must still arrive exactly once, in order.
import { create } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  createRouterTransport,
  type Transport,
} from "@connectrpc/connect";
import { HalfDuplexService, type PullResponse } from "../../src/gen/kds/mux/v1/half_duplex_pb.ts";
import { FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { describe, expect, it } from "vitest";
import { serveGlobal } from "../../src/adapters/node/serve-global.ts";
import { insecureZoneAuthenticator } from "../../src/auth/zone-authenticator.ts";
import { GlobalServer } from "../../src/global/global-server.ts";
import { InMemoryZoneRegistry } from "../../src/global/zone-registry.ts";
import { silentLogger } from "../../src/log.ts";
import type { Session } from "../../src/mux/views.ts";
import { KDS_ERROR_CODE_HEADER } from "../../src/connect-errors.ts";
import { halfDuplexMuxTransport } from "../../src/transport/half-duplex/client.ts";
import { HalfDuplexHub, registerHalfDuplex } from "../../src/transport/half-duplex/server.ts";
import type { MuxAcceptor } from "../../src/transport/transport.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { eventually, request, response } from "../contract/harness.ts";
import { ManualClock } from "../support/manual-clock.ts";

interface Faults {
  pullsCut: number;
  pushesLostBefore: number;
  pushesLostAfter: number;
}

/** Wraps a transport: every Pull is cut after `cutAfter` messages; Push calls fail now and then. */
function flaky(inner: Transport, cutAfter: number, faults: Faults): Transport {
  let pushes = 0;
  return {
    async unary(method, signal, timeoutMs, header, input, contextValues) {
      pushes++;
      if (pushes % 7 === 0) {
        faults.pushesLostBefore++;
        throw new ConnectError("request lost (test)", Code.Unavailable);
      }
      const result = await inner.unary(method, signal, timeoutMs, header, input, contextValues);
      if (pushes % 5 === 0) {
        faults.pushesLostAfter++;
        throw new ConnectError("response lost (test)", Code.Unavailable);
      }
      return result;
    },
    async stream(method, signal, timeoutMs, header, input, contextValues) {
      const cut = new AbortController();
      const combined = signal === undefined ? cut.signal : AbortSignal.any([signal, cut.signal]);
      const response = await inner.stream(
        method,
        combined,
        timeoutMs,
        header,
        input,
        contextValues,
      );
      const messages = response.message;
      return {
        ...response,
        message: (async function* () {
          let n = 0;
          for await (const m of messages) {
            yield m;
            if (++n >= cutAfter) {
              faults.pullsCut++;
              cut.abort();
              throw new ConnectError("leg dropped (test)", Code.Unavailable);
            }
          }
        })(),
      };
    },
  };
}

/**
 * Wraps a transport with a switch: after cut(), open Pull streams fail and
 * every new call is refused (Unavailable), as when the network goes away.
 */
function partitionable(inner: Transport): {
  transport: Transport;
  cut(): void;
  readonly refused: number;
} {
  let down = false;
  let refused = 0;
  const open = new Set<AbortController>();
  const refuse = (): never => {
    refused++;
    throw new ConnectError("network unreachable (test)", Code.Unavailable);
  };
  return {
    get refused() {
      return refused;
    },
    cut() {
      down = true;
      for (const c of open)
        c.abort(new ConnectError("network unreachable (test)", Code.Unavailable));
    },
    transport: {
      async unary(method, signal, timeoutMs, header, input, contextValues) {
        if (down) refuse();
        return inner.unary(method, signal, timeoutMs, header, input, contextValues);
      },
      async stream(method, signal, timeoutMs, header, input, contextValues) {
        if (down) refuse();
        const cut = new AbortController();
        open.add(cut);
        const combined = signal === undefined ? cut.signal : AbortSignal.any([signal, cut.signal]);
        return inner.stream(method, combined, timeoutMs, header, input, contextValues);
      },
    },
  };
}

describe("half-duplex transport", () => {
  it("delivers every frame exactly once, in order, across cut Pulls and lost Pushes", async () => {
    const global = new GlobalServer({
      registry: new InMemoryZoneRegistry(["zone-1"]),
      authenticator: insecureZoneAuthenticator(),
      logger: silentLogger,
      session: { requestWindow: 64, responseWindow: 64 },
    });
    const served = await serveGlobal(global, { httpVersion: "1.1" });
    const faults: Faults = { pullsCut: 0, pushesLostBefore: 0, pushesLostAfter: 0 };
    try {
      const transport = halfDuplexMuxTransport(
        flaky(createConnectTransport({ baseUrl: served.url, useBinaryFormat: true }), 40, faults),
      );
      const zone = await new ZoneClient({ name: "zone-1", transport, logger: silentLogger }).dial();
      await eventually(() => global.session("zone-1") !== undefined, "session listed");
      const gs = global.session("zone-1") as Session;
      const n = 1500;
      const down = (async () => {
        for (let i = 0; i < n; i++) await gs.server.send(response("down", String(i), 32));
      })();
      const up = (async () => {
        for (let i = 0; i < n; i++) await zone.client.send(request("up", String(i)));
      })();
      const gotDown: string[] = [];
      const gotUp: string[] = [];
      await Promise.all([
        (async () => {
          for (let i = 0; i < n; i++)
            gotDown.push(((await zone.client.recv()) as { nonce: string }).nonce);
        })(),
        (async () => {
          for (let i = 0; i < n; i++) gotUp.push((await gs.server.recv()).responseNonce);
        })(),
        down,
        up,
      ]);
      const expected = Array.from({ length: n }, (_, i) => String(i));
      expect(gotDown).toEqual(expected);
      expect(gotUp).toEqual(expected);
      expect(zone.end).toBeUndefined();
      expect(faults.pullsCut).toBeGreaterThan(5);
      expect(faults.pushesLostBefore).toBeGreaterThan(0);
      expect(faults.pushesLostAfter).toBeGreaterThan(0);
      await zone.close();
    } finally {
      await served.close();
    }
  }, 60_000);

  it("runs over connect-web's gRPC-web transport on HTTP/1.1 too", async () => {
    const global = new GlobalServer({
      registry: new InMemoryZoneRegistry(["zone-1"]),
      authenticator: insecureZoneAuthenticator(),
      logger: silentLogger,
    });
    const served = await serveGlobal(global, { httpVersion: "1.1" });
    try {
      const zone = await new ZoneClient({
        name: "zone-1",
        transport: halfDuplexMuxTransport(createGrpcWebTransport({ baseUrl: served.url })),
        logger: silentLogger,
      }).dial();
      await eventually(() => global.session("zone-1") !== undefined, "session listed");
      const gs = global.session("zone-1") as Session;
      await zone.server.send(response("up", "1", 64));
      expect(((await gs.client.recv()) as { nonce: string }).nonce).toBe("1");
      await gs.server.send(response("down", "2", 64));
      expect(((await zone.client.recv()) as { nonce: string }).nonce).toBe("2");
      await zone.close();
    } finally {
      await served.close();
    }
  });

  it("refuses acknowledgements of frames that were never sent, and keeps serving", async () => {
    const global = new GlobalServer({
      registry: new InMemoryZoneRegistry(["zone-1"]),
      authenticator: insecureZoneAuthenticator(),
      logger: silentLogger,
    });
    const served = await serveGlobal(global, { httpVersion: "1.1" });
    try {
      const web = createConnectTransport({ baseUrl: served.url, useBinaryFormat: true });
      const client = createClient(HalfDuplexService, web);
      const headers = { "client-id": "zone-1" };
      const pull = client.pull({}, { headers })[Symbol.asyncIterator]();
      const opening = await pull.next();
      const linkId = (opening.value as { linkId: string }).linkId;
      expect(linkId).not.toBe("");
      const error = await client
        .push({ linkId, firstSeq: 1n, frames: [], pullAckedSeq: 1_000_000n }, { headers })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ConnectError);
      expect((error as ConnectError).code).toBe(Code.InvalidArgument);
      expect((error as ConnectError).rawMessage).toMatch(
        /acknowledges frame 1000000, but only \d+ were sent/,
      );
      const stranger = await client
        .push({ linkId, firstSeq: 1n, frames: [] }, { headers: { "client-id": "zone-2" } })
        .catch((e: unknown) => e);
      expect((stranger as ConnectError).rawMessage).toMatch(/belongs to zone "zone-1"/);
      await pull.return?.();
    } finally {
      await served.close();
    }
  });

  it("ends the session with the resume timeout when the global stays unreachable", async () => {
    // The global's side of the link cannot hear the zone either: a short grace lets the teardown finish sooner.
    const global = new GlobalServer({
      registry: new InMemoryZoneRegistry(["zone-1"]),
      authenticator: insecureZoneAuthenticator(),
      logger: silentLogger,
      session: { closeGraceMs: 100 },
    });
    const served = await serveGlobal(global, { httpVersion: "1.1", closeGraceMs: 100 });
    const clock = new ManualClock();
    const net = partitionable(
      createConnectTransport({ baseUrl: served.url, useBinaryFormat: true }),
    );
    try {
      const transport = halfDuplexMuxTransport(net.transport, { resumeTimeoutMs: 500, clock });
      // No heartbeats during the test: nothing for the zone to push, so only the Pull's resume is timed.
      const zone = await new ZoneClient({
        name: "zone-1",
        transport,
        logger: silentLogger,
        session: { heartbeatIntervalMs: 600_000, heartbeatTimeoutMs: 1_200_000 },
      }).dial();
      // The opening exchange is over (hellos, and each side's first ping answered) and every frame
      // the zone sent has reached the global: nothing is left for a Push to retry after the cut.
      await eventually(() => {
        const gs = global.session("zone-1");
        return (
          gs !== undefined &&
          gs.stats().heartbeatRttMs !== undefined &&
          zone.stats().heartbeatRttMs !== undefined &&
          gs.stats().received.control === zone.stats().sent.control
        );
      }, "the opening exchange is over and every zone frame reached the global");
      net.cut(); // the network goes away without a word from the global: no goaway, no end of stream
      await eventually(
        () => net.refused >= 1 && clock.pending === 1,
        "the zone tries to resume the Pull, then waits to retry",
      );
      clock.advance(499); // each retry fails; the last one before the deadline
      await eventually(
        () => net.refused >= 2 && clock.pending === 1,
        "the zone retries while the timeout has not passed",
      );
      expect(zone.end).toBeUndefined();
      const retries = net.refused;
      clock.advance(1_000); // past the deadline: the next retry fails and gives up
      const end = await zone.closed;
      expect(net.refused).toBe(retries + 1);
      expect(end.code).toBe("transport");
      expect(end.message).toMatch(/could not be resumed within 500 ms/);
    } finally {
      await served.close();
    }
  }, 30_000);

  it("refuses a client that sends JSON with a clear error instead of retrying forever", async () => {
    const global = new GlobalServer({
      registry: new InMemoryZoneRegistry(["zone-1"]),
      authenticator: insecureZoneAuthenticator(),
      logger: silentLogger,
    });
    const served = await serveGlobal(global, { httpVersion: "1.1" });
    try {
      const transport = halfDuplexMuxTransport(createConnectTransport({ baseUrl: served.url }), {
        resumeTimeoutMs: 60_000,
      });
      const zone = await new ZoneClient({ name: "zone-1", transport, logger: silentLogger }).dial();
      await eventually(() => global.session("zone-1") !== undefined, "session listed");
      void zone.server.send(response("x", "1", 8)).catch(() => undefined);
      const end = await zone.closed;
      expect(end.code).toBe("transport");
      expect(end.message).toMatch(/pushing the zone's frames failed/);
    } finally {
      await served.close();
    }
  }, 30_000);

  it("ends the Pull with the session's failure as its status, not the end marker", async () => {
    // The raw client opens a link and never says hello: the global ends the session for a handshake timeout.
    const global = new GlobalServer({
      registry: new InMemoryZoneRegistry(["zone-1"]),
      authenticator: insecureZoneAuthenticator(),
      logger: silentLogger,
      session: { handshakeTimeoutMs: 200 },
    });
    const served = await serveGlobal(global, { httpVersion: "1.1" });
    try {
      const web = createConnectTransport({ baseUrl: served.url, useBinaryFormat: true });
      const client = createClient(HalfDuplexService, web);
      const received: PullResponse[] = [];
      const failure = await (async () => {
        for await (const r of client.pull({}, { headers: { "client-id": "zone-1" } })) {
          received.push(r);
          if (received.length > 100) throw new Error("more responses than the session can send");
        }
      })().catch((e: unknown) => e);
      expect(received.map((r) => r.frame?.value.case)).toEqual([undefined, "hello", "goaway"]);
      expect(received.some((r) => r.end)).toBe(false);
      expect(failure).toBeInstanceOf(ConnectError);
      expect((failure as ConnectError).metadata.get(KDS_ERROR_CODE_HEADER)).toBe(
        "handshake_timeout",
      );
      expect((failure as ConnectError).rawMessage).toMatch(/the global ended the session/);
      // The link is gone: resuming it says so.
      const linkId = received[0]?.linkId ?? "";
      const resumed = await (async () => {
        for await (const _ of client.pull(
          { linkId, ackedSeq: 2n },
          { headers: { "client-id": "zone-1" } },
        ))
          void _;
      })().catch((e: unknown) => e);
      expect((resumed as ConnectError).rawMessage).toMatch(/has ended/);
    } finally {
      await served.close();
    }
  });

  it("ends the session with a reason when the push loop fails unexpectedly", async () => {
    const global = new GlobalServer({
      registry: new InMemoryZoneRegistry(["zone-1"]),
      authenticator: insecureZoneAuthenticator(),
      logger: silentLogger,
    });
    const served = await serveGlobal(global, { httpVersion: "1.1" });
    // After `broken`, every Push fails (retryable) and reading the clock to time the retry throws:
    // an error the push loop does not expect.
    let broken = false;
    const clock = new (class extends ManualClock {
      override now(): number {
        if (broken) throw new Error("clock unreadable (test)");
        return super.now();
      }
    })();
    const inner = createConnectTransport({ baseUrl: served.url, useBinaryFormat: true });
    const web: Transport = {
      unary: (...args) => {
        if (broken) throw new ConnectError("push refused (test)", Code.Unavailable);
        return inner.unary(...args);
      },
      stream: (...args) => inner.stream(...args),
    };
    try {
      const zone = await new ZoneClient({
        name: "zone-1",
        transport: halfDuplexMuxTransport(web, { clock }),
        logger: silentLogger,
      }).dial();
      await eventually(() => global.session("zone-1") !== undefined, "session listed");
      broken = true;
      void zone.server.send(response("x", "1", 8)).catch(() => undefined); // fails when the session ends
      const end = await zone.closed;
      expect(end.code).toBe("transport");
      expect(end.message).toMatch(/pushing the zone's frames stopped: Error: clock unreadable/);
    } finally {
      await served.close();
    }
  }, 30_000);

  it("ends the zone's stream with the global's writer failure, without resuming a link that is gone", async () => {
    // A global whose frames fail after the hello with an error that is no session end.
    const acceptor: MuxAcceptor = {
      accept: async () =>
        (async function* (): AsyncGenerator<Frame> {
          yield create(FrameSchema, { value: { case: "hello", value: {} } });
          throw new Error("writer broke (test)");
        })(),
    };
    const hub = new HalfDuplexHub(acceptor);
    const router = createRouterTransport((r) => registerHalfDuplex(r, hub));
    let pulls = 0;
    const counted: Transport = {
      unary: (...args) => router.unary(...args),
      stream: (...args) => {
        pulls++;
        return router.stream(...args);
      },
    };
    const abort = new AbortController();
    const frames = await halfDuplexMuxTransport(counted).open({
      headers: new Headers({ "client-id": "zone-1" }),
      outbound: (async function* (): AsyncGenerator<Frame> {
        // The zone writes nothing in this test.
      })(),
      signal: abort.signal,
    });
    const cases: (string | undefined)[] = [];
    const failure = await (async () => {
      for await (const frame of frames) cases.push(frame.value.case);
    })().catch((e: unknown) => e);
    abort.abort();
    expect(cases).toEqual(["hello"]);
    expect(failure).toMatchObject({
      code: "transport",
      message: expect.stringMatching(
        /the global's frames for zone "zone-1" stopped: writer broke \(test\)/,
      ),
    });
    expect(pulls).toBe(1);
    expect(hub.links).toBe(0);
  });
});
