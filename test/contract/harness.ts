// Test harness shared by the vitest suite and the Deno/Bun runner: a global
// reachable over each transport, message builders, a raw peer, and asserts.
import { create } from "@bufbuild/protobuf";
import { createRouterTransport } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import { serveGlobal } from "../../src/adapters/node/serve-global.ts";
import { registerGlobal } from "../../src/global/connect-service.ts";
import { GlobalServer, type GlobalServerOptions } from "../../src/global/global-server.ts";
import { InMemoryZoneRegistry } from "../../src/global/zone-registry.ts";
import { HelloSchema, FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import {
  DiscoveryRequestSchema,
  DiscoveryResponseSchema,
  type DiscoveryRequest,
  type DiscoveryResponse,
} from "../../src/gen/kds/v1/discovery_pb.ts";
import { silentLogger } from "../../src/log.ts";
import { MuxSession, PROTOCOL_VERSION } from "../../src/mux/session.ts";
import type { SessionOptions } from "../../src/mux/options.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { memoryMuxTransport } from "../../src/transport/memory.ts";
import { halfDuplexMuxTransport } from "../../src/transport/half-duplex/client.ts";
import { createConnectTransport as createWebConnectTransport } from "@connectrpc/connect-web";
import type { MuxTransport } from "../../src/transport/transport.ts";
import { TokenAuthority } from "../../src/auth/token-authority.ts";
import { TokenZoneAuthenticator } from "../../src/auth/zone-authenticator.ts";
import { CLIENT_ID_HEADER } from "../../src/names.ts";

/**
 * A transport that presents a fresh zone token for the zone it dials as
 * (its client-id), issued by `tokens`, unless the dial already carries one:
 * every scenario runs with real token verification on the global.
 */
export function withZoneTokens(inner: MuxTransport, tokens: TokenAuthority): MuxTransport {
  return {
    name: inner.name,
    async open(request) {
      const zone = request.headers.get(CLIENT_ID_HEADER) ?? "";
      if (request.headers.has("authorization") || zone === "") return inner.open(request);
      const headers = new Headers(request.headers);
      headers.set("authorization", `Bearer ${(await tokens.issueZoneToken(zone)).token}`);
      return inner.open({ ...request, headers });
    },
  };
}

/** Every way the tests reach a global. */
export const transportKinds = [
  "memory",
  "router",
  "grpc",
  "grpc-web",
  "connect",
  "half-duplex",
] as const;
export type TransportKind = (typeof transportKinds)[number];

export class AssertionFailed extends Error {}

export function check(condition: unknown, message: string): asserts condition {
  if (!condition) throw new AssertionFailed(message);
}

export function equal<T>(actual: T, expected: T, what: string): void {
  if (actual !== expected)
    throw new AssertionFailed(`${what}: expected ${String(expected)}, got ${String(actual)}`);
}

export async function rejects(promise: Promise<unknown>, what: string): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new AssertionFailed(`${what}: expected a rejection, but it resolved`);
}

/** Waits until `condition` holds, polling; fails after `timeoutMs`. */
export async function eventually(
  condition: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline)
      throw new AssertionFailed(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Resolves after all currently queued macrotasks (lets in-flight frames land). */
export function settle(ms = 20): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Random (incompressible) bytes. */
export function randomBytes(n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i += 65_536)
    crypto.getRandomValues(out.subarray(i, Math.min(n, i + 65_536)));
  return out;
}

export function request(typeUrl: string, nonce = ""): DiscoveryRequest {
  return create(DiscoveryRequestSchema, { typeUrl, responseNonce: nonce });
}

export function response(typeUrl: string, nonce = "", payloadBytes = 0): DiscoveryResponse {
  return create(DiscoveryResponseSchema, {
    typeUrl,
    nonce,
    resources:
      payloadBytes > 0
        ? [{ typeUrl: "type.googleapis.com/kds.test.Blob", value: randomBytes(payloadBytes) }]
        : [],
  });
}

/** A global plus a way for zones to reach it over one transport kind. */
export interface TestGlobal {
  readonly global: GlobalServer;
  readonly registry: InMemoryZoneRegistry;
  /** Issues the zone tokens the global verifies. */
  readonly tokens: TokenAuthority;
  readonly kind: TransportKind;
  readonly url: string | undefined;
  transport(): MuxTransport;
  close(): Promise<void>;
}

