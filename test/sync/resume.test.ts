// Delta resume: after a reconnect with 10k resources each way of which 10
// changed, fewer than 100 resources cross the wire (counted on the wire).
import { describe, expect, it } from "vitest";
import { LABELS } from "../../src/kinds/resource-types.ts";
import { eventually } from "../contract/harness.ts";
import { dataplane, policy, startCluster } from "./helpers.ts";
import { counting, type WireCount } from "./wire-count.ts";

describe("delta resume", () => {
  it("sends only what changed while the zone was away", async () => {
    const n = 10_000;
    const cluster = await startCluster("memory");
    const count: WireCount = { toZone: 0, toGlobal: 0 };
    try {
      const g = cluster.global;
      await g.registerZone("zone-1");
      for (let i = 0; i < n; i++) await g.store.put(policy("default", `p${i}`, i));
      const zone = cluster.startZone("zone-1", { transport: counting(cluster.transport(), count) });
      for (let i = 0; i < n; i++) await zone.store.put(dataplane("default", `dp${i}`));
      await eventually(
        async () =>
          (await zone.store.list("TrafficPolicy")).resources.length === n &&
          (await g.store.list("Dataplane")).resources.length === n,
        "initial sync both ways",
        60_000,
      );
      expect(count.toZone).toBeGreaterThanOrEqual(n);
      expect(count.toGlobal).toBeGreaterThanOrEqual(n);

      await cluster.stopZone("zone-1");
      for (let i = 0; i < 8; i++) await g.store.put(policy("default", `p${i}`, 99_999));
      await g.store.delete("TrafficPolicy", "default", "p8");
      await g.store.put(policy("default", "p-new", 1));
      for (let i = 0; i < 9; i++) await zone.store.put(dataplane("default", `dp${i}`, "10.1.1.1"));
      await zone.store.delete("Dataplane", "default", "dp9");

      count.toZone = 0;
      count.toGlobal = 0;
      cluster.startZone("zone-1");
      await eventually(
        async () => {
          const p0 = await zone.store.get("TrafficPolicy", "default", "p0");
          const dp0 = await g.store.get("Dataplane", "default", "zone-1.dp0");
          return (
            (p0?.spec as { timeoutMs?: number } | undefined)?.timeoutMs === 99_999 &&
            (await zone.store.get("TrafficPolicy", "default", "p8")) === undefined &&
            (await zone.store.get("TrafficPolicy", "default", "p-new")) !== undefined &&
            (dp0?.spec as { address?: string } | undefined)?.address === "10.1.1.1" &&
            (await g.store.get("Dataplane", "default", "zone-1.dp9")) === undefined
          );
        },
        "the changes made while away arrive",
        60_000,
      );
      // A barrier instead of a pause: one more change each way, made after the
      // resume converged. A direction's responses for a type leave in order and
      // the unsent rest of a split change goes before anything changed later,
      // so once the barrier has arrived every resource the resume sent has
      // been counted, with no "wait N ms for strays".
      await g.store.put(policy("default", "p-barrier", 7));
      await zone.store.put(dataplane("default", "dp-barrier", "10.2.2.2"));
      await eventually(
        async () =>
          (await zone.store.get("TrafficPolicy", "default", "p-barrier")) !== undefined &&
          (await g.store.get("Dataplane", "default", "zone-1.dp-barrier")) !== undefined,
        "the barrier changes arrive",
        60_000,
      );
      console.log(
        `resume after 10 changes in ${n} resources each way: ${count.toZone - 1} resources to the zone, ${count.toGlobal - 1} to the global (plus one barrier each way)`,
      );
      expect(count.toZone).toBe(10 + 1);
      expect(count.toGlobal).toBe(10 + 1);
      expect(
        (await g.store.list("Dataplane", { labels: { [LABELS.zone]: "zone-1" } })).resources,
      ).toHaveLength(n - 1 + 1);
    } finally {
      await cluster.close();
    }
  }, 120_000);
});
