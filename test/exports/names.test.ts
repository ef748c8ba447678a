// The root entry point re-exports every layer entry point unchanged (so the
// subpaths add names, never move them), and the mux frame is `Frame`, so it
// never takes the name of protobuf-es's `Message`.
import { create, type Message as ProtobufMessage } from "@bufbuild/protobuf";
import { describe, expect, expectTypeOf, it } from "vitest";
import * as rootEntry from "../../src/index.ts";
import * as fetchEntry from "../../src/adapters/fetch/index.ts";
import * as muxEntry from "../../src/mux/index.ts";
import * as transportEntry from "../../src/transport/index.ts";
import * as zoneEntry from "../../src/zone/index.ts";
import {
  FrameSchema as GeneratedFrameSchema,
  type Frame as GeneratedFrame,
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
      const names = Object.keys(layer);
      expect(names.length).toBeGreaterThan(0);
      for (const key of names)
        expect(rootEntry[key as keyof typeof rootEntry], key).toBe(
          layer[key as keyof typeof layer],
        );
    });
  }

  it("exports the mux frame as Frame, and no deprecated Message alias", () => {
    expect(muxEntry.FrameSchema).toBe(GeneratedFrameSchema);
    expect(rootEntry.FrameSchema).toBe(GeneratedFrameSchema);
    expect("MessageSchema" in rootEntry).toBe(false);
    expect("MuxMessageSchema" in rootEntry).toBe(false);
    expect("MessageSchema" in muxEntry).toBe(false);
    expectTypeOf<rootEntry.Frame>().toEqualTypeOf<GeneratedFrame>();
    expectTypeOf<muxEntry.Frame>().toEqualTypeOf<GeneratedFrame>();

    // Frame and protobuf-es's Message live side by side without renaming.
    const frame: rootEntry.Frame = create(rootEntry.FrameSchema, {
      value: { case: "ping", value: { id: 7n } },
    });
    const generic: ProtobufMessage = frame;
    expect(generic.$typeName).toBe("kds.mux.v1.Frame");
  });
});
