// Hostile peers against a real `kds-mux global` process: registered zones
// that say hello, then send frames of the largest size without ever reading.
// The global's memory stays bounded by its per-session byte windows and its
// per-process budget (--max-buffer-bytes), it ends those sessions with the
// documented codes, it stays alive, and a real zone keeps syncing meanwhile.
import { create } from "@bufbuild/protobuf";
import type { Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, describe, expect, it } from "vitest";
import {
  HelloSchema,
  FrameSchema,
  MultiplexService,
  type Frame,
} from "../../src/gen/kds/mux/v1/mux_pb.ts";
import {
  DiscoveryRequestSchema,
  DiscoveryResponseSchema,
} from "../../src/gen/kds/v1/discovery_pb.ts";
import { KdsProcess, run, until } from "../cli/process.ts";
import { rssMiB } from "./floods.ts";

const MiB = 1024 * 1024;
/** Just under the global's largest frame (4 MiB), once encoded. */
const PAYLOAD = 4 * MiB - 4096;
const processes: KdsProcess[] = [];
const calls: AbortController[] = [];
afterAll(async () => {
  for (const c of calls) c.abort();
  for (const p of processes) await p.stop();
});

/** A type the global serves (a request for another ends the session before any buffer fills). */
const SERVED_TYPE = "type.googleapis.com/kds.example.v1.MeshSpec";

/** A frame of the largest size on the request or response lane (a NACK-like request, an unasked response); the payload is built once and shared. */
const payload = new Uint8Array(PAYLOAD).fill(7);
function bigFrame(i: number): Frame {
  return i % 2 === 0
    ? create(FrameSchema, {
        value: {
          case: "request",
          value: create(DiscoveryRequestSchema, {
            typeUrl: SERVED_TYPE,
            responseNonce: String(i),
            errorDetail: { code: 3, message: "x", details: [{ typeUrl: "t", value: payload }] },
          }),
        },
      })
    : create(FrameSchema, {
        value: {
          case: "response",
          value: create(DiscoveryResponseSchema, {
            typeUrl: "type.hostile",
            nonce: String(i),
            resources: [{ typeUrl: "t", value: payload }],
          }),
        },
      });
}

/**
 * A registered zone that sends its hello (granting the global almost no
 * window, so the global's own sends stall and its consumers stop taking
 * frames), then `frames` frames of the largest size, alternating lanes, and
 * never reads a thing: frames arrive faster than the global's consumers
 * take them, so the global buffers up to the session's byte windows, and
 * then the peer is past its credit.
 */
