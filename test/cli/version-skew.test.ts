// Version skew against a real `kds-mux global` process: a library zone that
// speaks only protocol version 2 and lacks the batching feature syncs both
// ways using only the common features; a current zone runs version 3 with
// every feature; a raw zone announcing versions 4 to 5 is refused with a
// goaway and a status naming both ranges and the side to upgrade. inspect
// zones (JSON and table) shows each zone's software version, protocol
// version and features; a raw zone announcing versions 3 to 4 with an
// unknown feature runs version 3 with the features both know.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DataplaneSpecSchema } from "../../examples/example-kinds/gen/kds/example/v1/example_pb.ts";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { adminClient, tokenClient, type AdminTarget } from "../../src/cli/admin-client.ts";
import { KdsError } from "../../src/errors.ts";
import { GoAwayReason, FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { silentLogger } from "../../src/log.ts";
import { SOFTWARE_VERSION } from "../../src/mux/negotiation.ts";
import type { SessionOptions } from "../../src/mux/options.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { KdsProcess, run, until } from "./process.ts";

describe("version skew against a real global", { timeout: 180_000 }, () => {
  let global: KdsProcess;
  let muxUrl: string;
  let admin: AdminTarget;
  const tokens = new Map<string, string>();
  const stops: Array<() => Promise<void>> = [];

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
    const zones = ["old-zone", "new-zone", "newer-zone", "future-zone"];
    await adminClient(admin).apply({
      resources: zones.map((name) => ({ type: "Zone", name, specJson: '{"enabled":true}' })),
    });
    for (const zone of zones)
      tokens.set(
        zone,
        (await tokenClient(admin).generateZoneToken({ zone, validForSeconds: 3600n })).token,
      );
  }, 180_000);

  afterAll(async () => {
    for (const stop of stops) await stop();
    await global?.stop();
  });

  /** Runs a library zone named `name` with session options `session` until the test file ends. */
  function startZone(name: string, session: SessionOptions = {}): ZoneControlPlane {
    const zone = new ZoneControlPlane({
      name,
      token: tokens.get(name),
      transport: connectMuxTransport(createGrpcTransport({ baseUrl: muxUrl }), { target: muxUrl }),
      types: createTypeRegistry(exampleTypes),
      session,
      logger: silentLogger,
    });
    const stop = new AbortController();
    const running = zone.run(stop.signal);
    stops.push(async () => {
      stop.abort();
      await running.catch(() => undefined); // the run ends with the abort; nothing else is checked here
    });
    return zone;
  }

  it("a zone speaking only version 2, without batching, syncs both ways with calls only; inspect zones says so", async () => {
    const zone = startZone("old-zone", {
      protocolVersions: { min: 2, max: 2 },
      features: ["calls"],
    });
    await adminClient(admin).apply({
      resources: [{ type: "Mesh", name: "skew", specJson: '{"mtls":true}' }],
    });
    await until(
      () => zone.store.list("Mesh"),
      (r) => r.resources.some((m) => m.meta.name === "skew"),
      "the Mesh on the version 2 zone",
      60_000,
    );
    await zone.store.put({
      kind: "Dataplane",
      name: "dp-1",
      mesh: "skew",
      spec: create(DataplaneSpecSchema, { address: "10.0.0.1", service: "web", port: 8080 }),
    });
    await until(
      () => adminClient(admin).get({ type: "Dataplane" }),
      (r) => r.resources.some((d) => d.name === "old-zone.dp-1"),
      "the version 2 zone's Dataplane on the global",
      60_000,
    );

    // The global's log says what the session agreed on.
    await global.waitFor(
      /zone "old-zone" connected \(zone token [^;]*; protocol 2 \(calls\), software version not given\)/,
      30_000,
    );
    // The zone's own view: version 2 with calls; it still reads the global's software version.
    expect(zone.status().peer).toEqual({
      protocolVersion: 2,
      features: ["calls"],
      softwareVersion: SOFTWARE_VERSION,
    });
    // The global sent it no batch: this zone refuses one (it did not offer batching), which would have ended the session.
    expect(zone.status().lastError).toBeUndefined();
    // The global's view, through its admin API: the zone did not say its version (a version 2 hello does not).
    const insight = (await adminClient(admin).inspectZones({})).zones.find(
      (z) => z.zone === "old-zone",
    );
    expect(insight).toMatchObject({
      online: true,
      protocolVersion: 2,
      features: ["calls"],
      softwareVersion: "",
    });
    // Reverse calls (the calls feature) reach the zone: this library zone registers no admin service, and says so in its answer.
    await expect(adminClient(admin).inspectZones({ zone: "old-zone" })).rejects.toThrow(
      /zone "old-zone" serves no \/kds\.admin\.v1\.AdminService\/InspectZones over reverse calls/,
    );
  });

  it("a current zone runs version 3 with every feature, and inspect zones prints both zones' versions", async () => {
    startZone("new-zone");
    const insights = await until(
      () => adminClient(admin).inspectZones({}),
      (r) => r.zones.find((z) => z.zone === "new-zone")?.online === true,
      "new-zone online",
      60_000,
    );
    expect(insights.zones.find((z) => z.zone === "new-zone")).toMatchObject({
      protocolVersion: 3,
      features: ["batching", "calls"],
      softwareVersion: SOFTWARE_VERSION,
    });
    const json = await run(["inspect", "zones", "-o", "json", "--server", admin.url]);
    expect(json.code, json.stderr).toBe(0);
    const docs = JSON.parse(json.stdout) as Array<{
      zone: string;
      softwareVersion: string | null;
      protocolVersion: number | null;
      features: string[];
    }>;
    expect(docs.find((d) => d.zone === "new-zone")).toMatchObject({
      softwareVersion: SOFTWARE_VERSION,
      protocolVersion: 3,
      features: ["batching", "calls"],
    });
    expect(docs.find((d) => d.zone === "old-zone")).toMatchObject({
      softwareVersion: null,
      protocolVersion: 2,
      features: ["calls"],
    });
    const table = await run(["inspect", "zones", "--server", admin.url]);
    expect(table.stdout).toMatch(/^ZONE +STATUS +STATE +SINCE +RTT +PEER VERSION +PROTOCOL +TYPE/m);
    expect(table.stdout).toMatch(
      new RegExp(
        `^new-zone +online +\\S+ +\\S+ +\\S+ +${SOFTWARE_VERSION.replace(/[./]/g, "\\$&")} +3 \\(batching, calls\\) `,
        "m",
      ),
    );
    expect(table.stdout).toMatch(/^old-zone +online +\S+ +\S+ +\S+ +- +2 \(calls\) /m);
  });

  /** Opens zone `zone`'s stream by hand and writes a hello announcing `versions` and `features`, as kds-mux 9.0.0; the stream stays open until `signal` aborts. */
  async function rawZone(
    zone: string,
    versions: { min: number; max: number },
    features: string[],
    signal: AbortSignal,
  ): Promise<AsyncIterable<Frame>> {
    const hello: MessageInitShape<typeof FrameSchema> = {
      value: {
        case: "hello",
        value: {
          protocolVersion: versions.min,
          maxProtocolVersion: versions.max,
          features,
          softwareVersion: "kds-mux/9.0.0",
          batching: features.includes("batching"),
          calls: features.includes("calls"),
          peerId: zone,
          requestWindow: 16,
          responseWindow: 16,
          requestWindowBytes: 1 << 20,
          responseWindowBytes: 1 << 20,
          maxMessageBytes: 1 << 20,
          heartbeatIntervalMs: 15_000,
          heartbeatTimeoutMs: 60_000,
        },
      },
    };
    const headers = new Headers({
      "client-id": zone,
      authorization: `Bearer ${tokens.get(zone) ?? ""}`,
    });
    const transport = connectMuxTransport(createGrpcTransport({ baseUrl: muxUrl }), {
      target: muxUrl,
    });
    return transport.open({
      headers,
      signal,
      outbound: (async function* () {
        yield create(FrameSchema, hello);
        // Keep the zone's side open until the global ends the stream or the test lets go (bounded by the signal).
        await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      })(),
    });
  }

  it("a newer zone (versions 3 to 4, an unknown feature) runs version 3 with the features both know", async () => {
    const done = new AbortController();
    const signal = AbortSignal.any([done.signal, AbortSignal.timeout(60_000)]);
    const inbound = await rawZone(
      "newer-zone",
      { min: 3, max: 4 },
      ["batching", "calls", "zstd"],
      signal,
    );
    const reading = (async () => {
      for await (const _frame of inbound) {
        // the global's hello and pings; the zone does nothing with them here
      }
    })().catch(() => undefined); // the stream ends with the abort below; what it ended with is not checked here
    try {
      const insights = await until(
        () => adminClient(admin).inspectZones({}),
        (r) => r.zones.find((z) => z.zone === "newer-zone")?.online === true,
        "newer-zone online",
        60_000,
      );
      expect(insights.zones.find((z) => z.zone === "newer-zone")).toMatchObject({
        protocolVersion: 3,
        features: ["batching", "calls"],
        softwareVersion: "kds-mux/9.0.0",
      });
    } finally {
      done.abort();
      await reading;
    }
  });

  it("a zone announcing versions 4 to 5 is refused: goaway PROTOCOL_ERROR naming both ranges and the global to upgrade", async () => {
    const inbound = await rawZone(
      "future-zone",
      { min: 4, max: 5 },
      ["batching", "calls"],
      AbortSignal.timeout(60_000),
    );
    const frames: Frame[] = [];
    let ended: unknown;
    try {
      for await (const frame of inbound) frames.push(frame);
    } catch (error) {
      ended = error;
    }
    const globalHello = frames.find((f) => f.value.case === "hello")?.value.value;
    expect(globalHello).toMatchObject({
      protocolVersion: 2,
      maxProtocolVersion: 3,
      softwareVersion: SOFTWARE_VERSION,
    });
    const last = frames.at(-1)?.value;
    expect(last?.case).toBe("goaway");
    const goaway = last?.case === "goaway" ? last.value : undefined;
    expect(goaway?.reason).toBe(GoAwayReason.PROTOCOL_ERROR);
    expect(goaway?.message).toMatch(
      /the global speaks mux protocol versions 2 to 3 \(kds-mux\/[^)]+\), the zone "future-zone" \(kds-mux\/9\.0\.0\) speaks 4 to 5: no version in common; upgrade the global/,
    );
    // The stream's status carries the same message, with kds-error-code protocol_error.
    expect(ended).toBeInstanceOf(KdsError);
    expect((ended as KdsError).message).toContain("speaks 4 to 5");
    // The global's log names it too.
    await global.waitFor(/future-zone[\s\S]*speaks 4 to 5|speaks 4 to 5[\s\S]*future-zone/, 30_000);
  });
});
