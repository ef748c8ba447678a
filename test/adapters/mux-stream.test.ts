// serveGlobal's direct mux stream (src/adapters/node/mux-stream.ts): a
// zone's plain gRPC stream is served on its HTTP/2 stream, everything else
// by connect-node, and a zone cannot tell them apart by what it gets.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { compressionGzip, createGrpcTransport } from "@connectrpc/connect-node";
import { gzipSync } from "node:zlib";
import * as http2 from "node:http2";
import { afterAll, describe, expect, it } from "vitest";
import { isPlainGrpcMuxStream } from "../../src/adapters/node/mux-stream.ts";
import { serveGlobal } from "../../src/adapters/node/serve-global.ts";
import { insecureZoneAuthenticator } from "../../src/auth/zone-authenticator.ts";
import { KdsError } from "../../src/errors.ts";
import { FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { PROTOCOL_VERSION } from "../../src/mux/session.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { globalServedBothWays } from "../support/served-both-ways.ts";

const PATH = "/kds.mux.v1.MultiplexService/StreamMessage";

/** The response headers and trailers of a mux stream that sends nothing, as zone `zone`. */
function bareCall(
  url: string,
  zone: string,
  extra: http2.OutgoingHttpHeaders = {},
): Promise<{ headers: http2.IncomingHttpHeaders; trailers: http2.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const client = http2.connect(url);
    client.on("error", reject);
    const stream = client.request({
      ":method": "POST",
      ":path": PATH,
      "content-type": "application/grpc",
      te: "trailers",
      "client-id": zone,
      ...extra,
    });
    let headers: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    stream.on("response", (h) => (headers = h));
    stream.on("trailers", (t) => (trailers = t));
    stream.on("data", () => undefined);
    stream.on("error", reject);
    stream.on("close", () => {
      client.close();
      resolve({ headers, trailers });
    });
    stream.end();
  });
}

/** A mux stream of zone-1 on `client`, as a plain gRPC zone opens it. */
const muxStream = (client: http2.ClientHttp2Session): http2.ClientHttp2Stream =>
  client.request({
    ":method": "POST",
    ":path": PATH,
    "content-type": "application/grpc",
    te: "trailers",
    "client-id": "zone-1",
  });

/** The grpc-status and kds-error-code of a response (in its trailers, or its headers when trailers-only). */
const status = (r: {
  headers: http2.IncomingHttpHeaders;
  trailers: http2.IncomingHttpHeaders;
}) => ({
  grpcStatus: r.trailers["grpc-status"] ?? r.headers["grpc-status"],
  code: r.trailers["kds-error-code"] ?? r.headers["kds-error-code"],
});

