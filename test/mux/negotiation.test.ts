// Version and feature negotiation in the hello: the pure rules, then sessions
// against a hand-played peer announcing an older version without a feature,
// a newer version with unknown features, and a range outside this side's.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { HelloSchema, FrameSchema, type Hello } from "../../src/gen/kds/mux/v1/mux_pb.ts";

type HelloFields = Omit<Partial<Hello>, "$typeName" | "$unknown">;
import {
  FEATURES,
  MIN_PROTOCOL_VERSION,
  PROTOCOL_VERSION,
  SOFTWARE_VERSION,
  negotiate,
  type HelloOffer,
} from "../../src/mux/negotiation.ts";
import { resolveSessionOptions } from "../../src/mux/options.ts";
import { MuxSession } from "../../src/mux/session.ts";
import { KDS_MUX_VERSION } from "../../src/version.ts";
import { RawPeer, request, response, sessionPair } from "../contract/harness.ts";
import packageJson from "../../package.json" with { type: "json" };

const offer: HelloOffer = {
  versions: { min: 2, max: 3 },
  features: ["batching", "calls"],
  softwareVersion: "kds-mux/1.0.0",
};
const wire = (fields: HelloFields): Hello =>
  create(HelloSchema, {
    peerId: "zone-1",
    requestWindow: 64,
    responseWindow: 64,
    requestWindowBytes: 1 << 20,
    responseWindowBytes: 1 << 20,
    maxMessageBytes: 1 << 20,
    heartbeatIntervalMs: 60_000,
    heartbeatTimeoutMs: 120_000,
    ...fields,
  });
const roles = { local: "global", peer: 'zone "zone-1"' } as const;

/** A global session whose peer is played by hand and sends `hello`. */
function globalWith(hello: HelloFields, options = {}): { session: MuxSession; peer: RawPeer } {
  const session = new MuxSession({
    role: "global",
    localId: "global",
    peerId: "zone-1",
    options: { closeGraceMs: 50, ...options },
  });
  const peer = new RawPeer(session);
  peer.write({ case: "hello", value: wire(hello) });
  return { session, peer };
}

