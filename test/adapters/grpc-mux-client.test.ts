// The zone's plain gRPC client (src/adapters/node/grpc-mux-client.ts): a zone
// syncs through it against both of serveGlobal's servers, is refused with the
// same KdsError code as through connect-node, and cancels, refuses oversize
// frames, reads trailers-only errors and reconnects after a lost connection.
import { create, toBinary } from "@bufbuild/protobuf";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { AddressInfo } from "node:net";
import * as http2 from "node:http2";
import { describe, expect, it } from "vitest";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { grpcMuxTransport } from "../../src/adapters/node/grpc-mux-client.ts";
import { KdsError } from "../../src/errors.ts";
import { FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { silentLogger } from "../../src/log.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import type { MuxTransport } from "../../src/transport/transport.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { globalServedBothWays } from "../support/served-both-ways.ts";
import { eventually } from "../contract/harness.ts";
import { dataplane, mesh } from "../sync/helpers.ts";

/** Outbound frames that never end until `signal` aborts. */
async function* silent(signal: AbortSignal): AsyncGenerator<Frame, void, undefined> {
  await new Promise<void>((resolve) =>
    signal.addEventListener("abort", () => resolve(), { once: true }),
  );
}

/** The KdsError code `promise` rejects with (or "resolved"). */
async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return "resolved";
  } catch (error) {
    return KdsError.is(error) ? error.code : `not a KdsError: ${String(error)}`;
  }
}

/** The KdsError code a stream opened on `transport` ends with, whether open() or the first read rejects ("resolved" when it ends cleanly). */
async function streamCode(
  transport: MuxTransport,
  headers: Headers,
  signal: AbortSignal,
): Promise<string> {
  return codeOf(
    (async () => {
      for await (const _ of await transport.open({ headers, outbound: silent(signal), signal }))
        void _;
    })(),
  );
}

/** A bare HTTP/2 server whose mux stream `answer` handles, for protocol cases serveGlobal never produces. */
async function fakeGlobal(
  answer: (stream: http2.ServerHttp2Stream, session: http2.ServerHttp2Session) => void,
): Promise<{ url: string; close: () => Promise<void>; streams: () => number }> {
  const server = http2.createServer();
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  let count = 0;
  server.on("stream", (stream) => {
    count++;
    stream.on("error", () => undefined); // the client's reset is expected here
    answer(stream, stream.session as http2.ServerHttp2Session);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    streams: () => count,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const session of sessions) session.destroy(); // clients that keep their connection open
      }),
  };
}

