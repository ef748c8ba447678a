// The public surface: a small root that holds what a library user needs to
// run a global and a zone with kinds of their own, one entry point per layer
// for the rest, the generated wire messages apart in kds-mux/schema, and
// names that mean one thing wherever they are exported.
import { readFileSync } from "node:fs";
import { create, type Message as ProtobufMessage } from "@bufbuild/protobuf";
import { describe, expect, expectTypeOf, it } from "vitest";
import * as rootEntry from "../../src/index.ts";
import * as muxEntry from "../../src/mux/index.ts";
import * as schemaEntry from "../../src/schema.ts";

const root = new URL("../../", import.meta.url);
const exportsMap = JSON.parse(readFileSync(new URL("package.json", root), "utf8"))
  .exports as Record<string, { default: string }>;

/** Every entry point's module, by its name in package.json ("." is the root). */
async function entryPoints(): Promise<Map<string, Record<string, unknown>>> {
  const entries = new Map<string, Record<string, unknown>>();
  for (const [name, target] of Object.entries(exportsMap)) {
    const source = target.default.replace(/^\.\/dist\//, "./src/").replace(/\.js$/, ".ts");
    entries.set(name, (await import(new URL(source, root).href)) as Record<string, unknown>);
  }
  return entries;
}

describe("entry points", () => {
  it("keep the root small: at most 30 values, none of them generated code", () => {
    const values = Object.keys(rootEntry);
    expect(values.length).toBeGreaterThan(10);
    expect(values.length, values.join(", ")).toBeLessThanOrEqual(30);
    for (const name of values) expect(name in schemaEntry, name).toBe(false);
    expect(values).toContain("GlobalControlPlane");
    expect(values).toContain("ZoneControlPlane");
  });

  it("give each exported name one value across all entry points", async () => {
    const seen = new Map<string, { entry: string; value: unknown }>();
    const entries = await entryPoints();
    expect(entries.size).toBe(Object.keys(exportsMap).length);
    for (const [entry, module] of entries) {
      expect(Object.keys(module).length, `${entry} exports nothing`).toBeGreaterThan(0);
      for (const [name, value] of Object.entries(module)) {
        const first = seen.get(name);
        if (first === undefined) seen.set(name, { entry, value });
        else expect(value, `${name} in ${entry} and ${first.entry}`).toBe(first.value);
      }
    }
  });

  it("export each generated message with its own schema, so create() gives the named type", () => {
    const meta: schemaEntry.ResourceMeta = create(schemaEntry.ResourceMetaSchema, { name: "a" });
    expect(meta.$typeName).toBe("kds.v1.ResourceMeta");
    // The hand-written store record has its own name, not the generated message's.
    expectTypeOf<rootEntry.StoredResourceMeta>().not.toEqualTypeOf<schemaEntry.ResourceMeta>();
    expect("ResourceMeta" in rootEntry).toBe(false);
  });

  it("export the mux frame as Frame, and no Message alias", () => {
    expect(muxEntry.FrameSchema).toBe(schemaEntry.FrameSchema);
    expect("MessageSchema" in schemaEntry).toBe(false);
    expect("MuxMessageSchema" in muxEntry).toBe(false);
    expect("MessageSchema" in muxEntry).toBe(false);
    expectTypeOf<muxEntry.Frame>().toEqualTypeOf<schemaEntry.Frame>();

    // Frame and protobuf-es's Message live side by side without renaming.
    const frame: muxEntry.Frame = create(muxEntry.FrameSchema, {
      value: { case: "ping", value: { id: 7n } },
    });
    const generic: ProtobufMessage = frame;
    expect(generic.$typeName).toBe("kds.mux.v1.Frame");
  });
});
