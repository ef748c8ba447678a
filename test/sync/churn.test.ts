// A long session with churn, as the regression guard of the bench figures
// that hold on any machine (ratios and counts, never times): zones reconnect
// again and again over real gRPC while the global's resources change, and
//   - every resume with nothing changed while away resends nothing (only the
//     one barrier change made after the reconnect crosses the wire, each way);
//   - no session the global ended is still in memory after a forced GC (each
//     was retained until its discovery deadline, up to 30 s, by a pending
//     timer: in a reconnect storm that is every session of the last 30 s);
//   - the heap (after forced GC; global and zones share this process) after
//     the last round is within 25% of the heap after the warm-up rounds, so
//     nothing a session, a lease, a token or a churned resource leaves
//     behind accumulates per reconnect.
import { describe, expect, it } from "vitest";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { eventually } from "../contract/harness.ts";
import type { Session } from "../../src/mux/views.ts";
import { collectGarbage, heapAfterGc } from "../support/heap.ts";
import { dataplane, policy, startCluster } from "./helpers.ts";
import { counting, type WireCount } from "./wire-count.ts";

const ZONES = 3;
const WARM_UP = 5;
const ROUNDS = 25;
const timeoutOf = (spec: unknown): number | undefined =>
  (spec as { timeoutMs?: number } | undefined)?.timeoutMs;
const addressOf = (spec: unknown): string | undefined =>
  (spec as { address?: string } | undefined)?.address;

describe("a long session with churn", () => {
  it("resends nothing on a resume with nothing changed, and keeps the heap flat over many reconnects", async () => {
    // A bounded change history: churned writes must not count as growth once it is full.
    const sessions: WeakRef<Session>[] = [];
    const cluster = await startCluster("grpc", {
      store: new InMemoryStore(createTypeRegistry(exampleTypes), { historyLimit: 200 }),
      onSession: (session) => void sessions.push(new WeakRef(session)),
    });
    const g = cluster.global;
    const names = Array.from({ length: ZONES }, (_, i) => `zone-${i}`);
    const counts = new Map(names.map((name) => [name, { toZone: 0, toGlobal: 0 } as WireCount]));
    try {
      for (let i = 0; i < 100; i++) await g.store.put(policy("default", `p${i}`, i));
      for (const name of names) {
        await g.registerZone(name);
        const zone = cluster.startZone(name, {
          transport: counting(cluster.transport(), counts.get(name) as WireCount),
        });
        for (let i = 0; i < 20; i++) await zone.store.put(dataplane("default", `dp${i}`));
      }
      let warm = 0;
      for (let round = 1; round <= WARM_UP + ROUNDS; round++) {
        // Churn while connected: a new policy each round, last round's deleted.
        await g.store.put(policy("default", `churn-${round}`, round));
        if (round > 1) await g.store.delete("TrafficPolicy", "default", `churn-${round - 1}`);
        for (const name of names) {
          const zone = cluster.zones.get(name);
          await eventually(
            async () =>
              (await zone?.store.get("TrafficPolicy", "default", `churn-${round}`)) !== undefined &&
              (await zone?.store.get("TrafficPolicy", "default", `churn-${round - 1}`)) ===
                undefined,
            `round ${round}: ${name} has the churned policy`,
            60_000,
          );
        }
        // Away and back with nothing changed; a barrier each way afterwards.
        for (const name of names) await cluster.stopZone(name);
        for (const count of counts.values()) {
          count.toZone = 0;
          count.toGlobal = 0;
        }
        for (const name of names) cluster.startZone(name);
        await g.store.put(policy("default", "barrier", round));
        for (const name of names)
          await cluster.zones
            .get(name)
            ?.store.put(dataplane("default", "barrier", `10.9.0.${round}`));
        for (const name of names) {
          await eventually(
            async () =>
              timeoutOf(
                (await cluster.zones.get(name)?.store.get("TrafficPolicy", "default", "barrier"))
                  ?.spec,
              ) === round &&
              addressOf((await g.store.get("Dataplane", "default", `${name}.barrier`))?.spec) ===
                `10.9.0.${round}`,
            `round ${round}: the barriers of ${name} arrive`,
            60_000,
          );
        }
        // Responses of one kind leave in order: once the barrier arrived, all the resume sent has been counted.
        for (const name of names)
          expect({ round, name, ...counts.get(name) }).toEqual({
            round,
            name,
            toZone: 1,
            toGlobal: 1,
          });
        if (round === WARM_UP) warm = heapAfterGc();
      }
      // WeakRef targets stay alive until the current job ends: collect from a fresh task.
      await new Promise((resolve) => setTimeout(resolve, 0));
      collectGarbage();
      const ended = sessions
        .map((ref) => ref.deref())
        .filter((session) => session !== undefined && session.end !== undefined);
      expect({ sessions: sessions.length, endedStillInMemory: ended.length }).toEqual({
        sessions: ZONES * (WARM_UP + ROUNDS + 1),
        endedStillInMemory: 0,
      });
      const last = heapAfterGc();
      const ratio = last / warm;
      console.log(
        `heap after ${WARM_UP} warm-up rounds ${(warm / 2 ** 20).toFixed(1)} MiB, after ${ROUNDS} more ${(last / 2 ** 20).toFixed(1)} MiB (ratio ${ratio.toFixed(3)}); ${ZONES} zones reconnected ${WARM_UP + ROUNDS} times`,
      );
      expect(ratio).toBeLessThan(1.25);
    } finally {
      await cluster.close();
    }
  }, 600_000);
});
