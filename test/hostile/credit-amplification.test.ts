// The credit-amplification attack against a real `kds-mux global` process:
// frames of 1.9 million empty strings, 3.8 MiB on the wire and about 15 MiB
// decoded. When byte credit counted a string by its length, such a frame
// cost 66 bytes of credit, so a zone that sent 64 per lane and read nothing
// took the global from 115 to 1,715 MiB. Credit is now the encoded length
// and the memory budget counts the decoded estimate: the zone is ended after
// a frame or two per lane, and five such zones leave the global alive and
// under its budget.
import * as http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, describe, expect, it } from "vitest";
import { HelloSchema, FrameSchema } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import {
  DeltaDiscoveryResponseSchema,
  DiscoveryRequestSchema,
} from "../../src/gen/kds/v1/discovery_pb.ts";
import { PROTOCOL_VERSION } from "../../src/mux/session.ts";
import { KdsProcess, run } from "../cli/process.ts";
import { envelope } from "./mutate.ts";
import { STREAM_PATH } from "./peer.ts";
import { rssMiB } from "./floods.ts";

const processes: KdsProcess[] = [];
const sessions: http2.ClientHttp2Session[] = [];
afterAll(async () => {
  for (const s of sessions) s.destroy();
  for (const p of processes) await p.stop();
});

const SERVED_TYPE = "type.googleapis.com/kds.example.v1.MeshSpec";
/** A request and a response (a delta response's removals) of `count` empty strings each, encoded once. */
function emptyStringFrames(count: number): Uint8Array[] {
  const empties = Array.from({ length: count }, () => "");
  return [
    create(FrameSchema, {
      value: {
        case: "request",
        value: create(DiscoveryRequestSchema, {
          typeUrl: SERVED_TYPE,
          responseNonce: "x",
          resourceNames: empties,
        }),
      },
    }),
    create(FrameSchema, {
      value: {
        case: "deltaResponse",
        value: create(DeltaDiscoveryResponseSchema, {
          typeUrl: "type.hostile",
          nonce: "x",
          removedResources: empties,
        }),
      },
    }),
  ].map((frame) => envelope(toBinary(FrameSchema, frame)));
}
/** The issue's frame: 1.9 million empty strings, 3.8 MiB. */
const ISSUE_FRAMES = emptyStringFrames(1_900_000);
/** Just under the most elements a frame may hold (2^19), 1 MiB: these pass the element count, so credit and the memory estimate must hold them. */
const UNDER_CAP_FRAMES = emptyStringFrames(500_000);

/**
 * A ping whose id (a varint) arrives length-delimited around 1.9 million
 * two-byte fields: a lenient decoder reads them as unknown fields (159 MiB
 * for 2 MB, measured), so the frame is refused for the wire type before it
 * is decoded.
 */
const HIDDEN_FIELDS_PING = (() => {
  const inner = new Uint8Array(3_800_000);
  for (let i = 0; i < inner.length; i += 2) inner[i] = 0x10; // field 2, varint 0
  const id = new Uint8Array([0x0a, ...varint(inner.length), ...inner]);
  const frame = envelope(new Uint8Array([0x5a, ...varint(id.length), ...id])); // Message.ping (11), length-delimited
  return [frame, frame];
})();

function varint(n: number): number[] {
  const out: number[] = [];
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return out;
}

/** The two ways a zone's stream reaches the global: gRPC (the direct path, which weighs a frame before decoding it) and gRPC-web (through connect-node, which decodes first). */
const contentTypes = {
  grpc: "application/grpc+proto",
  "grpc-web": "application/grpc-web+proto",
} as const;

/**
 * A zone that says hello (granting the global almost no window, so its own
 * consumers stall), then writes `perLane` frames of empty strings on each
 * lane and never reads. `status` says how the global ended the call, as far
 * as a client that reads nothing can see it (gRPC-web carries its status in
 * the body: once `close` ends the call, it reads "closed").
 */
function amplify(
  url: string,
  zone: string,
  perLane: number,
  frames: Uint8Array[],
  protocol: keyof typeof contentTypes = "grpc",
): { status: Promise<string>; close(): void } {
  const client = http2.connect(url);
  sessions.push(client);
  client.on("error", () => undefined); // the global may cut the connection: the call's end says how
  const stream = client.request({
    ":method": "POST",
    ":path": STREAM_PATH,
    "content-type": contentTypes[protocol],
    te: "trailers",
    "client-id": zone,
  });
  const hello = create(FrameSchema, {
    value: {
      case: "hello",
      value: create(HelloSchema, {
        protocolVersion: PROTOCOL_VERSION,
        peerId: zone,
        requestWindow: 1,
        responseWindow: 1,
        requestWindowBytes: 1024,
        responseWindowBytes: 1024,
        maxMessageBytes: 1024,
        heartbeatIntervalMs: 600_000,
        heartbeatTimeoutMs: 1_200_000,
      }),
    },
  });
  // Never read the frames; only the status at the end, from the trailers.
  stream.pause();
  // Written as fast as HTTP/2 flow control lets them go (a write beyond it would only grow this client's own buffers).
  void (async () => {
    stream.write(envelope(toBinary(FrameSchema, hello)));
    for (let i = 0; i < 2 * perLane && !stream.destroyed; i++) {
      if (!stream.write(frames[i % 2] as Uint8Array))
        await new Promise((resolve) => {
          stream.once("drain", resolve);
          stream.once("close", resolve);
        });
    }
  })();
  const status = new Promise<string>((resolve) => {
    stream.on(
      "response",
      (headers) =>
        headers["grpc-status"] !== undefined &&
        resolve(
          `${String(headers["grpc-status"])} ${String(headers["kds-error-code"] ?? "")}`.trim(),
        ),
    );
    stream.on("trailers", (trailers) =>
      resolve(
        `${String(trailers["grpc-status"])} ${String(trailers["kds-error-code"] ?? "")}`.trim(),
      ),
    );
    stream.on("error", (error) => resolve(`reset: ${error.message}`));
    stream.on("close", () => resolve(`closed (${stream.rstCode})`));
  });
  return { status, close: () => client.destroy() };
}

