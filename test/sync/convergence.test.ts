// Property: whatever creates, updates and deletes happen on the global and in
// two zones, and however sessions drop in between, once everything is
// reconnected both sides hold identical content. Seed and run count are
// printed; rerun a failure with SEED=<seed>.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { MuxSession } from "../../src/mux/session.ts";
import { LABELS } from "../../src/sync/resource-types.ts";
import { dataplane, mesh, policy, contents, startCluster, type Cluster } from "./helpers.ts";

const zones = ["zone-1", "zone-2"] as const;
const names = ["a", "b", "c", "d"] as const;

type Command =
  | { op: "global-put"; kind: "Mesh" | "TrafficPolicy"; name: string; value: number }
  | { op: "global-delete"; kind: "Mesh" | "TrafficPolicy"; name: string }
  | { op: "zone-put"; zone: number; name: string; value: number; label: string }
  | { op: "zone-delete"; zone: number; name: string }
  | { op: "drop"; zone: number; side: "zone" | "global" }
  | { op: "pause"; ms: number };

const command: fc.Arbitrary<Command> = fc.oneof(
  fc.record({ op: fc.constant("global-put" as const), kind: fc.constantFrom("Mesh" as const, "TrafficPolicy" as const), name: fc.constantFrom(...names), value: fc.nat(5) }),
  fc.record({ op: fc.constant("global-delete" as const), kind: fc.constantFrom("Mesh" as const, "TrafficPolicy" as const), name: fc.constantFrom(...names) }),
  fc.record({ op: fc.constant("zone-put" as const), zone: fc.nat(1), name: fc.constantFrom(...names), value: fc.nat(5), label: fc.constantFrom("x", "y", "zone-2") }),
  fc.record({ op: fc.constant("zone-delete" as const), zone: fc.nat(1), name: fc.constantFrom(...names) }),
  fc.record({ op: fc.constant("drop" as const), zone: fc.nat(1), side: fc.constantFrom("zone" as const, "global" as const) }),
  fc.record({ op: fc.constant("pause" as const), ms: fc.integer({ min: 0, max: 15 }) }),
);

async function apply(cluster: Cluster, c: Command): Promise<void> {
  const g = cluster.global.store;
  switch (c.op) {
    case "global-put":
      await g.put(c.kind === "Mesh" ? mesh(c.name, `v${c.value}`) : policy("default", c.name, c.value));
      return;
    case "global-delete":
      await g.delete(c.kind, c.kind === "Mesh" ? "" : "default", c.name);
      return;
    case "zone-put": {
      // The label tries to claim another zone's attribution; it must not stick.
      const z = cluster.zones.get(zones[c.zone] as string);
      await z?.store.put(dataplane("default", c.name, `10.0.0.${c.value}`, { [LABELS.zone]: c.label, app: c.label }));
      return;
    }
    case "zone-delete":
      await cluster.zones.get(zones[c.zone] as string)?.store.delete("Dataplane", "default", c.name);
      return;
    case "drop": {
      const name = zones[c.zone] as string;
      const session = c.side === "zone" ? cluster.zones.get(name)?.client.session : cluster.global.server.session(name);
      (session as MuxSession | undefined)?.fail("transport", "dropped by the property test");
      return;
    }
    case "pause":
      await new Promise((r) => setTimeout(r, c.ms));
  }
}

async function converged(cluster: Cluster): Promise<string | undefined> {
  const g = cluster.global.store;
  const globalSide = await contents(g, ["Mesh", "TrafficPolicy"]);
  for (const name of zones) {
    const z = cluster.zones.get(name);
    if (z === undefined) return `${name} missing`;
    const mirror = await contents(z.store, ["Mesh", "TrafficPolicy"]);
    if (JSON.stringify([...mirror].sort()) !== JSON.stringify([...globalSide].sort())) return `${name}'s mirror differs from the global`;
    const local = await contents(z.store, ["Dataplane"]);
    const attributed = await contents(g, ["Dataplane"], (_name, labels) => (labels[LABELS.zone] === name ? labels[LABELS.displayName] : undefined));
    if (JSON.stringify([...local].sort()) !== JSON.stringify([...attributed].sort())) return `the global's copy of ${name}'s dataplanes differs`;
    for (const r of (await g.list("Dataplane", { labels: { [LABELS.zone]: name } })).resources) {
      if (r.meta.name !== `${name}.${r.meta.labels[LABELS.displayName]}`) return `${r.meta.name} is misnamed`;
    }
  }
  return undefined;
}

describe("convergence under random changes and session drops", () => {
  it("both sides converge after the last reconnect", async () => {
    const seed = Number(process.env.SEED ?? Math.floor(Math.random() * 2 ** 31));
    const numRuns = Number(process.env.RUNS ?? 25);
    console.log(`convergence property: ${numRuns} runs, seed ${seed} (rerun with SEED=${seed})`);
    await fc.assert(
      fc.asyncProperty(fc.array(command, { minLength: 1, maxLength: 40 }), fc.constantFrom("delta" as const, "sotw" as const), fc.boolean(), async (commands, mode, tiny) => {
        // Tiny messages split every delta change over several responses (a SotW
        // set cannot be split: it is reported as oversized instead, by design).
        const discovery = { nackBackoffMs: 20, ...(tiny && mode === "delta" ? { maxMessageBytes: 1_600 } : {}) };
        const cluster = await startCluster("memory", { mode, discovery });
        try {
          for (const z of zones) await cluster.global.registerZone(z);
          await cluster.global.store.put(mesh("default"));
          for (const z of zones) cluster.startZone(z, { mode, discovery });
          for (const c of commands) await apply(cluster, c);
          const deadline = Date.now() + 10_000;
          let problem = await converged(cluster);
          while (problem !== undefined && Date.now() < deadline) {
            await new Promise((r) => setTimeout(r, 20));
            problem = await converged(cluster);
          }
          expect(problem).toBeUndefined();
        } finally {
          await cluster.close();
        }
      }),
      { seed, numRuns, endOnFailure: true },
    );
  }, 180_000);
});