describe("negotiate", () => {
  it("this release speaks versions 2 to 3 and says so as kds-mux/<package version>", () => {
    expect([MIN_PROTOCOL_VERSION, PROTOCOL_VERSION]).toEqual([2, 3]);
    expect(KDS_MUX_VERSION).toBe(packageJson.version);
    expect(SOFTWARE_VERSION).toBe(`kds-mux/${packageJson.version}`);
    expect(FEATURES).toEqual(["batching", "calls", "trace-context"]);
    // Without a tracing SDK registered, a session offers every feature but trace-context.
    expect(resolveSessionOptions().features).toEqual(["batching", "calls"]);
  });

  it("reads a hello without a range as a version 2 peer, its features from the booleans", () => {
    const r = negotiate(
      offer,
      wire({ protocolVersion: 2, calls: true, batching: false, features: ["batching"] }),
      roles,
    );
    // At version 2 the features list is not read: only the booleans count.
    expect(r).toEqual({
      agreement: {
        protocolVersion: 2,
        features: ["calls"],
        peerVersions: { min: 2, max: 2 },
        peerSoftwareVersion: "",
      },
    });
  });

  it("picks the highest common version and the common features; unknown features are ignored", () => {
    const r = negotiate(
      offer,
      wire({
        protocolVersion: 2,
        maxProtocolVersion: 7,
        features: ["calls", "zstd"],
        softwareVersion: "kds-mux/4.0.0",
        batching: true,
      }),
      roles,
    );
    expect(r).toEqual({
      agreement: {
        protocolVersion: 3,
        features: ["calls"],
        peerVersions: { min: 2, max: 7 },
        peerSoftwareVersion: "kds-mux/4.0.0",
      },
    });
    const own = negotiate(
      { ...offer, features: ["calls"] },
      wire({ protocolVersion: 3, features: ["batching", "calls"] }),
      roles,
    );
    expect(own).toMatchObject({ agreement: { protocolVersion: 3, features: ["calls"] } });
  });

  it("shares one frozen copy of equal agreed features and ranges between peers, and keeps them apart by kind", () => {
    const agree = (fields: HelloFields) => {
      const r = negotiate(offer, wire(fields), roles);
      if (!("agreement" in r)) throw new Error(r.refusal);
      return r.agreement;
    };
    const first = agree({ protocolVersion: 2, maxProtocolVersion: 3, features: ["calls"] });
    const second = agree({ protocolVersion: 2, maxProtocolVersion: 3, features: ["calls"] });
    expect(second.features).toBe(first.features);
    expect(second.peerVersions).toBe(first.peerVersions);
    expect(Object.isFrozen(first.features)).toBe(true);
    expect(Object.isFrozen(first.peerVersions)).toBe(true);
    // A software version spelled as another kind's key stays a string.
    const odd = agree({ protocolVersion: 2, maxProtocolVersion: 3, softwareVersion: "2-3" });
    expect(odd.peerSoftwareVersion).toBe("2-3");
    expect(odd.peerVersions).toBe(first.peerVersions);
  });

  it("refuses an older peer naming both ranges and the peer to upgrade, a newer one naming this side", () => {
    const older = negotiate(offer, wire({ protocolVersion: 1 }), roles);
    expect(older).toEqual({
      refusal:
        'the global speaks mux protocol versions 2 to 3 (kds-mux/1.0.0), the zone "zone-1" speaks 1: no version in common; ' +
        'upgrade the zone "zone-1" to a release that speaks version 2 or later (see docs/protocol.md, "Versions and features")',
    });
    const newer = negotiate(
      offer,
      wire({ protocolVersion: 4, maxProtocolVersion: 5, softwareVersion: "kds-mux/9.0.0" }),
      roles,
    );
    expect(newer).toEqual({
      refusal:
        'the global speaks mux protocol versions 2 to 3 (kds-mux/1.0.0), the zone "zone-1" (kds-mux/9.0.0) speaks 4 to 5: no version in common; ' +
        'upgrade the global to a release that speaks version 4 or later, or run the zone "zone-1" on a release that speaks version 3 (see docs/protocol.md, "Versions and features")',
    });
  });

  it("refuses a malformed range and oversized negotiation fields", () => {
    expect(
      negotiate(offer, wire({ protocolVersion: 3, maxProtocolVersion: 2 }), roles),
    ).toMatchObject({
      refusal: expect.stringContaining("max_protocol_version 2, below its protocol_version 3"),
    });
    expect(
      negotiate(offer, wire({ protocolVersion: 3, softwareVersion: "x".repeat(129) }), roles),
    ).toMatchObject({ refusal: expect.stringContaining("at most 128") });
    expect(
      negotiate(
        offer,
        wire({ protocolVersion: 3, features: Array.from({ length: 33 }, (_, i) => `f${i}`) }),
        roles,
      ),
    ).toMatchObject({ refusal: expect.stringContaining("at most 32 names") });
    expect(
      negotiate(offer, wire({ protocolVersion: 3, features: ["x".repeat(65)] }), roles),
    ).toMatchObject({ refusal: expect.stringContaining("at most 64 characters") });
  });

  it("session options narrow the offer only within what this release speaks", () => {
    expect(resolveSessionOptions().protocolVersions).toEqual({ min: 2, max: 3 });
    expect(() => resolveSessionOptions({ protocolVersions: { min: 1, max: 3 } })).toThrow(
      /protocolVersions must be a range within 2 to 3/,
    );
    expect(() => resolveSessionOptions({ protocolVersions: { min: 3, max: 2 } })).toThrow(
      /min <= max/,
    );
    expect(() => resolveSessionOptions({ features: ["zstd" as "calls"] })).toThrow(/unknown: zstd/);
    expect(() => resolveSessionOptions({ softwareVersion: "" })).toThrow(
      /softwareVersion must be 1 to 128/,
    );
  });
});