function hostile(transport: Transport, zone: string, frames: number): { sent: () => number } {
  const controller = new AbortController();
  calls.push(controller);
  let sent = 0;
  async function* outbound(): AsyncGenerator<Frame> {
    yield create(FrameSchema, {
      value: {
        case: "hello",
        value: create(HelloSchema, {
          protocolVersion: 2,
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
    for (let i = 0; i < frames; i++) {
      yield bigFrame(i);
      sent++;
    }
    // Hold the stream open (never reading) until the test ends it.
    await new Promise((resolve) =>
      controller.signal.addEventListener("abort", resolve, { once: true }),
    );
  }
  // The response is never read; the call fails once the test aborts it (or the global cut it), which is expected.
  transport
    .stream(
      MultiplexService.method.streamMessage,
      controller.signal,
      undefined,
      { "client-id": zone },
      outbound(),
      undefined,
    )
    .catch(() => undefined);
  return { sent: () => sent };
}

describe("peers that send the largest frames and never read", { timeout: 600_000 }, () => {
  it("cannot push the global past its buffer ceilings, and a real zone keeps syncing", async () => {
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
      "--max-buffer-bytes",
      "32MiB",
    ]);
    processes.push(global);
    const m = await global.waitFor(
      /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
      120_000,
    );
    const [muxUrl, adminUrl] = [m[1] as string, m[2] as string];
    const pid = global.child.pid as number;
    const greedy = Array.from({ length: 8 }, (_, i) => `greedy-${i}`);
    const zones = ["zone-1", ...greedy];
    const registration = zones
      .map((z) => `type: Zone\nname: ${z}\nspec:\n  enabled: true\n`)
      .join("---\n");
    expect((await run(["apply", "-f", "-", "--server", adminUrl], registration)).code).toBe(0);

    // A real zone, syncing.
    const zone = new KdsProcess([
      "zone",
      "--name",
      "zone-1",
      "--global",
      muxUrl,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--log-level",
      "info",
    ]);
    processes.push(zone);
    const zoneAdmin = (
      await zone.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/, 120_000)
    )[1] as string;
    await zone.waitFor(/connected to global "global"/, 120_000);
    const meshes = async (): Promise<string[]> => {
      const r = await run(["get", "Mesh", "--server", zoneAdmin, "-o", "json"]);
      return r.code === 0
        ? (JSON.parse(r.stdout) as { name: string }[]).map((x) => x.name).sort()
        : [];
    };
    expect(
      (await run(["apply", "-f", "-", "--server", adminUrl], "type: Mesh\nname: before\n")).code,
    ).toBe(0);
    await until(meshes, (names) => names.includes("before"), "the first mesh on the zone", 120_000);
    const baseline = rssMiB(pid);

    // Each greedy peer sends 32 frames of 4 MiB (128 MiB) regardless of credit, on an HTTP/2 connection of its own:
    // 8 sessions of up to 16 MiB of buffers share a 32 MiB budget.
    let peak = baseline;
    const sampler = setInterval(() => {
      if (global.child.exitCode === null) peak = Math.max(peak, rssMiB(pid));
    }, 50);
    try {
      const attacks = greedy.map((name) =>
        hostile(createGrpcTransport({ baseUrl: muxUrl }), name, 32),
      );
      // Every greedy session ends, each with the documented code and a message that says why.
      for (const name of greedy) {
        await global.waitFor(
          new RegExp(`zone "${name}" session ended \\((protocol_error|resource_exhausted)\\)`),
          240_000,
        );
        process.stderr.write(`${name} ended; RSS peak so far ${peak.toFixed(0)} MiB\n`);
      }
      const sentPerPeer = attacks.map((a) => a.sent());
      // Meanwhile the real zone syncs: a mesh applied now arrives.
      expect(
        (await run(["apply", "-f", "-", "--server", adminUrl], "type: Mesh\nname: during\n")).code,
      ).toBe(0);
      await until(
        meshes,
        (names) => names.includes("during"),
        "a mesh applied during the attack on the zone",
        120_000,
      );
      expect(global.child.exitCode).toBeNull();
      expect(zone.output).not.toMatch(/session ended|disconnected/i);
      const ended =
        global.output.match(/session ended \((protocol_error|resource_exhausted)\): [^\n]*/g) ?? [];
      const exhausted = ended.filter((line) => line.includes("resource_exhausted"));
      console.log(
        `global RSS: baseline ${baseline.toFixed(0)} MiB, peak ${peak.toFixed(0)} MiB during ${greedy.length} peers x 32 frames of 4 MiB on a 32 MiB budget ` +
          `(frames written before the end per peer: ${sentPerPeer.join(", ")}); ` +
          `${ended.length - exhausted.length} sessions ended with protocol_error, ${exhausted.length} with resource_exhausted\n` +
          [...ended.slice(0, 1), ...exhausted.slice(0, 2)]
            .map((line) => `  ${line.slice(0, 400)}`)
            .join("\n"),
      );
      // Which of the two ends each peer meets depends on timing (past its own window first, or the shared budget full
      // first); each says which limit, and the session's own 16 MiB is never exceeded either way.
      expect(ended).toHaveLength(greedy.length);
      for (const line of ended)
        expect(line).toMatch(
          /overran the (requests|responses) byte window: .*window 8388608 bytes|\(its memory budget\)|holds per lane/,
        );
      expect(zone.output).not.toMatch(/session ended|disconnected/i);
      // Bounded: the 32 MiB budget (each session at most 16 MiB), the frames its consumers hold, plus decoding and HTTP/2 buffers
      // for the frames in flight. Without byte credit, one such peer took the global from 103 to 632 MiB.
      expect(peak - baseline).toBeLessThan(400);
    } finally {
      clearInterval(sampler);
    }
  });
});