describe("serveGlobal's direct mux stream", () => {
  const abort = new AbortController();
  afterAll(() => abort.abort());
  const both = globalServedBothWays();

  it("connects a zone and refuses an unregistered one with the same code either way", async () => {
    for (const served of [both.direct, both.viaConnect]) {
      const transport = connectMuxTransport(
        createGrpcTransport({ baseUrl: served.url, acceptCompression: [] }),
      );
      const session = await new ZoneClient({
        name: "zone-1",
        transport,
        logger: silentLogger,
      }).dial();
      expect(session.peerId).toBe("global");
      await session.close({ message: "test over" });
      const refused = await new ZoneClient({ name: "zone-2", transport, logger: silentLogger })
        .dial()
        .catch((e: unknown) => e);
      expect(KdsError.is(refused) && refused.code).toBe("zone_not_registered");
    }
  });

  it("serves a zone that compresses what it sends (through connect-node, each frame weighed decompressed first), and refuses a compressed frame of too many elements", async () => {
    const transport = connectMuxTransport(
      createGrpcTransport({
        baseUrl: both.direct.url,
        sendCompression: compressionGzip,
        compressMinBytes: 0,
      }),
    );
    const session = await new ZoneClient({
      name: "zone-1",
      transport,
      logger: silentLogger,
    }).dial();
    expect(session.peerId).toBe("global");
    await session.close({ message: "test over" });
    // A gzip frame of 600,000 empty strings: 6 KB compressed, 1.2 MB and over 2^19 elements decompressed.
    const hello = toBinary(
      FrameSchema,
      create(FrameSchema, {
        value: {
          case: "hello",
          value: {
            protocolVersion: PROTOCOL_VERSION,
            peerId: "zone-1",
            requestWindow: 64,
            responseWindow: 64,
            requestWindowBytes: 1 << 23,
            responseWindowBytes: 1 << 23,
            maxMessageBytes: 1 << 22,
            heartbeatIntervalMs: 15_000,
            heartbeatTimeoutMs: 60_000,
          },
        },
      }),
    );
    const dense = toBinary(
      FrameSchema,
      create(FrameSchema, {
        value: {
          case: "deltaResponse",
          value: { typeUrl: "t", removedResources: Array.from({ length: 600_000 }, () => "") },
        },
      }),
    );
    const envelope = (flags: number, body: Uint8Array): Uint8Array => {
      const out = new Uint8Array(5 + body.length);
      out[0] = flags;
      new DataView(out.buffer).setUint32(1, body.length);
      out.set(body, 5);
      return out;
    };
    const ended = await new Promise<{
      headers: http2.IncomingHttpHeaders;
      trailers: http2.IncomingHttpHeaders;
    }>((resolve, reject) => {
      const client = http2.connect(both.direct.url);
      client.on("error", reject);
      const stream = client.request({
        ":method": "POST",
        ":path": PATH,
        "content-type": "application/grpc",
        te: "trailers",
        "client-id": "zone-1",
        "grpc-encoding": "gzip",
      });
      let headers: http2.IncomingHttpHeaders = {};
      let trailers: http2.IncomingHttpHeaders = {};
      stream.on("response", (h) => (headers = h));
      stream.on("data", () => undefined);
      // The status ends the call for the zone; it never ends its own side, so the stream stays half open until it goes.
      stream.on("trailers", (t) => {
        trailers = t;
        client.destroy();
        resolve({ headers, trailers });
      });
      stream.on("close", () => resolve({ headers, trailers }));
      stream.write(envelope(0, hello));
      stream.write(envelope(1, gzipSync(dense)));
    });
    expect(status(ended)).toEqual({ grpcStatus: "3", code: "protocol_error" });
    expect(
      decodeURIComponent(String(ended.trailers["grpc-message"] ?? ended.headers["grpc-message"])),
    ).toMatch(/over the 524288 a frame may hold/);
  });

  it("serves a zone that accepts compressed responses (connect-node's default), uncompressed", async () => {
    const transport = connectMuxTransport(createGrpcTransport({ baseUrl: both.direct.url }));
    const session = await new ZoneClient({
      name: "zone-1",
      transport,
      logger: silentLogger,
    }).dial();
    expect(session.peerId).toBe("global");
    await session.close({ message: "test over" });
  });

  it("reads frames that arrive one byte per HTTP/2 DATA frame", async () => {
    const framed = (message: Frame): Uint8Array => {
      const body = toBinary(FrameSchema, message);
      const bytes = new Uint8Array(5 + body.length);
      new DataView(bytes.buffer).setUint32(1, body.length);
      bytes.set(body, 5);
      return bytes;
    };
    const hello = create(FrameSchema, {
      value: {
        case: "hello",
        value: {
          protocolVersion: 2,
          peerId: "zone-1",
          requestWindow: 64,
          responseWindow: 64,
          requestWindowBytes: 1 << 23,
          responseWindowBytes: 1 << 23,
          maxMessageBytes: 1 << 22,
          heartbeatIntervalMs: 15_000,
          heartbeatTimeoutMs: 60_000,
        },
      },
    });
    const ping = create(FrameSchema, { value: { case: "ping", value: { id: 42n } } });
    const client = http2.connect(both.direct.url);
    try {
      const stream = muxStream(client);
      const pong = new Promise<bigint>((resolve, reject) => {
        let got = Buffer.alloc(0);
        stream.on("data", (chunk: Buffer) => {
          got = Buffer.concat([got, chunk]);
          while (got.length >= 5 && got.length >= 5 + got.readUInt32BE(1)) {
            const frame = fromBinary(FrameSchema, got.subarray(5, 5 + got.readUInt32BE(1)));
            got = got.subarray(5 + got.readUInt32BE(1));
            if (frame.value.case === "pong") resolve(frame.value.value.id);
          }
        });
        stream.on("error", reject);
        stream.on("close", () =>
          reject(new Error("the stream closed before the global answered the ping")),
        );
      });
      // One write per byte, each after a turn of the timers, so node:http2 sends each in its own DATA frame instead of coalescing them.
      for (const byte of [...framed(hello), ...framed(ping)]) {
        stream.write(Buffer.from([byte]));
        await new Promise((r) => setTimeout(r, 1));
      }
      // The pong answers the ping: the global read both frames, byte by byte.
      expect(await pong).toBe(42n);
      stream.close();
    } finally {
      client.close();
    }
  });

  it("answers an admitted stream at once (its hello, so its response headers), before the zone's hello", async () => {
    const client = http2.connect(both.direct.url);
    try {
      const stream = muxStream(client);
      stream.on("error", () => undefined); // the stream is cancelled below; its headers are what is checked
      // Nothing is written: the zone's hello has not arrived, yet the global's answer tells the zone its stream was taken,
      // which is when the zone's transport opens and its hello clock starts (SessionOptions.openTimeoutMs).
      const headers = await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
        stream.once("response", resolve);
        stream.once("close", () => reject(new Error("the stream closed without response headers")));
      });
      expect(headers[":status"]).toBe(200);
      expect(headers["content-type"]).toBe("application/grpc+proto");
      expect(headers["grpc-status"]).toBeUndefined(); // not a trailers-only refusal
      stream.close(http2.constants.NGHTTP2_CANCEL);
    } finally {
      client.close();
    }
  });

  it("makes no compatibility request of a zone's stream, and one of every other call", async () => {
    // On Node the compatibility layer's request and response (ten listeners on the stream with them) would be held
    // for the zone's life; the direct path takes the stream before they are made.
    const requests: string[] = [];
    const onRequest = (request: http2.Http2ServerRequest): void => {
      requests.push(request.url);
    };
    const server = both.direct.server as http2.Http2Server;
    server.on("request", onRequest);
    try {
      const session = await new ZoneClient({
        name: "zone-1",
        transport: connectMuxTransport(
          createGrpcTransport({ baseUrl: both.direct.url, acceptCompression: [] }),
        ),
        logger: silentLogger,
      }).dial();
      await session.close({ message: "test over" });
      expect(requests).toEqual([]);
      // A stream the direct path leaves (a deadline) still reaches connect-node through a request.
      const timed = await bareCall(both.direct.url, "zone-2", { "grpc-timeout": "10S" });
      expect(status(timed).code).toBe("zone_not_registered");
      expect(requests).toEqual([PATH]);
    } finally {
      server.off("request", onRequest);
    }
  });

  it("answers a refused stream with connect-node's status and trailers", async () => {
    const plain = await bareCall(both.direct.url, "zone-2");
    const connect = await bareCall(both.viaConnect.url, "zone-2");
    expect(status(plain)).toEqual({ grpcStatus: "9", code: "zone_not_registered" });
    expect(status(plain)).toEqual(status(connect));
    expect(plain.trailers["grpc-message"]).toEqual(connect.trailers["grpc-message"]);
    expect(plain.headers["content-type"]).toEqual(connect.headers["content-type"]);
  });

  it("takes only binary gRPC with uncompressed frames and without a deadline", () => {
    const request = (
      headers: Record<string, string>,
      over: Partial<{ ":method": string; ":path": string }> = {},
    ) => ({
      ":method": "POST",
      ":path": PATH,
      "content-type": "application/grpc",
      ...headers,
      ...over,
    });
    expect(isPlainGrpcMuxStream(request({}))).toBe(true);
    expect(
      isPlainGrpcMuxStream(
        request({ "content-type": "application/grpc+proto", "grpc-accept-encoding": "identity" }),
      ),
    ).toBe(true);
    // A zone that can read compressed responses is answered uncompressed (identity is always readable).
    expect(isPlainGrpcMuxStream(request({ "grpc-accept-encoding": "gzip, br" }))).toBe(true);
    expect(isPlainGrpcMuxStream(request({ "grpc-encoding": "gzip" }))).toBe(false);
    expect(isPlainGrpcMuxStream(request({ "grpc-timeout": "10S" }))).toBe(false);
    expect(isPlainGrpcMuxStream(request({ "content-type": "application/grpc+json" }))).toBe(false);
    expect(isPlainGrpcMuxStream(request({ "content-type": "application/connect+proto" }))).toBe(
      false,
    );
    expect(isPlainGrpcMuxStream(request({ "content-type": "application/grpc-web+proto" }))).toBe(
      false,
    );
    expect(isPlainGrpcMuxStream(request({}, { ":method": "GET" }))).toBe(false);
    expect(
      isPlainGrpcMuxStream(request({}, { ":path": "/kds.mux.v1.HalfDuplexService/Open" })),
    ).toBe(false);
    expect(isPlainGrpcMuxStream(request({}, { ":path": `${PATH}?x=1` }))).toBe(false);
  });

  it("leaves every call to connect-node when there are interceptors", async () => {
    const seen: string[] = [];
    const global = new GlobalControlPlane({
      authenticator: insecureZoneAuthenticator(),
      logger: silentLogger,
    });
    global.start(abort.signal);
    await global.registerZone("zone-1");
    const served = await serveGlobal(global.server, {
      interceptors: [
        (next) => (request) => {
          seen.push(request.url);
          return next(request);
        },
      ],
    });
    try {
      const transport = connectMuxTransport(
        createGrpcTransport({ baseUrl: served.url, acceptCompression: [] }),
      );
      const session = await new ZoneClient({
        name: "zone-1",
        transport,
        logger: silentLogger,
      }).dial();
      await session.close({ message: "test over" });
      expect(seen.some((url) => url.endsWith(PATH))).toBe(true);
    } finally {
      await served.close();
    }
  });
});