describe("grpcMuxTransport", () => {
  const types = createTypeRegistry(exampleTypes);
  const both = globalServedBothWays(types);

  it("syncs a zone both ways, through the direct mux stream and through connect-node's server", async () => {
    for (const [i, served] of [both.direct, both.viaConnect].entries()) {
      const stop = new AbortController();
      const transport = grpcMuxTransport(served.url, { signal: stop.signal });
      const zone = new ZoneControlPlane({
        name: "zone-1",
        transport,
        types,
        logger: silentLogger,
        backoff: { baseMs: 5, capMs: 20 },
      });
      const running = zone.run(stop.signal); // resolves once stopped; a rejection fails the test
      try {
        await both.global.store.put(mesh(`m${i}`));
        await eventually(
          async () => (await zone.store.get("Mesh", "", `m${i}`)) !== undefined,
          `mesh m${i} reaches the zone`,
        );
        await zone.store.put(dataplane("default", `web${i}`));
        await eventually(
          async () =>
            (await both.global.store.get("Dataplane", "default", `zone-1.web${i}`)) !== undefined,
          `dataplane web${i} reaches the global`,
        );
      } finally {
        stop.abort();
        await running;
      }
      await eventually(
        () => both.global.server.session("zone-1") === undefined,
        "the zone's session ends",
      );
    }
  });

  it("is refused with the same KdsError code as connect-node's gRPC client", async () => {
    for (const served of [both.direct, both.viaConnect]) {
      const transports: MuxTransport[] = [
        connectMuxTransport(createGrpcTransport({ baseUrl: served.url })),
        grpcMuxTransport(served.url),
      ];
      const codes = [];
      for (const transport of transports) {
        codes.push(
          await codeOf(new ZoneClient({ name: "zone-2", transport, logger: silentLogger }).dial()),
        );
        const stop = new AbortController();
        codes.push(await streamCode(transport, new Headers(), stop.signal));
        stop.abort();
      }
      expect(codes).toEqual([
        "zone_not_registered",
        "missing_client_id",
        "zone_not_registered",
        "missing_client_id",
      ]);
      for (const t of transports) if ("close" in t) (t as { close(): void }).close();
    }
  });

  it("cancels the stream with RST_STREAM CANCEL when its signal aborts, and the read ends with an abort", async () => {
    let serverSide: http2.ServerHttp2Stream | undefined;
    const fake = await fakeGlobal((stream) => {
      serverSide = stream;
      stream.respond({ ":status": 200, "content-type": "application/grpc" });
    });
    const transport = grpcMuxTransport(fake.url);
    const stop = new AbortController();
    const messages = await transport.open({
      headers: new Headers(),
      outbound: silent(stop.signal),
      signal: stop.signal,
    });
    const reading = codeOf(
      (async () => {
        for await (const _ of messages) void _;
      })(),
    );
    stop.abort();
    expect(await reading).toBe("aborted");
    await eventually(() => serverSide?.closed === true, "the global's side of the stream closes");
    expect(serverSide?.rstCode).toBe(http2.constants.NGHTTP2_CANCEL);
    transport.close();
    await fake.close();
  });

  it("refuses a frame above maxMessageBytes before buffering it, and a compressed frame", async () => {
    const frame = (flag: number, length: number): Buffer => {
      const b = Buffer.alloc(5);
      b[0] = flag;
      b.writeUInt32BE(length, 1);
      return b;
    };
    for (const [bytes, words] of [
      [frame(0, 2048), /2048 bytes, above the read limit of 1024/],
      [frame(1, 4), /compressed/],
    ] as const) {
      const fake = await fakeGlobal((stream) => {
        stream.respond({ ":status": 200, "content-type": "application/grpc" });
        stream.write(bytes);
      });
      const stop = new AbortController();
      const transport = grpcMuxTransport(fake.url, { maxMessageBytes: 1024 });
      const messages = await transport.open({
        headers: new Headers(),
        outbound: silent(stop.signal),
        signal: stop.signal,
      });
      const error = await (async () => {
        for await (const _ of messages) void _;
      })().catch((e: unknown) => e);
      expect(KdsError.is(error) && error.code).toBe("protocol_error");
      expect((error as Error).message).toMatch(words);
      stop.abort();
      transport.close();
      await fake.close();
    }
  });

  it("reads a trailers-only error, a non-200 status and a non-gRPC content type as connect-node does", async () => {
    const cases: Array<[http2.OutgoingHttpHeaders, string]> = [
      [
        {
          ":status": 200,
          "content-type": "application/grpc",
          "grpc-status": "9",
          "grpc-message": "disabled",
          "kds-error-code": "zone_disabled",
        },
        "zone_disabled",
      ],
      [{ ":status": 503, "content-type": "text/plain" }, "transport"],
      [{ ":status": 200, "content-type": "text/html" }, "transport"],
    ];
    for (const [headers, code] of cases) {
      const fake = await fakeGlobal((stream) => stream.respond(headers, { endStream: true }));
      const stop = new AbortController();
      const connect = connectMuxTransport(createGrpcTransport({ baseUrl: fake.url }));
      const grpc = grpcMuxTransport(fake.url);
      const ours = await streamCode(grpc, new Headers(), stop.signal);
      const theirs = await streamCode(connect, new Headers(), stop.signal);
      // open() may reject, or the iterable may: either way, the same code.
      expect({ ours, theirs }).toEqual({ ours: code, theirs: code });
      stop.abort();
      grpc.close();
      await fake.close();
    }
  });

  it("ends the stream with an error when the connection is lost, and the next open reconnects", async () => {
    let first = true;
    const fake = await fakeGlobal((stream, session) => {
      stream.respond({ ":status": 200, "content-type": "application/grpc" });
      const pong = create(FrameSchema, { value: { case: "pong", value: { id: 1n } } });
      const body = toBinary(FrameSchema, pong);
      const b = Buffer.alloc(5 + body.length);
      b.writeUInt32BE(body.length, 1);
      b.set(body, 5);
      stream.write(b);
      if (first) {
        first = false;
        setTimeout(() => session.destroy(), 20);
      }
    });
    const stop = new AbortController();
    const transport = grpcMuxTransport(fake.url);
    const read = async (): Promise<{ got: number; end: string }> => {
      let got = 0;
      const messages = await transport.open({
        headers: new Headers(),
        outbound: silent(stop.signal),
        signal: stop.signal,
      });
      const end = await codeOf(
        (async () => {
          for await (const m of messages) {
            if (m.value.case === "pong") got++;
            if (got === 1 && !first && fake.streams() > 1) return;
          }
        })(),
      );
      return { got, end };
    };
    expect(await read()).toEqual({ got: 1, end: "transport" });
    const again = await transport.open({
      headers: new Headers(),
      outbound: silent(stop.signal),
      signal: stop.signal,
    });
    const it = again[Symbol.asyncIterator]();
    const next = await it.next();
    expect(next.done === false && next.value.value.case).toBe("pong");
    expect(fake.streams()).toBe(2);
    await it.return?.();
    stop.abort();
    transport.close();
    await fake.close();
  });

  it("ends with an error, not a hang, when the connection is lost before the zone starts reading", async () => {
    let serverClosed = false;
    const fake = await fakeGlobal((stream, session) => {
      stream.respond({ ":status": 200, "content-type": "application/grpc" });
      session.once("close", () => (serverClosed = true));
      setImmediate(() => session.destroy());
    });
    const stop = new AbortController();
    const transport = grpcMuxTransport(fake.url);
    const messages = await transport.open({
      headers: new Headers(),
      outbound: silent(stop.signal),
      signal: stop.signal,
    });
    await eventually(() => serverClosed, "the global's side is gone");
    await new Promise((resolve) => setTimeout(resolve, 50)); // lets the client see the loss first (the code is the same either way)
    expect(
      await codeOf(
        (async () => {
          for await (const _ of messages) void _;
        })(),
      ),
    ).toBe("transport");
    stop.abort();
    transport.close();
    await fake.close();
  });
});