export async function startGlobal(
  kind: TransportKind,
  options: Partial<GlobalServerOptions> & {
    zones?: string[];
    port?: number;
    tokens?: TokenAuthority;
  } = {},
): Promise<TestGlobal> {
  const registry = new InMemoryZoneRegistry(options.zones ?? ["zone-1", "zone-2"]);
  // A global restarted with `tokens` of an earlier one shares its signing key, as instances sharing a store do.
  const tokens = options.tokens ?? new TokenAuthority({ issuer: "global" });
  const global = new GlobalServer({
    registry,
    logger: silentLogger,
    authenticator: new TokenZoneAuthenticator(tokens),
    ...options,
  });
  if (kind === "memory") {
    return {
      global,
      registry,
      tokens,
      kind,
      url: undefined,
      transport: () => withZoneTokens(memoryMuxTransport(global), tokens),
      close: () => global.close(),
    };
  }
  if (kind === "router") {
    const router = createRouterTransport((r) => registerGlobal(r, global));
    return {
      global,
      registry,
      tokens,
      kind,
      url: undefined,
      transport: () => withZoneTokens(connectMuxTransport(router, { name: "router" }), tokens),
      close: () => global.close(),
    };
  }
  // The half-duplex transport runs on fetch (connect-web) over plain HTTP/1.1, as a browser would.
  const served = await serveGlobal(global, {
    port: options.port ?? 0,
    httpVersion: kind === "half-duplex" ? "1.1" : "2",
  });
  const baseUrl = served.url;
  const make = (): MuxTransport => {
    switch (kind) {
      case "grpc":
        return connectMuxTransport(createGrpcTransport({ baseUrl }), {
          name: kind,
          target: baseUrl,
        });
      case "grpc-web":
        return connectMuxTransport(createGrpcWebTransport({ baseUrl, httpVersion: "2" }), {
          name: kind,
          target: baseUrl,
        });
      case "connect":
        return connectMuxTransport(createConnectTransport({ baseUrl, httpVersion: "2" }), {
          name: kind,
          target: baseUrl,
        });
      case "half-duplex":
        return halfDuplexMuxTransport(
          createWebConnectTransport({ baseUrl, useBinaryFormat: true }),
          { target: baseUrl },
        );
    }
  };
  return {
    global,
    registry,
    tokens,
    kind,
    url: baseUrl,
    transport: () => withZoneTokens(make(), tokens),
    close: () => served.close(),
  };
}

/** Two sessions wired to each other in memory, without a global (for session-level tests). */
export function sessionPair(
  zoneOptions: SessionOptions = {},
  globalOptions: SessionOptions = {},
): { zone: MuxSession; global: MuxSession } {
  const zone = new MuxSession({ role: "zone", localId: "zone-1", options: zoneOptions });
  const global = new MuxSession({
    role: "global",
    localId: "global",
    peerId: "zone-1",
    options: globalOptions,
  });
  zone.attach(global.outbound);
  global.attach(zone.outbound);
  return { zone, global };
}

/** A peer's hello frame granting `window` frames per lane and `windowBytes` bytes per lane. */
export function helloFrame(peerId: string, window = 4, windowBytes = 1 << 20): Frame {
  return create(FrameSchema, {
    value: {
      case: "hello",
      value: create(HelloSchema, {
        protocolVersion: PROTOCOL_VERSION,
        peerId,
        requestWindow: window,
        responseWindow: window,
        requestWindowBytes: windowBytes,
        responseWindowBytes: windowBytes,
        maxMessageBytes: 1 << 20,
        heartbeatIntervalMs: 60_000,
        heartbeatTimeoutMs: 120_000,
      }),
    },
  });
}

/**
 * A hand-driven peer: the test writes raw frames into the session and reads
 * what the session writes, to break the protocol on purpose.
 */
export class RawPeer {
  readonly #queue: Frame[] = [];
  #wake: (() => void) | undefined;
  #ended = false;
  readonly #reader: AsyncIterator<Frame>;

  constructor(session: MuxSession) {
    const self = this;
    session.attach({
      async *[Symbol.asyncIterator]() {
        for (;;) {
          const next = self.#queue.shift();
          if (next !== undefined) {
            yield next;
            continue;
          }
          if (self.#ended) return;
          await new Promise<void>((r) => (self.#wake = r));
        }
      },
    });
    this.#reader = session.outbound[Symbol.asyncIterator]();
  }

  write(value: Frame["value"]): void {
    this.writeFrame(create(FrameSchema, { value }));
  }

  /** Writes a whole frame (one carrying fields beside its value). */
  writeFrame(frame: Frame): void {
    this.#queue.push(frame);
    this.#wake?.();
  }

  /** Sends a hello granting `window` frames per lane and `windowBytes` bytes per lane. */
  hello(peerId: string, window = 4, windowBytes = 1 << 20): void {
    this.write(helloFrame(peerId, window, windowBytes).value);
  }

  end(): void {
    this.#ended = true;
    this.#wake?.();
  }

  /** The next frame the session wrote (undefined once its stream ended). */
  async read(): Promise<Frame | undefined> {
    const r = await this.#reader.next();
    return r.done === true ? undefined : r.value;
  }

  /** Reads until a frame of `kind` arrives (or the stream ends). */
  async readUntil(
    kind: NonNullable<Frame["value"]["case"]>,
    limit = 1000,
  ): Promise<Frame | undefined> {
    for (let i = 0; i < limit; i++) {
      const frame = await this.read();
      if (frame === undefined || frame.value.case === kind) return frame;
    }
    throw new AssertionFailed(`no ${kind} frame within ${limit} frames`);
  }
}
