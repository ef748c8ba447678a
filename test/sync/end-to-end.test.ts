// One global and two zones: resources created, updated and deleted on either
// side reach the right places, over memory and over gRPC on HTTP/2.
import { describe, expect, it } from "vitest";
import { LABELS } from "../../src/kinds/resource-types.ts";
import { eventually } from "../contract/harness.ts";
import { dataplane, mesh, policy, startCluster } from "./helpers.ts";

for (const kind of ["memory", "grpc"] as const) {
  describe(`sync end to end over ${kind}`, () => {
    it("propagates create, update and delete both ways, with filters and attribution", async () => {
      const cluster = await startCluster(kind, {
        // zone-2 only receives meshes whose name does not start with "private-".
        filter: (zone, r) => !(zone === "zone-2" && r.meta.name.startsWith("private-")),
      });
      const { global } = cluster;
      try {
        await global.registerZone("zone-1");
        await global.registerZone("zone-2");
        await global.store.put(mesh("default", "first"));
        await global.store.put(mesh("private-a"));
        await global.store.put(policy("default", "timeouts", 500));
        const z1 = cluster.startZone("zone-1");
        const z2 = cluster.startZone("zone-2");

        // global -> zones, with the filter
        await eventually(
          async () =>
            (await z1.store.list("Mesh")).resources.length === 2 &&
            (await z2.store.list("Mesh")).resources.length === 1,
          "meshes reach the zones",
        );
        expect((await z2.store.list("Mesh")).resources.map((r) => r.meta.name)).toEqual([
          "default",
        ]);
        await eventually(
          async () => (await z1.store.get("TrafficPolicy", "default", "timeouts")) !== undefined,
          "policy reaches zone-1",
        );
        const mirrored = await z1.store.get("Mesh", "", "default");
        expect(mirrored?.meta.labels[LABELS.origin]).toBe("global");

        // update and delete on the global
        await global.store.put(mesh("default", "second"));
        await global.store.delete("TrafficPolicy", "default", "timeouts");
        await eventually(async () => {
          const m = await z2.store.get("Mesh", "", "default");
          return (m?.spec as { description?: string } | undefined)?.description === "second";
        }, "mesh update reaches zone-2");
        await eventually(
          async () => (await z1.store.get("TrafficPolicy", "default", "timeouts")) === undefined,
          "policy deletion reaches zone-1",
        );

        // zone -> global, attributed by the session's zone, never by the zone's data
        await z1.store.put(
          dataplane("default", "web-1", "10.0.0.1", { app: "web", [LABELS.zone]: "zone-2" }),
        );
        await z2.store.put(dataplane("default", "web-1", "10.0.0.2"));
        await eventually(
          async () => (await global.store.list("Dataplane")).resources.length === 2,
          "dataplanes reach the global",
        );
        const fromZ1 = await global.store.get("Dataplane", "default", "zone-1.web-1");
        expect(fromZ1?.meta.labels).toMatchObject({
          [LABELS.zone]: "zone-1",
          [LABELS.origin]: "zone",
          [LABELS.displayName]: "web-1",
          app: "web",
        });
        expect(
          (await global.store.get("Dataplane", "default", "zone-2.web-1"))?.meta.labels[
            LABELS.zone
          ],
        ).toBe("zone-2");
        expect(
          (await global.store.list("Dataplane", { labels: { [LABELS.zone]: "zone-2" } })).resources,
        ).toHaveLength(1);

        await z1.store.put(dataplane("default", "web-1", "10.9.9.9"));
        await z2.store.delete("Dataplane", "default", "web-1");
        await eventually(async () => {
          const d = await global.store.get("Dataplane", "default", "zone-1.web-1");
          return (
            (d?.spec as { address?: string } | undefined)?.address === "10.9.9.9" &&
            (await global.store.get("Dataplane", "default", "zone-2.web-1")) === undefined
          );
        }, "zone update and delete reach the global");

        // zone status
        const status = await global.zoneStatus("zone-1");
        expect(status?.online).toBe(true);
        const dp = status?.types.find((t) => t.kind === "Dataplane");
        expect(dp?.accepted).toBeGreaterThanOrEqual(2);
        const meshes = status?.types.find((t) => t.kind === "Mesh");
        expect(meshes?.sent).toBeGreaterThanOrEqual(1);
        expect(meshes?.acked).toBe(meshes?.sent);

        // disconnect: resources stay, marked offline
        await cluster.stopZone("zone-1");
        await eventually(
          async () => (await global.zoneStatus("zone-1"))?.online === false,
          "zone-1 offline",
        );
        expect(await global.store.get("Dataplane", "default", "zone-1.web-1")).toBeDefined();

        // deleting the Zone deletes its resources
        await global.store.delete("Zone", "", "zone-1");
        await eventually(
          async () =>
            (await global.store.list("Dataplane", { labels: { [LABELS.zone]: "zone-1" } }))
              .resources.length === 0,
          "zone-1's resources removed",
        );
      } finally {
        await cluster.close();
      }
    }, 60_000);
  });
}
