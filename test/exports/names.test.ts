// The root entry point re-exports every layer entry point unchanged (so the
// subpaths add names, never move them), and the mux frame is `MuxMessage`,
// with `Message`/`MessageSchema` kept as deprecated aliases of the same thing.
import { create, type Message as ProtobufMessage } from "@bufbuild/protobuf";
import { describe, expect, expectTypeOf, it } from "vitest";
import * as rootEntry from "../../src/index.ts";
import * as fetchEntry from "../../src/adapters/fetch/index.ts";
import * as muxEntry from "../../src/mux/index.ts";
import * as transportEntry from "../../src/transport/index.ts";
import * as zoneEntry from "../../src/zone/index.ts";
import {
  MessageSchema as GeneratedMessageSchema,
  type Message as GeneratedMessage,
} from "../../src/gen/kds/mux/v1/mux_pb.ts";

describe("entry point names", () => {
  const layers = {
    "kds-mux/mux": muxEntry,
    "kds-mux/transport": transportEntry,
    "kds-mux/zone": zoneEntry,
    "kds-mux/fetch": fetchEntry,
  };
  for (const [name, layer] of Object.entries(layers)) {
    it(`the root entry exports everything ${name} does, as the same values`, () => {
      const root = new Map(Object.entries(rootEntry));
      const entries = Object.entries(layer);
      expect(entries.length).toBeGreaterThan(0);
      for (const [key, value] of entries) {
        expect(root.has(key), key).toBe(true);
        expect(root.get(key), key).toBe(value);
      }
    });
  }

  it("exports the mux frame as MuxMessage, and Message only as a deprecated alias", () => {
    expect(muxEntry.MuxMessageSchema).toBe(GeneratedMessageSchema);
    expect(rootEntry.MuxMessageSchema).toBe(GeneratedMessageSchema);
    expect(rootEntry.MessageSchema).toBe(GeneratedMessageSchema);
    expect("MessageSchema" in muxEntry).toBe(false);
    expectTypeOf<rootEntry.MuxMessage>().toEqualTypeOf<GeneratedMessage>();
    expectTypeOf<rootEntry.Message>().toEqualTypeOf<GeneratedMessage>();
    expectTypeOf<muxEntry.MuxMessage>().toEqualTypeOf<GeneratedMessage>();

    // MuxMessage and protobuf-es's Message live side by side without renaming.
    const frame: rootEntry.MuxMessage = create(rootEntry.MuxMessageSchema, {
      value: { case: "ping", value: { id: 7n } },
    });
    const generic: ProtobufMessage = frame;
    expect(generic.$typeName).toBe("kds.mux.v1.Message");
  });
});
