// Foreign clients against real global processes: a grpc-js client that
// speaks the documented protocol with raw bytes (frames built one by one,
// not kds-mux's session) breaks it in each of the ways docs/protocol.md
// lists, and must see the goaway, then the documented non-OK status with its
// `kds-error-code` trailer; `buf curl` does the same over the Connect
// protocol. Then a zone over the Connect protocol's JSON codec syncs both
// ways with a `kds-mux global`.
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { createConnectTransport } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DataplaneSpecSchema } from "../../examples/example-kinds/gen/kds/example/v1/example_pb.ts";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { adminClient, tokenClient, type AdminTarget } from "../../src/cli/admin-client.ts";
import { GoAwayReason, FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { silentLogger } from "../../src/log.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { muxJsonRegistry } from "../../src/kinds/json-registry.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { KdsProcess, until } from "../cli/process.ts";

/** How a call ended, as grpc-js reports it (trailers in `metadata`). */
interface CallEnd {
  code: grpc.status;
  /** grpc-message, fully percent-decoded. */
  details: string;
  errorCode: string | undefined;
}

/** One `StreamMessage` call of a grpc-js client that writes and reads raw frames. */
class ForeignCall {
  readonly frames: Frame[] = [];
  readonly ended: Promise<CallEnd>;
  readonly #call: grpc.ClientDuplexStream<Uint8Array, Buffer>;

  constructor(client: grpc.Client, headers: Record<string, string>) {
    const metadata = new grpc.Metadata();
    for (const [k, v] of Object.entries(headers)) metadata.set(k, v);
    this.#call = client.makeBidiStreamRequest<Uint8Array, Buffer>(
      "/kds.mux.v1.MultiplexService/StreamMessage",
      (bytes) => Buffer.from(bytes),
      (bytes) => bytes,
      metadata,
    );
    this.#call.on("data", (bytes: Buffer) => this.frames.push(fromBinary(FrameSchema, bytes)));
    this.#call.on("error", () => undefined); // reported through "status" below
    this.ended = new Promise((resolve) =>
      this.#call.on("status", (s: grpc.StatusObject) => {
        const code = s.metadata.get("kds-error-code")[0];
        // connect-es percent-encodes grpc-message with encodeURIComponent; grpc-js decodes it with decodeURI,
        // which leaves reserved characters (%3A, %2F, %2C, ...) encoded. Decode the rest here.
        resolve({
          code: s.code,
          details: decodeURIComponent(s.details),
          errorCode: code === undefined ? undefined : String(code),
        });
      }),
    );
  }

  /** Writes raw bytes as one gRPC message. */
  writeBytes(bytes: Uint8Array): void {
    this.#call.write(bytes);
  }

  /** Writes one frame. */
  write(frame: MessageInitShape<typeof FrameSchema>): void {
    this.writeBytes(toBinary(FrameSchema, create(FrameSchema, frame)));
  }

  /** Waits (bounded) until a frame of `kind` arrived; returns it. */
  async frame(
    kind: NonNullable<Frame["value"]["case"]>,
    timeoutMs = 30_000,
  ): Promise<Frame["value"]["value"]> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.frames.find((f) => f.value.case === kind);
      if (found !== undefined) return found.value.value;
      if (Date.now() > deadline)
        throw new Error(
          `no ${kind} frame within ${timeoutMs} ms; got ${this.frames.map((f) => f.value.case).join(", ")}`,
        );
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  cancel(): void {
    this.#call.cancel();
  }
}

/** A valid hello of zone `zone`. */
function hello(
  zone: string,
  init: Partial<{ requestWindow: number; responseWindow: number; maxMessageBytes: number }> = {},
): MessageInitShape<typeof FrameSchema> {
  return {
    value: {
      case: "hello",
      value: {
        protocolVersion: 2,
        peerId: zone,
        requestWindow: 16,
        responseWindow: 16,
        requestWindowBytes: 1 << 20,
        responseWindowBytes: 1 << 20,
        maxMessageBytes: 1 << 20,
        heartbeatIntervalMs: 15_000,
        heartbeatTimeoutMs: 60_000,
        ...init,
      },
    },
  };
}

