// Zone selectors: the syntax (parsed, refused with a reason), and in process
// a kind restricted to some zones (ResourceTypeInit.zones) next to a
// resource's kds.io/zones label, both following the zones' labels live.
import { create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it } from "vitest";
import {
  exampleTypes,
  MeshSpecSchema,
  TrafficPolicySpecSchema,
} from "../../examples/example-kinds/index.ts";
import { KdsError } from "../../src/errors.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { parseZoneSelector, selectsZone } from "../../src/kinds/zone-selector.ts";
import { startCluster, type Cluster } from "./helpers.ts";

describe("zone selector syntax", () => {
  const select = (selector: string, zone: string, labels: Record<string, string>): boolean =>
    selectsZone(parseZoneSelector(selector), zone, labels);

  it("matches equality, set, existence and the zone's name", () => {
    expect(select("region=eu", "a", { region: "eu" })).toBe(true);
    expect(select("region==eu", "a", { region: "us" })).toBe(false);
    expect(select("region!=eu", "a", {})).toBe(true);
    expect(
      select("region in (eu, us), tier notin (dev)", "a", { region: "us", tier: "prod" }),
    ).toBe(true);
    expect(select("region in (eu, us), tier notin (dev)", "a", { region: "us", tier: "dev" })).toBe(
      false,
    );
    expect(select("gpu", "a", { gpu: "" })).toBe(true);
    expect(select("!gpu", "a", { gpu: "yes" })).toBe(false);
    expect(select("kds.io/zone in (a, b)", "b", {})).toBe(true);
    expect(select("kds.io/zone=a", "c", {})).toBe(false);
    expect(select("", "c", {})).toBe(true);
  });

  it("refuses what is not a selector, naming the requirement", () => {
    for (const [text, why] of [
      ["region in (eu", "leaves a parenthesis open"],
      ["region=eu,", "has an empty requirement"],
      ["region=e u", `"region=e u" is not a requirement`],
      ["region in (eu,,us)", 'has an invalid value ""'],
      ["=eu", `"=eu" is not a requirement`],
    ] as const) {
      let error: unknown;
      try {
        parseZoneSelector(text);
      } catch (e) {
        error = e;
      }
      expect(KdsError.is(error, "invalid_argument"), text).toBe(true);
      expect((error as Error).message, text).toContain(why);
    }
  });

  it("is refused on a kind that does not flow to zones", () => {
    expect(() =>
      createTypeRegistry(
        exampleTypes.map((t) => (t.kind === "Dataplane" ? { ...t, zones: "region=eu" } : t)),
      ),
    ).toThrow(/only global-to-zone and zone-to-zones kinds can name the zones/);
  });
});

describe("a kind restricted to some zones", () => {
  let cluster: Cluster | undefined;
  afterEach(async () => {
    await cluster?.close();
    cluster = undefined;
  });

  it("reaches only the zones its selector picks, and follows relabelled zones; a resource's own selector narrows it further", async () => {
    const types = createTypeRegistry(
      exampleTypes.map((t) => (t.kind === "Mesh" ? { ...t, zones: "region=eu" } : t)),
    );
    cluster = await startCluster("memory", { types });
    const { global } = cluster;
    await global.registerZone("zone-a", { labels: { region: "eu" } });
    await global.registerZone("zone-b", { labels: { region: "us" } });
    await global.store.put({ kind: "Mesh", name: "m1", spec: create(MeshSpecSchema, {}) });
    await global.store.put({
      kind: "TrafficPolicy",
      mesh: "default",
      name: "tp",
      spec: create(TrafficPolicySpecSchema, {}),
    });
    await global.store.put({
      kind: "Mesh",
      name: "only-b",
      labels: { "kds.io/zones": "kds.io/zone=zone-b" },
      spec: create(MeshSpecSchema, {}),
    });
    const a = cluster.startZone("zone-a");
    const b = cluster.startZone("zone-b");
    const names = async (zone: typeof a): Promise<string> =>
      (await zone.store.list("Mesh")).resources
        .map((r) => r.meta.name)
        .sort()
        .join();
    const until = async (what: string, ok: () => Promise<boolean>): Promise<void> => {
      const deadline = Date.now() + 20_000;
      while (!(await ok())) {
        if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    // zone-a (eu) gets m1; only-b names zone-b, which the kind does not reach: nobody gets it.
    await until("zone-a holds m1", async () => (await names(a)) === "m1");
    // Once zone-b holds a TrafficPolicy (an unrestricted kind) its session is serving: it still has no Mesh.
    await until(
      "zone-b holds the TrafficPolicy",
      async () => (await b.store.list("TrafficPolicy")).resources.length === 1,
    );
    expect(await names(b)).toBe("");
    // zone-b joins eu: it gets m1 and only-b; zone-a leaves eu: it loses m1.
    await global.registerZone("zone-b", { labels: { region: "eu" } });
    await global.registerZone("zone-a", { labels: { region: "us" } });
    await until("zone-b holds m1 and only-b", async () => (await names(b)) === "m1,only-b");
    await until("zone-a holds nothing", async () => (await names(a)) === "");
  });
});
