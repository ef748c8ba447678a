// The trace context of data frames (the feature trace-context, docs/protocol.md "Trace context"):
// encoded and measured as protobuf does, sent only where both hellos offered the feature, and
// ignored by a side that did not offer it.
import { create, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { FrameSchema, HelloSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { DeltaDiscoveryResponseSchema } from "../../src/gen/kds/v1/discovery_pb.ts";
import { readFrame } from "../../src/mux/frame-decode.ts";
import { encodeFrame } from "../../src/mux/frame-encode.ts";
import { creditSize } from "../../src/mux/frame-size.ts";
import { MuxSession } from "../../src/mux/session.ts";
import { receivedTrace, traceOutgoing, withTraceContext } from "../../src/mux/trace-context.ts";
import { RawPeer, request, response, sessionPair } from "../contract/harness.ts";

const context = {
  traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
  tracestate: "congo=t61rcWkgMzE",
};
const TYPE = "type.googleapis.com/kds.test.Thing";

function deltaResponse(nonce: string): Frame {
  return {
    $typeName: "kds.mux.v1.Frame",
    value: {
      case: "deltaResponse",
      value: create(DeltaDiscoveryResponseSchema, {
        typeUrl: TYPE,
        nonce,
        systemVersionInfo: "v1",
        resources: [
          { name: "a", version: "1", resource: { typeUrl: TYPE, value: new Uint8Array([1, 2]) } },
        ],
        removedResources: ["gone"],
      }),
    },
  };
}

describe("a frame's trace context on the wire", () => {
  it("encodes as protobuf-es does, counts in the credit size, and decodes back", () => {
    const traced = withTraceContext(deltaResponse("1"), context);
    const batch = create(FrameSchema, {
      value: {
        case: "batch",
        value: {
          frames: [deltaResponse("2"), traced, withTraceContext(deltaResponse("3"), context)],
        },
      },
    });
    for (const frame of [traced, batch]) {
      const expected = toBinary(FrameSchema, frame);
      expect(encodeFrame(frame)).toEqual(expected);
      const decoded = readFrame(expected, (reason) => new Error(reason));
      expect(toBinary(FrameSchema, decoded)).toEqual(expected);
    }
    expect(creditSize(traced)).toBe(toBinary(FrameSchema, traced).byteLength);
    expect(creditSize(traced)).toBeGreaterThan(creditSize(deltaResponse("1")));
    const decoded = readFrame(toBinary(FrameSchema, traced), (reason) => new Error(reason));
    expect(decoded.traceContext).toMatchObject(context);
  });
});

const features = ["batching", "calls", "trace-context"] as const;

/** A global session whose zone is played by hand, offering `offered` in its version 3 hello. */
function globalWith(offered: readonly string[]): { session: MuxSession; peer: RawPeer } {
  const session = new MuxSession({
    role: "global",
    localId: "global",
    peerId: "zone-1",
    options: { closeGraceMs: 50, features: [...features] },
  });
  const peer = new RawPeer(session);
  peer.write({
    case: "hello",
    value: create(HelloSchema, {
      protocolVersion: 2,
      maxProtocolVersion: 3,
      features: [...offered],
      peerId: "zone-1",
      requestWindow: 64,
      responseWindow: 64,
      requestWindowBytes: 1 << 20,
      responseWindowBytes: 1 << 20,
      maxMessageBytes: 1 << 20,
      heartbeatIntervalMs: 60_000,
      heartbeatTimeoutMs: 120_000,
    }),
  });
  return { session, peer };
}

describe("the trace-context feature", () => {
  it("puts a marked response's context into its frame only for a peer that offered it", async () => {
    for (const [offered, carried] of [
      [["batching", "calls", "trace-context"], true],
      [["batching", "calls"], false],
    ] as const) {
      const { session, peer } = globalWith(offered);
      try {
        await session.ready;
        const marked = response(TYPE, "7");
        traceOutgoing(marked, context);
        await session.server.send(marked);
        const frame = await peer.readUntil("response");
        expect(frame?.value.case).toBe("response");
        if (carried) expect(frame?.traceContext).toMatchObject(context);
        else expect(frame?.traceContext).toBeUndefined();
      } finally {
        await session.close();
      }
    }
  });

  it("notes a received frame's context only where this side offered the feature", async () => {
    for (const zoneFeatures of [[...features], ["batching", "calls"] as const]) {
      const { zone, global } = sessionPair(
        { features: [...zoneFeatures] },
        { features: [...features] },
      );
      try {
        await Promise.all([zone.ready, global.ready]);
        const marked = response(TYPE, "1");
        traceOutgoing(marked, context);
        await global.server.send(marked);
        const received = await zone.client.recv();
        expect(received.nonce).toBe("1");
        if ((zoneFeatures as readonly string[]).includes("trace-context"))
          expect(receivedTrace(received)).toMatchObject(context);
        else expect(receivedTrace(received)).toBeUndefined();
      } finally {
        await Promise.all([zone.close(), global.close()]);
      }
    }
  });

  it("ignores a trace context a peer sends without the feature agreed", async () => {
    const { session, peer } = globalWith(["batching", "calls"]);
    try {
      await session.ready;
      const frame = withTraceContext(
        create(FrameSchema, { value: { case: "request", value: request(TYPE) } }),
        context,
      );
      expect(frame.traceContext).toBeDefined();
      peer.writeFrame(frame);
      const received = await session.server.recv();
      expect(received.typeUrl).toBe(TYPE);
      expect(receivedTrace(received)).toBeUndefined();
    } finally {
      await session.close();
    }
  });
});