/** Whatever the session ended with must have arrived before the status: the goaway, as the last frame. */
function lastGoAway(call: ForeignCall): { reason: GoAwayReason; message: string } {
  const last = call.frames.at(-1);
  if (last?.value.case !== "goaway")
    throw new Error(`the last frame is ${last?.value.case ?? "missing"}, not a goaway`);
  return last.value.value;
}

describe("foreign clients against a kds-mux global (real processes)", { timeout: 180_000 }, () => {
  let global: KdsProcess;
  let muxUrl: string;
  let admin: AdminTarget;
  let grpcClient: grpc.Client;
  const tokens = new Map<string, string>();
  const zones = [
    "bad-hello",
    "garbage",
    "unknown-frame",
    "too-large",
    "unknown-type",
    "revoked",
    "buf-curl",
    "json-zone",
  ];
  const headers = (zone: string): Record<string, string> => ({
    "client-id": zone,
    authorization: `Bearer ${tokens.get(zone) ?? ""}`,
  });

  beforeAll(async () => {
    global = new KdsProcess([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
    ]);
    const listening = await global.waitFor(
      /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
    );
    muxUrl = listening[1] as string;
    admin = { url: listening[2] as string };
    await adminClient(admin).apply({
      resources: zones.map((name) => ({ type: "Zone", name, specJson: '{"enabled":true}' })),
    });
    for (const zone of zones)
      tokens.set(
        zone,
        (await tokenClient(admin).generateZoneToken({ zone, validForSeconds: 3600n })).token,
      );
    grpcClient = new grpc.Client(new URL(muxUrl).host, grpc.credentials.createInsecure());
  }, 180_000);

  afterAll(async () => {
    grpcClient?.close();
    await global?.stop();
  });

  it("a hello that grants no window: goaway PROTOCOL_ERROR, then INVALID_ARGUMENT with kds-error-code protocol_error", async () => {
    const call = new ForeignCall(grpcClient, headers("bad-hello"));
    call.write(hello("bad-hello", { requestWindow: 0 }));
    const end = await call.ended;
    expect(await call.frame("hello")).toMatchObject({ protocolVersion: 2 });
    expect(lastGoAway(call)).toMatchObject({
      reason: GoAwayReason.PROTOCOL_ERROR,
      message: expect.stringContaining("window"),
    });
    expect(end).toMatchObject({
      code: grpc.status.INVALID_ARGUMENT,
      errorCode: "protocol_error",
      details: expect.stringContaining("requests 0"),
    });
  });

  it("bytes that are no Frame: goaway PROTOCOL_ERROR, then INVALID_ARGUMENT with a message", async () => {
    const call = new ForeignCall(grpcClient, headers("garbage"));
    call.writeBytes(new Uint8Array([0x52, 0x05, 0x01])); // field 10 (hello), 5 bytes long, then only one byte
    const end = await call.ended;
    expect(lastGoAway(call)).toMatchObject({
      reason: GoAwayReason.PROTOCOL_ERROR,
      message: expect.stringContaining("cannot read"),
    });
    expect(end).toMatchObject({
      code: grpc.status.INVALID_ARGUMENT,
      errorCode: "protocol_error",
      details: expect.stringContaining("cannot read"),
    });
  });

  it("a frame of a kind the protocol does not have: goaway PROTOCOL_ERROR, then INVALID_ARGUMENT", async () => {
    const call = new ForeignCall(grpcClient, headers("unknown-frame"));
    call.write(hello("unknown-frame"));
    await call.frame("hello");
    call.writeBytes(new Uint8Array([0x98, 0x06, 0x01])); // field 99, varint 1: no member of the oneof
    const end = await call.ended;
    expect(lastGoAway(call)).toMatchObject({
      reason: GoAwayReason.PROTOCOL_ERROR,
      message: expect.stringContaining("kind this version does not know"),
    });
    expect(end).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, errorCode: "protocol_error" });
  });

  it("a frame larger than the global's max_message_bytes: goaway PROTOCOL_ERROR, then INVALID_ARGUMENT", async () => {
    const call = new ForeignCall(grpcClient, headers("too-large"));
    call.write(hello("too-large"));
    await call.frame("hello");
    call.write({
      value: { case: "deltaRequest", value: { typeUrl: "x".repeat(4 * 1024 * 1024 + 1) } },
    }); // the CLI global reads at most 4 MiB
    const end = await call.ended;
    expect(lastGoAway(call)).toMatchObject({
      reason: GoAwayReason.PROTOCOL_ERROR,
      message: expect.stringContaining("cannot read"),
    });
    expect(end).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, errorCode: "protocol_error" });
  });

  it("a request for a type the global does not serve: a log line, goaway PROTOCOL_ERROR, then INVALID_ARGUMENT with kds-error-code unknown_type", async () => {
    const call = new ForeignCall(grpcClient, headers("unknown-type"));
    call.write(hello("unknown-type"));
    await call.frame("hello");
    const typeUrl = "type.googleapis.com/acme.v1.NoSuchSpec";
    call.write({
      value: { case: "deltaRequest", value: { typeUrl, resourceNamesSubscribe: ["*"] } },
    });
    const end = await call.ended;
    expect(lastGoAway(call)).toMatchObject({
      reason: GoAwayReason.PROTOCOL_ERROR,
      message: expect.stringContaining(typeUrl),
    });
    expect(end).toMatchObject({
      code: grpc.status.INVALID_ARGUMENT,
      errorCode: "unknown_type",
      details: expect.stringContaining("type.googleapis.com/kds.example.v1.MeshSpec"),
    });
    await global.waitFor(
      /zone "unknown-type" requested type "type\.googleapis\.com\/acme\.v1\.NoSuchSpec", which global "global" does not serve/,
    );
  });

  it("a zone disabled during its session: goaway ZONE_REVOKED, then FAILED_PRECONDITION with kds-error-code zone_revoked", async () => {
    const call = new ForeignCall(grpcClient, headers("revoked"));
    call.write(hello("revoked"));
    await call.frame("hello");
    await global.waitFor(/zone "revoked" connected/);
    await adminClient(admin).apply({
      resources: [{ type: "Zone", name: "revoked", specJson: '{"enabled":false}' }],
    });
    const end = await call.ended;
    expect(lastGoAway(call)).toMatchObject({ reason: GoAwayReason.ZONE_REVOKED });
    expect(end).toMatchObject({
      code: grpc.status.FAILED_PRECONDITION,
      errorCode: "zone_revoked",
      details: expect.stringContaining("revoked"),
    });
  });

  it("buf curl over the Connect protocol: a bad hello gets the goaway, then invalid_argument with the kds-error-code trailer", async () => {
    const root = fileURLToPath(new URL("../../", import.meta.url));
    const child = spawn(
      `${root}node_modules/.bin/buf`,
      [
        "curl",
        "-v",
        "--http2-prior-knowledge",
        "--protocol",
        "connect",
        "--schema",
        `${root}proto`,
        "-H",
        "client-id: buf-curl",
        "-H",
        `authorization: Bearer ${tokens.get("buf-curl") ?? ""}`,
        "-d",
        "@-",
        `${muxUrl}/kds.mux.v1.MultiplexService/StreamMessage`,
      ],
      { stdio: ["pipe", "pipe", "pipe"] },
    );
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), 90_000);
    const exit = new Promise<number | null>((resolve) => child.once("exit", resolve));
    child.stdin.end(
      JSON.stringify({
        hello: {
          protocolVersion: 2,
          peerId: "buf-curl",
          requestWindow: 70_000,
          responseWindow: 16,
          maxMessageBytes: 1 << 20,
        },
      }),
    );
    const code = await exit;
    clearTimeout(timer);
    expect(code).not.toBe(0);
    expect(stdout).toContain('"reason": "GO_AWAY_REASON_PROTOCOL_ERROR"');
    expect(stdout).toContain("requests 70000");
    expect(stderr).toMatch(/Kds-Error-Code: protocol_error/i);
    expect(stderr).toContain('"code": "invalid_argument"');
  });

  it("a zone over the Connect protocol with the JSON codec syncs both ways", async () => {
    const types = createTypeRegistry(exampleTypes);
    const transport = createConnectTransport({
      baseUrl: muxUrl,
      httpVersion: "2",
      useBinaryFormat: false,
      jsonOptions: { registry: muxJsonRegistry(types) },
    });
    const zone = new ZoneControlPlane({
      name: "json-zone",
      token: tokens.get("json-zone"),
      transport: connectMuxTransport(transport, { target: muxUrl }),
      types,
      logger: silentLogger,
    });
    const stop = new AbortController();
    const running = zone.run(stop.signal);
    try {
      await adminClient(admin).apply({
        resources: [
          { type: "Mesh", name: "default", specJson: '{"mtls":true,"description":"over JSON"}' },
        ],
      });
      const meshes = await until(
        () => zone.store.list("Mesh"),
        (r) => r.resources.some((m) => m.meta.name === "default"),
        "the Mesh on the JSON zone",
        60_000,
      );
      expect(meshes.resources.find((m) => m.meta.name === "default")?.spec).toMatchObject({
        mtls: true,
        description: "over JSON",
      });
      await zone.store.put({
        kind: "Dataplane",
        name: "dp-1",
        mesh: "default",
        spec: create(DataplaneSpecSchema, { address: "10.0.0.1", service: "web", port: 8080 }),
      });
      const got = await until(
        () => adminClient(admin).get({ type: "Dataplane" }),
        (r) => r.resources.some((d) => d.name === "json-zone.dp-1"),
        "the zone's Dataplane on the global",
        60_000,
      );
      expect(
        JSON.parse(got.resources.find((d) => d.name === "json-zone.dp-1")?.specJson ?? "{}"),
      ).toMatchObject({ address: "10.0.0.1", port: 8080 });
    } finally {
      stop.abort();
      await running.catch(() => undefined); // the zone's run ends with the abort; nothing else is checked here
    }
  });
});

