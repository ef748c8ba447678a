// Throughput of one logical stream of a mux session vs a raw Connect bidi
// echo vs a grpc-js bidi echo, all gRPC over h2c on loopback, same proto,
// incompressible payloads, and the floor: plain node:http2 carrying the same
// encoded frame, length-prefixed, with no protobuf per message. Each side
// echoes what it receives; a window of messages is in flight.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { createClient, type ConnectRouter } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { serveRoutes } from "../src/adapters/node/serve-global.ts";
import { DEFAULT_HTTP2_WINDOW_BYTES } from "../src/adapters/node/http2-windows.ts";
import { FrameSchema, MultiplexService, type Frame } from "../src/gen/kds/mux/v1/mux_pb.ts";
import { DiscoveryRequestSchema, DiscoveryResponseSchema } from "../src/gen/kds/v1/discovery_pb.ts";
import { PrefixedReader, lengthPrefixed } from "./floor-wire.ts";
// The mux is measured without zone authentication (a token check happens once per connect, not per frame).
import { insecureZoneAuthenticator } from "../src/auth/zone-authenticator.ts";
import { GlobalServer } from "../src/global/global-server.ts";
import { InMemoryZoneRegistry } from "../src/global/zone-registry.ts";
import { silentLogger } from "../src/log.ts";
import { serveGlobal } from "../src/adapters/node/serve-global.ts";
import { connectMuxTransport } from "../src/transport/connect.ts";
import { ZoneClient } from "../src/zone/zone-client.ts";
import { untilSession } from "./session.ts";
import { grpcMuxTransport } from "../src/adapters/node/grpc-mux-client.ts";
import { windowedSessionManager } from "../src/adapters/node/http2-windows.ts";
import type { MuxTransport } from "../src/transport/transport.ts";

export interface EchoResult {
  readonly messages: number;
  readonly seconds: number;
  readonly msgPerSec: number;
  readonly mbPerSec: number;
}

function payload(size: number): Uint8Array {
  const out = new Uint8Array(size);
  for (let i = 0; i < size; i += 65_536)
    crypto.getRandomValues(out.subarray(i, Math.min(size, i + 65_536)));
  return out;
}

/** A request frame carrying `size` random bytes (in error_detail.details, the request's one bytes field). */
function benchRequest(data: Uint8Array) {
  return create(DiscoveryRequestSchema, {
    typeUrl: "bench",
    errorDetail: { details: [{ typeUrl: "bench", value: data }] },
  });
}

const result = (messages: number, size: number, ms: number): EchoResult => ({
  messages,
  seconds: ms / 1000,
  msgPerSec: messages / (ms / 1000),
  mbPerSec: (messages * size * 2) / (ms / 1000) / 1e6, // both directions carry the payload
});

/** A raw Connect bidi echo of `MultiplexService` frames. */
export async function rawConnectEcho(
  size: number,
  count: number,
  window = 64,
): Promise<EchoResult> {
  const served = await serveRoutes((router: ConnectRouter) =>
    router.service(MultiplexService, {
      async *streamMessage(requests) {
        for await (const m of requests) yield m;
      },
    }),
  );
  try {
    const client = createClient(
      MultiplexService,
      createGrpcTransport({ baseUrl: served.url, acceptCompression: [] }),
    );
    const msg = create(FrameSchema, {
      value: { case: "request", value: benchRequest(payload(size)) },
    });
    let received = 0;
    let release: (() => void) | undefined;
    const started = performance.now();
    async function* requests(): AsyncGenerator<Frame> {
      for (let i = 0; i < count; i++) {
        while (i - received >= window) await new Promise<void>((r) => (release = r));
        yield msg;
      }
    }
    for await (const _ of client.streamMessage(requests())) {
      received++;
      release?.();
      release = undefined;
      if (received === count) break;
    }
    return result(count, size, performance.now() - started);
  } finally {
    await served.close();
  }
}

/**
 * The zone's client of the mux echo, as the sync and fan-out scenarios pick
 * it: `grpcMuxTransport` (plain gRPC on node:http2, the CLI zone's default
 * `--transport grpc`), or with `KDS_BENCH_ZONE_CLIENT=connect` connect-node's
 * gRPC client with HTTP/2 windows sized to the mux's (`--transport
 * grpc-connect`), for A/B runs.
 */
function zoneTransport(url: string): MuxTransport & { close?(): void } {
  return process.env.KDS_BENCH_ZONE_CLIENT === "connect"
    ? connectMuxTransport(
        createGrpcTransport({
          baseUrl: url,
          acceptCompression: [],
          sessionManager: windowedSessionManager(url),
        }),
      )
    : grpcMuxTransport(url);
}

