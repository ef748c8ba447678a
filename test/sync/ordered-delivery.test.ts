// Ordered delivery across kinds (docs/kinds.md, "Ordered delivery"): a zone
// that watches its store while the global's 1,000 meshes with 10 policies
// each arrive, and while all of them are deleted at once, never sees a policy
// whose mesh is absent. 20 seeded runs per transport, each with its own
// write order, response size and responses in flight.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  DataplaneSpecSchema,
  MeshSpecSchema,
  TrafficPolicySpecSchema,
  ZoneIngressSpecSchema,
} from "../../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import type { ResourceTypeInit } from "../../src/kinds/resource-types.ts";
import type { WriteOp } from "../../src/store/contract.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { eventually } from "../contract/harness.ts";
import { startCluster } from "./helpers.ts";

const MESHES = 1_000;
const POLICIES_PER_MESH = 10;
const RUNS = 20;

/** The example kinds, with TrafficPolicy depending on Mesh. */
const orderedKinds: readonly ResourceTypeInit[] = [
  { kind: "Mesh", schema: MeshSpecSchema, direction: "global-to-zone", scope: "cluster" },
  {
    kind: "TrafficPolicy",
    schema: TrafficPolicySpecSchema,
    direction: "global-to-zone",
    scope: "mesh",
    dependsOn: ["Mesh"],
  },
  { kind: "Dataplane", schema: DataplaneSpecSchema, direction: "zone-to-global", scope: "mesh" },
  {
    kind: "ZoneIngress",
    schema: ZoneIngressSpecSchema,
    direction: "zone-to-zones",
    scope: "cluster",
  },
];

/** mulberry32: a small seeded generator, so a failing run can be replayed from its seed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function shuffle<T>(items: T[], next: () => number): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [items[i], items[j]] = [items[j] as T, items[i] as T];
  }
  return items;
}

/** What a zone's watcher sees: meshes, policies per mesh, and each moment a policy's mesh was absent. */
class View {
  readonly meshes = new Set<string>();
  readonly policies = new Map<string, Set<string>>();
  policyCount = 0;
  readonly violations: string[] = [];

  put(kind: string, mesh: string, name: string): void {
    if (kind === "Mesh") this.meshes.add(name);
    else if (kind === "TrafficPolicy") {
      if (!this.meshes.has(mesh)) this.violations.push(`policy ${mesh}/${name} before its mesh`);
      let set = this.policies.get(mesh);
      if (set === undefined) {
        set = new Set();
        this.policies.set(mesh, set);
      }
      if (!set.has(name)) this.policyCount++;
      set.add(name);
    }
  }

  delete(kind: string, mesh: string, name: string): void {
    if (kind === "Mesh") {
      const left = this.policies.get(name)?.size ?? 0;
      if (left > 0)
        this.violations.push(`mesh ${name} removed while ${left} of its policies remain`);
      this.meshes.delete(name);
    } else if (kind === "TrafficPolicy") {
      if (this.policies.get(mesh)?.delete(name) === true) this.policyCount--;
    }
  }
}

async function run(kind: "memory" | "half-duplex", seed: number): Promise<View> {
  const next = random(seed);
  // Small parts and few in flight split both kinds over many responses, so that without the order a
  // policy part overtakes the mesh parts.
  const deltaResponseBytes = 2_048 + Math.floor(next() * 64 * 1024);
  const maxDeltaInFlight = 1 + Math.floor(next() * 8);
  const cluster = await startCluster(kind, {
    types: createTypeRegistry(orderedKinds),
    discovery: { deltaResponseBytes, maxDeltaInFlight },
  });
  const controller = new AbortController();
  try {
    const { global } = cluster;
    await global.registerZone("zone-1");
    // The global's store gets everything in a random order, in random batches.
    const puts: WriteOp[] = [];
    for (let m = 0; m < MESHES; m++) {
      const mesh = `mesh-${m}`;
      puts.push({
        op: "put",
        input: {
          kind: "Mesh",
          name: mesh,
          spec: create(MeshSpecSchema, { description: "x".repeat(Math.floor(next() * 200)) }),
        },
      });
      for (let p = 0; p < POLICIES_PER_MESH; p++)
        puts.push({
          op: "put",
          input: {
            kind: "TrafficPolicy",
            mesh,
            name: `policy-${p}`,
            spec: create(TrafficPolicySpecSchema, { timeoutMs: 1 + Math.floor(next() * 10_000) }),
          },
        });
    }
    shuffle(puts, next);
    for (let i = 0; i < puts.length; ) {
      const size = 1 + Math.floor(next() * 2_000);
      await global.store.apply(puts.slice(i, i + size));
      i += size;
    }

    // The zone's store, watched from its first write.
    const store = new InMemoryStore(createTypeRegistry(orderedKinds));
    const view = new View();
    const watching = (async () => {
      for await (const change of store.watch(0, { signal: controller.signal })) {
        if (change.op === "put")
          view.put(change.resource.kind, change.resource.meta.mesh, change.resource.meta.name);
        else view.delete(change.ref.kind, change.ref.mesh, change.ref.name);
      }
    })();
    cluster.startZone("zone-1", { store, types: createTypeRegistry(orderedKinds) });
    await eventually(
      () => view.meshes.size === MESHES && view.policyCount === MESHES * POLICIES_PER_MESH,
      `zone-1 holds ${MESHES} meshes and ${MESHES * POLICIES_PER_MESH} policies (seed ${seed})`,
      60_000,
    );

    // Everything deleted at once, in a random order (meshes before their policies, often).
    const deletes: WriteOp[] = puts.map((p) => {
      const input = (p as Extract<WriteOp, { op: "put" }>).input;
      return { op: "delete", kind: input.kind, mesh: input.mesh ?? "", name: input.name };
    });
    await global.store.apply(shuffle(deletes, next));
    await eventually(
      () => view.meshes.size === 0 && view.policyCount === 0,
      `zone-1 holds nothing (seed ${seed})`,
      60_000,
    );
    controller.abort();
    await watching;
    return view;
  } finally {
    controller.abort();
    await cluster.close();
  }
}

for (const kind of ["memory", "half-duplex"] as const) {
  describe(`ordered delivery over ${kind}`, () => {
    it(`never shows a policy whose mesh is absent, over ${RUNS} seeded runs`, async () => {
      const violations: string[] = [];
      for (let seed = 1; seed <= RUNS; seed++) {
        const view = await run(kind, seed);
        violations.push(...view.violations.slice(0, 3).map((v) => `seed ${seed}: ${v}`));
        if (view.violations.length > 3)
          violations.push(`seed ${seed}: and ${view.violations.length - 3} more`);
      }
      expect(violations).toEqual([]);
    }, 600_000);
  });
}