describe("a silent foreign client (real process, short heartbeat)", { timeout: 120_000 }, () => {
  let child: ChildProcess;
  let url: string;
  let stderr = "";

  beforeAll(async () => {
    const script = fileURLToPath(new URL("./short-heartbeat-global.ts", import.meta.url));
    child = spawn(process.execPath, ["--import", "tsx", script], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), 90_000);
    try {
      for await (const line of createInterface({ input: child.stdout as NodeJS.ReadableStream })) {
        if (line.startsWith("{")) {
          url = String((JSON.parse(line) as { url: string }).url);
          break;
        }
      }
    } finally {
      clearTimeout(timer);
    }
    if (url === undefined) throw new Error(`the global did not start: ${stderr}`);
  }, 120_000);

  afterAll(async () => {
    if (child === undefined || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.stdin?.end();
    await exited;
  });

  it("a client that says hello, then nothing: pings, goaway HEARTBEAT_TIMEOUT, then UNAVAILABLE with kds-error-code heartbeat_timeout", async () => {
    const client = new grpc.Client(new URL(url).host, grpc.credentials.createInsecure());
    try {
      const call = new ForeignCall(client, { "client-id": "foreign" });
      call.write(hello("foreign"));
      const end = await call.ended;
      expect(call.frames.filter((f) => f.value.case === "ping").length).toBeGreaterThan(0);
      expect(lastGoAway(call)).toMatchObject({ reason: GoAwayReason.HEARTBEAT_TIMEOUT });
      expect(end).toMatchObject({
        code: grpc.status.UNAVAILABLE,
        errorCode: "heartbeat_timeout",
        details: expect.stringContaining("nothing heard"),
      });
    } finally {
      client.close();
    }
  });
});
