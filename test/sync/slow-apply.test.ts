// A global whose store applies a zone's response more slowly than the zone's
// ACK timeout (a PostgreSQL global under a reconnect storm): the zone reports
// the response stalled and waits for its answer. It once resent the whole set
// under a new nonce every timeout, so the global buffered copy after copy (its
// memory budget) and applied each, every ACK was of a nonce the zone had given
// up on, and the zone's status kept every resend as sent and never answered.
import { describe, expect, it } from "vitest";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import type { ResourceStore } from "../../src/store/contract.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { eventually } from "../contract/harness.ts";
import { dataplane, startCluster } from "./helpers.ts";

const RESOURCES = 200;

/** `store` with every `apply` held back `delayMs` first. */
function slowApplies(store: InMemoryStore, delayMs: number): ResourceStore {
  return new Proxy(store, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop, target);
      if (prop === "apply")
        return async (...args: Parameters<ResourceStore["apply"]>) => {
          await new Promise((resolve) => setTimeout(resolve, delayMs));
          return target.apply(...args);
        };
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

describe("a global that applies more slowly than the zone's ACK timeout", () => {
  it("gets the zone's response once, and its late ACK counts on the zone", async () => {
    const types = createTypeRegistry(exampleTypes);
    const cluster = await startCluster("memory", {
      store: slowApplies(new InMemoryStore(types), 600),
    });
    try {
      await cluster.global.registerZone("zone-1");
      const store = new InMemoryStore(types);
      await store.apply(
        Array.from({ length: RESOURCES }, (_, i) => ({
          op: "put" as const,
          input: dataplane("default", `dp-${i}`),
        })),
      );
      const zone = cluster.startZone("zone-1", { store, discovery: { ackTimeoutMs: 100 } });
      const dataplanes = () => zone.status().types.find((t) => t.kind === "Dataplane");
      await eventually(() => (dataplanes()?.session.acked ?? 0) > 0, "the zone's response ACKed");
      // Well past several timeouts: nothing more was sent, nothing is left unanswered.
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect(dataplanes()?.session).toMatchObject({
        sent: 1,
        resourcesSent: RESOURCES,
        acked: 1,
        nacked: 0,
      });
      expect(dataplanes()?.stalled).toBe(false);
      const global = (await cluster.global.zoneStatus("zone-1"))?.types.find(
        (t) => t.kind === "Dataplane",
      );
      expect(global?.session).toMatchObject({ accepted: 1, resourcesReceived: RESOURCES });
      expect((await cluster.global.store.list("Dataplane")).resources).toHaveLength(RESOURCES);
    } finally {
      await cluster.close();
    }
  });
});
