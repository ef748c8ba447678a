// Which frames readFrame reads by hand and which it leaves to protobuf-es's fromBinary (counted through a mock of
// it): the property tests in frame-decode.test.ts check the two give the same, which holds just as well when
// every frame goes to fromBinary.
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import * as protobuf from "@bufbuild/protobuf";
import { afterEach, describe, expect, it, vi } from "vitest";
import { FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import {
  DeltaDiscoveryRequestSchema,
  type DeltaDiscoveryRequest,
} from "../../src/gen/kds/v1/discovery_pb.ts";
import { readFrame } from "../../src/mux/frame-decode.ts";
import { weighFrame } from "../../src/mux/frame-size.ts";

vi.mock("@bufbuild/protobuf", async (importOriginal) => {
  const actual = await importOriginal<typeof import("@bufbuild/protobuf")>();
  return { ...actual, fromBinary: vi.fn(actual.fromBinary) };
});

/** Calls of fromBinary, counted (decode with `protobuf.fromBinary`, which keeps its types, after counting). */
const fromBinary = vi.mocked(protobuf.fromBinary);
const unreadable = (reason: string): Error => new Error(`unreadable: ${reason}`);
const TYPE_URL = "type.googleapis.com/kds.v1.KdsResource/TrafficPolicy";

function requestBytes(init: MessageInitShape<typeof DeltaDiscoveryRequestSchema>): Uint8Array {
  return toBinary(
    FrameSchema,
    create(FrameSchema, {
      value: { case: "deltaRequest", value: create(DeltaDiscoveryRequestSchema, init) },
    }),
  );
}

function request(frame: Frame): DeltaDiscoveryRequest {
  if (frame.value.case !== "deltaRequest") throw new Error(`a ${frame.value.case} frame`);
  return frame.value.value;
}

afterEach(() => {
  fromBinary.mockClear();
});

describe("readFrame by hand", () => {
  it("reads a resuming client's subscription by hand: its node, type URL, names and 1,000 versions", () => {
    const versions: Record<string, string> = {};
    for (let i = 0; i < 1_000; i++) versions[`default/policy-${i}`] = String(100 + i);
    const bytes = requestBytes({
      node: { id: "zone-1", cluster: "zone", userAgentName: "kds-mux" },
      typeUrl: TYPE_URL,
      resourceNamesSubscribe: ["*"],
      initialResourceVersions: versions,
    });
    const got = readFrame(bytes, unreadable);
    expect(fromBinary).not.toHaveBeenCalled();
    const expected = protobuf.fromBinary(FrameSchema, bytes);
    expect(got).toEqual(expected);
    expect(Object.keys(request(got))).toEqual(Object.keys(request(expected)));
    expect(request(got).initialResourceVersions["default/policy-999"]).toBe("1099");
    expect(weighFrame(got)).toEqual(weighFrame(expected));
  });

  it("leaves a NACK, a node with metadata and an unsubscription to fromBinary", () => {
    for (const init of [
      { typeUrl: TYPE_URL, responseNonce: "3", errorDetail: { code: 3, message: "no" } },
      {
        typeUrl: TYPE_URL,
        node: {
          id: "zone-1",
          metadata: { fields: { a: { kind: { case: "boolValue", value: true } } } },
        },
        resourceNamesSubscribe: ["*"],
      },
      { typeUrl: TYPE_URL, resourceNamesUnsubscribe: ["default/a"] },
    ]) {
      fromBinary.mockClear();
      const bytes = requestBytes(init);
      const got = readFrame(bytes, unreadable);
      expect(fromBinary).toHaveBeenCalledTimes(1);
      expect(got).toEqual(protobuf.fromBinary(FrameSchema, bytes));
    }
  });

  it("leaves a map naming a key twice to fromBinary, whose last value wins", () => {
    const once = requestBytes({ typeUrl: TYPE_URL, initialResourceVersions: { "default/a": "1" } });
    // The frame's one field, its length, then the request: append a second entry for the same key.
    const entry = [
      0x2a,
      0x0e,
      0x0a,
      0x09,
      ...new TextEncoder().encode("default/a"),
      0x12,
      0x01,
      0x32,
    ];
    const inner = [...once.subarray(2), ...entry];
    const bytes = new Uint8Array([once[0] as number, inner.length, ...inner]);
    const got = readFrame(bytes, unreadable);
    expect(fromBinary).toHaveBeenCalledTimes(1);
    expect(request(got).initialResourceVersions).toEqual({ "default/a": "2" });
  });
});
