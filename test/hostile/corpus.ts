// The fuzzer's seed corpus: real mux frames recorded from a real zone talking
// to the live global under test (hello, discovery requests and responses in
// both directions, acks, pings and pongs, window updates, reverse-call frames,
// the zone's goaway), plus the few kinds a short session may not produce
// (batch, call cancel and credit), built with the library's own frame types.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { setTimeout as sleep } from "node:timers/promises";
import { GoAwayReason, FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { registerAdmin } from "../../src/admin/admin-service.ts";
import { adminClient } from "../../src/cli/admin-client.ts";
import { silentLogger } from "../../src/log.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import type { MuxTransport } from "../../src/transport/transport.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { DataplaneSpecSchema, exampleTypes } from "../../examples/example-kinds/index.ts";
import { zoneAdminBackend } from "../../src/admin/role-backends.ts";

/** One recorded frame: which side sent it, its kind, and its bytes. */
export interface SeedFrame {
  /** "zone" frames are what a zone sends the global; "global" frames travel the other way. */
  readonly from: "zone" | "global";
  /** The oneof case ("hello", "deltaRequest", "call", ...). */
  readonly kind: string;
  readonly bytes: Uint8Array;
}

/** A transport that records every frame crossing it, both ways. */
function recording(inner: MuxTransport, frames: SeedFrame[]): MuxTransport {
  const record = (from: SeedFrame["from"], frame: Frame): void => {
    frames.push({ from, kind: frame.value.case ?? "empty", bytes: toBinary(FrameSchema, frame) });
  };
  return {
    name: `recording ${inner.name}`,
    async open(request) {
      const outbound = (async function* () {
        for await (const frame of request.outbound) {
          record("zone", frame);
          yield frame;
        }
      })();
      const inbound = await inner.open({ ...request, outbound });
      return (async function* () {
        for await (const frame of inbound) {
          record("global", frame);
          yield frame;
        }
      })();
    },
  };
}

/**
 * Records frames of a real session between an in-process zone named `zone`
 * (registered, with `token`) and the global at `muxUrl` (admin API at
 * `adminUrl`): the zone syncs a Dataplane up and the global's Mesh and
 * TrafficPolicy down, answers a reverse call, then closes with a goaway.
 */
export async function recordCorpus(options: {
  muxUrl: string;
  adminUrl: string;
  zone: string;
  token: string;
  signal: AbortSignal;
}): Promise<SeedFrame[]> {
  const frames: SeedFrame[] = [];
  const transport = recording(
    connectMuxTransport(createGrpcTransport({ baseUrl: options.muxUrl }), {
      name: "grpc",
      target: options.muxUrl,
    }),
    frames,
  );
  const zone: ZoneControlPlane = new ZoneControlPlane({
    name: options.zone,
    transport,
    token: options.token,
    types: createTypeRegistry(exampleTypes),
    logger: silentLogger,
    session: { heartbeatIntervalMs: 200, heartbeatTimeoutMs: 5_000 },
    reverseCalls: (router) => registerAdmin(router, zoneAdminBackend(zone)),
  });
  await zone.store.put({
    kind: "Dataplane",
    mesh: "default",
    name: "recorded-1",
    spec: create(DataplaneSpecSchema, { address: "10.9.9.9", service: "rec", port: 9 }),
  });
  const stop = new AbortController();
  const onAbort = (): void => stop.abort();
  options.signal.addEventListener("abort", onAbort, { once: true });
  const running = zone.run(stop.signal);
  try {
    const admin = adminClient(options.adminUrl);
    const deadline = Date.now() + 60_000;
    // Wait until the zone's Dataplane reached the global (both sync directions have run by then).
    for (;;) {
      const got = await admin.get({ type: "Dataplane" }).catch(() => undefined); // not answering yet: poll again until the deadline below
      if (got?.resources.some((r) => r.name === `${options.zone}.recorded-1`) === true) break;
      if (Date.now() > deadline)
        throw new Error(
          `the recording zone's Dataplane never reached the global; ${frames.length} frames recorded`,
        );
      await sleep(100);
    }
    // A reverse call (the global asks the zone through its session), and another resource each way.
    await admin.get({ type: "Dataplane", zone: options.zone });
    await zone.store.put({
      kind: "Dataplane",
      mesh: "default",
      name: "recorded-2",
      spec: create(DataplaneSpecSchema, { address: "10.9.9.10", service: "rec", port: 10 }),
    });
    await sleep(600); // a few heartbeats, acks and window updates
  } finally {
    stop.abort();
    await running.catch(() => undefined); // the recording run ends by our abort; its error, if any, is that
    options.signal.removeEventListener("abort", onAbort);
  }
  const zoneFrame = (value: Frame["value"]): SeedFrame => {
    const frame = create(FrameSchema, { value });
    return { from: "zone", kind: value.case ?? "empty", bytes: toBinary(FrameSchema, frame) };
  };
  const dataFrames = frames.filter(
    (f) =>
      f.from === "zone" &&
      ["request", "deltaRequest", "response", "deltaResponse"].includes(f.kind),
  );
  frames.push(
    zoneFrame({
      case: "batch",
      value: {
        $typeName: "kds.mux.v1.Batch",
        frames: dataFrames.slice(0, 4).map((f) => fromBinary(FrameSchema, f.bytes)),
      },
    }),
    zoneFrame({
      case: "call",
      value: {
        $typeName: "kds.mux.v1.Call",
        id: 7n,
        kind: { case: "cancel", value: { $typeName: "kds.mux.v1.CallCancel" } },
      },
    }),
    zoneFrame({
      case: "call",
      value: { $typeName: "kds.mux.v1.Call", id: 7n, kind: { case: "credit", value: 16 } },
    }),
    zoneFrame({
      case: "goaway",
      value: {
        $typeName: "kds.mux.v1.GoAway",
        reason: GoAwayReason.SHUTDOWN,
        message: "zone shutting down",
        reconnectTo: "",
      },
    }),
  );
  return frames;
}

/** Kinds of frames in `corpus`, by side, for the report. */
export function corpusKinds(corpus: readonly SeedFrame[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const f of corpus) out[`${f.from}:${f.kind}`] = (out[`${f.from}:${f.kind}`] ?? 0) + 1;
  return out;
}