describe("a session negotiates in its hello", () => {
  it("sends its range as protocol_version (the lowest) and max_protocol_version, its features and software version", async () => {
    const { session, peer } = globalWith({ protocolVersion: 2 });
    const hello = await peer.readUntil("hello");
    expect(hello?.value.value).toMatchObject({
      protocolVersion: 2,
      maxProtocolVersion: 3,
      features: ["batching", "calls"],
      softwareVersion: SOFTWARE_VERSION,
      batching: true,
      calls: true,
    });
    peer.end();
    await session.close();
  });

  it("limited to version 2, sends exactly a version 2 hello (no range, no list, no software version)", async () => {
    const { session, peer } = globalWith(
      { protocolVersion: 2 },
      { protocolVersions: { min: 2, max: 2 }, features: ["calls"] },
    );
    const hello = await peer.readUntil("hello");
    expect(hello?.value.value).toMatchObject({
      protocolVersion: 2,
      maxProtocolVersion: 0,
      features: [],
      softwareVersion: "",
      batching: false,
      calls: true,
    });
    peer.end();
    await session.close();
  });

  it("with a peer announcing version 2 without batching: runs version 2 with calls only, and sends it no batch", async () => {
    const { session, peer } = globalWith({ protocolVersion: 2, batching: false, calls: true });
    await session.ready;
    expect(session.peer).toMatchObject({
      protocolVersion: 2,
      features: ["calls"],
      calls: true,
      protocolVersions: { min: 2, max: 2 },
      softwareVersion: "",
    });
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => session.server.send(response("type.b", String(i)))),
    );
    let responses = 0;
    while (responses < 20) {
      const frame = await peer.read();
      expect(frame?.value.case).not.toBe("batch");
      if (frame?.value.case === "response") responses++;
    }
    // Both directions still carry data.
    peer.write({ case: "request", value: request("type.b") });
    expect((await session.server.recv()).typeUrl).toBe("type.b");
    expect(session.batchesSent).toBe(0);
    peer.end();
    await session.close();
  });

  it("with a newer peer (versions 2 to 5, an unknown feature): runs version 3 with the features both know", async () => {
    const { session, peer } = globalWith({
      protocolVersion: 2,
      maxProtocolVersion: 5,
      features: ["batching", "calls", "zstd"],
      softwareVersion: "kds-mux/9.1.0",
      batching: true,
      calls: true,
    });
    await session.ready;
    expect(session.peer).toMatchObject({
      protocolVersion: 3,
      features: ["batching", "calls"],
      protocolVersions: { min: 2, max: 5 },
      softwareVersion: "kds-mux/9.1.0",
    });
    peer.end();
    await session.close();
  });

  for (const [what, hello, pattern] of [
    [
      "older",
      { protocolVersion: 1 },
      /speaks mux protocol versions 2 to 3 \(kds-mux\/[^)]+\), the zone "zone-1" speaks 1: .*upgrade the zone "zone-1"/,
    ],
    [
      "newer",
      { protocolVersion: 4, maxProtocolVersion: 6 },
      /versions 2 to 3 .*the zone "zone-1" speaks 4 to 6: .*upgrade the global/,
    ],
  ] as const) {
    it(`refuses a peer whose range is all ${what}, with a goaway naming both ranges and the side to upgrade`, async () => {
      const { session, peer } = globalWith(hello);
      const end = await session.closed;
      expect(end.code).toBe("protocol_error");
      expect(end.message).toMatch(pattern);
      const goaway = await peer.readUntil("goaway");
      expect(goaway?.value.case === "goaway" ? goaway.value.value.message : "").toBe(end.message);
      peer.end();
    });
  }

  it("refuses a batch when its own hello did not offer batching", async () => {
    const { session, peer } = globalWith(
      { protocolVersion: 3, features: ["batching"] },
      { features: ["calls"] },
    );
    await session.ready;
    peer.write({
      case: "batch",
      value: {
        $typeName: "kds.mux.v1.Batch",
        frames: [create(FrameSchema, { value: { case: "request", value: request("t") } })],
      },
    });
    const end = await session.closed;
    expect(end).toMatchObject({
      code: "protocol_error",
      message: expect.stringContaining("did not offer the batching feature"),
    });
    peer.end();
  });

  it("two sessions, one limited to version 2 without batching, agree on version 2 and calls on both sides", async () => {
    const { zone, global } = sessionPair({
      protocolVersions: { min: 2, max: 2 },
      features: ["calls"],
    });
    await Promise.all([zone.ready, global.ready]);
    expect(global.peer).toMatchObject({
      protocolVersion: 2,
      features: ["calls"],
      softwareVersion: "",
    });
    // The version 2 side still records the software version the other sent (informational, read whatever the version).
    expect(zone.peer).toMatchObject({
      protocolVersion: 2,
      features: ["calls"],
      softwareVersion: SOFTWARE_VERSION,
    });
    await Promise.all(
      Array.from({ length: 10 }, (_, i) => global.server.send(response("type.x", String(i)))),
    );
    for (let i = 0; i < 10; i++) expect((await zone.client.recv()).nonce).toBe(String(i));
    expect(global.batchesSent + zone.batchesSent).toBe(0);
    await Promise.all([zone.close(), global.close()]);
  });
});
