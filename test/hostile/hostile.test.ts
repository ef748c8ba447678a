// Hostile peers against a real global (test/hostile/fuzz.ts; `npm run fuzz`
// is the full run of 100,000+ frames, docs/hostile.md has its figures). Here:
// what a frame that does not decode gets (a goaway, not a silent OK), and a
// bounded fuzz run against a real `kds-mux global` process with a real zone
// syncing through it.
import { create, toBinary } from "@bufbuild/protobuf";
import * as http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serveGlobal, type ServedGlobal } from "../../src/adapters/node/serve-global.ts";
import { insecureZoneAuthenticator } from "../../src/auth/zone-authenticator.ts";
import { FrameSchema } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import { formatReport, runFuzz } from "./fuzz.ts";
import { envelope } from "./mutate.ts";
import { hostileCall, type Protocol } from "./peer.ts";

const hello = toBinary(
  FrameSchema,
  create(FrameSchema, {
    value: {
      case: "hello",
      value: {
        protocolVersion: 2,
        peerId: "h",
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
const connectEnd = envelope(new TextEncoder().encode("{}"), 0x02);

describe("a frame the global cannot read", () => {
  const abort = new AbortController();
  let served: ServedGlobal;
  let client: http2.ClientHttp2Session;

  beforeAll(async () => {
    const global = new GlobalControlPlane({
      authenticator: insecureZoneAuthenticator(),
      logger: silentLogger,
    });
    global.start(abort.signal);
    await global.registerZone("h");
    served = await serveGlobal(global.server);
    client = http2.connect(served.url);
  });

  afterAll(async () => {
    client?.close();
    abort.abort();
    await served?.close();
  });

  const cases: [string, Uint8Array[]][] = [
    [
      "bytes that are not protobuf",
      [envelope(hello), envelope(new Uint8Array([0xff, 0xff, 0xff]))],
    ],
    [
      "an envelope promising more bytes than it has",
      [envelope(hello), envelope(new Uint8Array([0x5a, 0x00]), 0, 100)],
    ],
    [
      "an envelope over the size limit",
      [envelope(hello), envelope(new Uint8Array(16), 0, 64 * 1024 * 1024)],
    ],
    ["a compressed envelope without an encoding", [envelope(hello), envelope(hello, 0x01)]],
  ];
  for (const [what, chunks] of cases) {
    for (const protocol of ["grpc", "connect", "grpc-web"] as Protocol[]) {
      it(`ends the session with a goaway PROTOCOL_ERROR: ${what} (${protocol})`, async () => {
        const end = await hostileCall(client, {
          protocol,
          headers: { "client-id": "h" },
          chunks: protocol === "connect" ? [...chunks, connectEnd] : chunks,
          timeoutMs: 20_000,
        });
        expect(end).toMatchObject({ goaway: "PROTOCOL_ERROR", garbled: 0 });
        expect(end.message).toMatch(/the zone sent a frame the global cannot read/);
      });
    }
  }
});

describe("hostile-peer fuzz (bounded)", () => {
  it("keeps the global alive, its store intact, its RSS bounded and the honest zone syncing; every hostile session ends with a reason", {
    timeout: 240_000,
  }, async () => {
    const report = await runFuzz({
      frames: 4_000,
      durationMs: 90_000,
      seed: 20_261_130,
      concurrency: 8,
    });
    const summary = formatReport(report);
    console.log(summary);
    expect(report.crashed, summary).toBe(false);
    expect(report.alarmingLogLines, summary).toEqual([]);
    expect(report.hangs, summary).toBe(0);
    expect(report.garbledBytes, summary).toBe(0);
    expect(report.mutatedFrames, summary).toBeGreaterThan(1_000);
    expect(Object.values(report.endReasons).reduce((a, b) => a + b, 0)).toBe(report.sessions);
    // The store: nothing that was there changed; hostile zones added only their own zone-to-global resources.
    expect(report.store.changed, summary).toEqual([]);
    expect(
      Object.keys(report.store.hostileAdded).every((kind) => kind === "Dataplane"),
      summary,
    ).toBe(true);
    // The honest zone kept syncing both ways throughout.
    expect(report.sync.failed, summary).toBe(0);
    expect(report.sync.delivered, summary).toBeGreaterThanOrEqual(4);
    // A global at rest is ~120 MiB here; the full run's peak is in docs/hostile.md. This bound catches runaway growth.
    expect(report.rss.peakMiB, summary).toBeLessThan(512);
    // Every protocol error is told with a goaway: a session ends with OK and no goaway only when the peer ended it
    // itself (its own goaway, or a half-close; a status for those is a separate change).
    expect(report.okWithoutGoaway.unexplained, summary).toBe(0);
  });
});