describe("frames of empty strings (credit amplification)", { timeout: 600_000 }, () => {
  it("one zone sending 64 per lane is ended having added under 64 MiB; five at once leave the global alive and under its budget", async () => {
    const global = new KdsProcess([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--insecure-no-zone-auth",
      "--log-level",
      "info",
    ]);
    processes.push(global);
    const m = await global.waitFor(
      /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
      120_000,
    );
    const [muxUrl, adminUrl] = [m[1] as string, m[2] as string];
    const pid = global.child.pid as number;
    const zones = Array.from({ length: 11 }, (_, i) => `amp-${i}`);
    expect(
      (
        await run(
          ["apply", "-f", "-", "--server", adminUrl],
          zones.map((z) => `type: Zone\nname: ${z}\nspec:\n  enabled: true\n`).join("---\n"),
        )
      ).code,
    ).toBe(0);

    let peak = 0;
    const sampler = setInterval(() => {
      if (global.child.exitCode === null) peak = Math.max(peak, rssMiB(pid));
    }, 20);
    const ended = (zone: string) =>
      global.waitFor(
        new RegExp(`zone "${zone}" session ended \\((protocol_error|resource_exhausted)\\)`),
        120_000,
      );
    try {
      // One zone at a time: the issue's frame over gRPC and over gRPC-web, refused by its element count (before decoding on
      // gRPC, after on gRPC-web), within 64 MiB; then frames just under the element limit, which are decoded and buffered
      // until the lane holds 4 times its byte window by the decoded estimate (64 MiB for the session's two 8 MiB lanes): the
      // bound there is that estimate plus the garbage decoding leaves until the next collection, about as much again.
      const single: [string, Uint8Array[], keyof typeof contentTypes, number][] = [
        ["1.9M empty strings, gRPC", ISSUE_FRAMES, "grpc", 64],
        ["1.9M empty strings, gRPC-web", ISSUE_FRAMES, "grpc-web", 64],
        ["500k empty strings, gRPC", UNDER_CAP_FRAMES, "grpc", 192],
        ["pings hiding 1.9M fields behind a wire type, gRPC", HIDDEN_FIELDS_PING, "grpc", 64],
        [
          "pings hiding 1.9M fields behind a wire type, gRPC-web",
          HIDDEN_FIELDS_PING,
          "grpc-web",
          64,
        ],
      ];
      for (const [index, [what, frames, protocol, limitMiB]] of single.entries()) {
        const zone = `amp-${index}`;
        const baseline = rssMiB(pid);
        peak = baseline;
        const call = amplify(muxUrl, zone, 64, frames, protocol);
        await ended(zone);
        const added = peak - baseline;
        call.close();
        console.log(
          `one zone, 64 frames per lane of ${what}: RSS ${baseline.toFixed(0)} -> peak ${(baseline + added).toFixed(0)} MiB (+${added.toFixed(0)}); the call ended: ${await call.status}`,
        );
        expect(added).toBeLessThan(limitMiB);
      }

      const five = zones.slice(single.length, single.length + 5);
      const calls = five.map((z, i) =>
        amplify(
          muxUrl,
          z,
          64,
          i % 2 === 0 ? ISSUE_FRAMES : UNDER_CAP_FRAMES,
          i % 3 === 1 ? "grpc-web" : "grpc",
        ),
      );
      for (const z of five) await ended(z);
      for (const call of calls) call.close();
      const statuses = await Promise.all(calls.map((call) => call.status));
      console.log(
        `five zones at once: RSS peak ${peak.toFixed(0)} MiB (budget 256 MiB); the calls ended: ${statuses.join("; ")}`,
      );
      expect(global.child.exitCode).toBeNull();
      expect(peak).toBeLessThan(256 + 128);
      const lines =
        global.output.match(/session ended \((protocol_error|resource_exhausted)\): [^\n]*/g) ?? [];
      expect(lines).toHaveLength(single.length + five.length);
      for (const line of lines)
        expect(line).toMatch(
          /a frame may hold|over 16 times|byte window|holds per lane|memory budget|not its own/,
        );
      console.log(
        [...new Set(lines.map((line) => line.slice(0, 240)))].map((line) => `  ${line}`).join("\n"),
      );
    } finally {
      clearInterval(sampler);
    }
  });
});