/** The same echo through one logical stream of a mux session: zone client view -> global server view -> back. */
export async function muxEcho(size: number, count: number): Promise<EchoResult> {
  const global = new GlobalServer({
    registry: new InMemoryZoneRegistry(["bench"]),
    authenticator: insecureZoneAuthenticator(),
    logger: silentLogger,
  });
  const served = await serveGlobal(global);
  const transport = zoneTransport(served.url);
  try {
    const zone = await new ZoneClient({
      name: "bench",
      transport,
      logger: silentLogger,
    }).dial();
    const gs = await untilSession(global, "bench");
    const data = payload(size);
    const request = benchRequest(data);
    const response = create(DiscoveryResponseSchema, {
      typeUrl: "bench",
      resources: [{ typeUrl: "bench", value: data }],
    });
    const started = performance.now();
    const echo = (async () => {
      for (let i = 0; i < count; i++) {
        await gs.server.recv();
        await gs.server.send(response);
      }
    })();
    const send = (async () => {
      for (let i = 0; i < count; i++) await zone.client.send(request);
    })();
    for (let i = 0; i < count; i++) await zone.client.recv();
    await Promise.all([echo, send]);
    const r = result(count, size, performance.now() - started);
    await zone.close();
    return r;
  } finally {
    transport.close?.();
    await served.close();
  }
}

/** The same echo on @grpc/grpc-js (client and server), same proto, serialized with protobuf-es. */
export async function grpcJsEcho(size: number, count: number, window = 64): Promise<EchoResult> {
  const method = {
    path: "/kds.mux.v1.MultiplexService/StreamMessage",
    requestStream: true,
    responseStream: true,
    requestSerialize: (m: Frame) => Buffer.from(toBinary(FrameSchema, m)),
    requestDeserialize: (b: Buffer) => fromBinary(FrameSchema, b),
    responseSerialize: (m: Frame) => Buffer.from(toBinary(FrameSchema, m)),
    responseDeserialize: (b: Buffer) => fromBinary(FrameSchema, b),
  };
  const service = { streamMessage: method } as unknown as grpc.ServiceDefinition;
  const server = new grpc.Server();
  server.addService(service, {
    streamMessage: (call: grpc.ServerDuplexStream<Frame, Frame>) => {
      call.on("data", (m: Frame) => call.write(m));
      call.on("end", () => call.end());
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (e, p) =>
      e ? reject(e) : resolve(p),
    ),
  );
  const Client = grpc.makeGenericClientConstructor(
    service as unknown as grpc.ServiceDefinition,
    "MultiplexService",
  );
  const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as {
    streamMessage(): grpc.ClientDuplexStream<Frame, Frame>;
    close(): void;
  };
  try {
    const msg = create(FrameSchema, {
      value: { case: "request", value: benchRequest(payload(size)) },
    });
    const call = client.streamMessage();
    const started = performance.now();
    let sent = 0;
    let received = 0;
    await new Promise<void>((resolve, reject) => {
      const pump = (): void => {
        while (sent < count && sent - received < window) {
          sent++;
          call.write(msg);
        }
      };
      call.on("data", () => {
        received++;
        if (received === count) {
          call.end();
          resolve();
        } else pump();
      });
      call.on("error", reject);
      pump();
    });
    return result(count, size, performance.now() - started);
  } finally {
    client.close();
    await new Promise<void>((r) => server.tryShutdown(() => r()));
  }
}

/**
 * The echo's floor: plain node:http2 (one connection, one stream), the
 * client writing the same encoded frame (gRPC length-prefixed, encoded once)
 * with `window` in flight, the server splitting the stream into frames and
 * writing each back length-prefixed, the client counting whole frames.
 */
export async function http2Echo(size: number, count: number, window = 64): Promise<EchoResult> {
  // Windows as large as the zone's and the global's (src/adapters/node/http2-windows.ts): Node's 64 KiB default would stall a window of 64 KiB frames.
  const settings = { initialWindowSize: DEFAULT_HTTP2_WINDOW_BYTES };
  const server = http2.createServer({ settings });
  server.on("session", (s) => s.setLocalWindowSize(DEFAULT_HTTP2_WINDOW_BYTES));
  server.on("stream", (stream) => {
    stream.respond({ ":status": 200 });
    const reader = new PrefixedReader(size + 1024);
    stream.on("data", (chunk: Buffer) => {
      for (const body of reader.push(chunk)) stream.write(lengthPrefixed(body));
    });
    stream.on("end", () => stream.end());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const session = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {
    settings,
  });
  session.once("connect", () => session.setLocalWindowSize(DEFAULT_HTTP2_WINDOW_BYTES));
  try {
    const frame = lengthPrefixed(
      toBinary(
        FrameSchema,
        create(FrameSchema, { value: { case: "request", value: benchRequest(payload(size)) } }),
      ),
    );
    const stream = session.request({ ":method": "POST", ":path": "/echo" });
    const reader = new PrefixedReader(size + 1024);
    const started = performance.now();
    let sent = 0;
    let received = 0;
    await new Promise<void>((resolve, reject) => {
      const pump = (): void => {
        while (sent < count && sent - received < window) {
          sent++;
          stream.write(frame);
        }
      };
      stream.on("data", (chunk: Buffer) => {
        received += reader.push(chunk).length;
        if (received === count) {
          stream.end();
          resolve();
        } else pump();
      });
      stream.on("error", reject);
      pump();
    });
    return result(count, size, performance.now() - started);
  } finally {
    session.close();
    await new Promise<void>((r) => server.close(() => r()));
  }
}
