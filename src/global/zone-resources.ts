/**
 * The resources a zone synced up to the global, found and changed in bulk:
 * removed when the zone is deleted or expires, relabelled when it turns
 * stale or comes back. One atomic store batch per kind.
 *
 * @module
 */
import type { ResourceStore, WriteOp } from "../store/contract.ts";
import { LABELS, type StoredResource, type TypeRegistry } from "../kinds/resource-types.ts";

/** The zone's resources of every kind zones sync up (zone-to-global and zone-to-zones), kind by kind. */
export async function* zoneResources(
  store: ResourceStore,
  types: TypeRegistry,
  zone: string,
  signal: AbortSignal,
): AsyncGenerator<{ readonly kind: string; readonly resources: readonly StoredResource[] }> {
  for (const type of types.receivedBy("global")) {
    const { resources } = await store.list(type.kind, {
      labels: { [LABELS.origin]: "zone", [LABELS.zone]: zone },
      signal,
    });
    yield { kind: type.kind, resources };
  }
}

/** Deletes every resource `zone` synced up, one atomic batch per kind; returns how many. */
export async function removeZoneResources(
  store: ResourceStore,
  types: TypeRegistry,
  zone: string,
  signal: AbortSignal,
): Promise<number> {
  let removed = 0;
  for await (const { kind, resources } of zoneResources(store, types, zone, signal)) {
    if (resources.length === 0) continue;
    const ops: WriteOp[] = resources.map((r) => ({
      op: "delete",
      kind,
      mesh: r.meta.mesh,
      name: r.meta.name,
    }));
    await store.apply(ops, { signal });
    removed += resources.length;
  }
  return removed;
}

/**
 * Sets (a string) or removes (undefined) label `key` on every resource
 * `zone` synced up, each write expecting the version just read (so a
 * concurrent write by sync fails the batch, `conflict`, rather than being
 * overwritten); resolves with how many resources of each kind carry the
 * label afterwards.
 */
export async function labelZoneResources(
  store: ResourceStore,
  types: TypeRegistry,
  zone: string,
  key: string,
  value: string | undefined,
  signal: AbortSignal,
): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for await (const { kind, resources } of zoneResources(store, types, zone, signal)) {
    const ops: WriteOp[] = [];
    for (const r of resources) {
      const has = r.meta.labels[key] !== undefined;
      if (value === undefined ? !has : has) continue;
      const labels: Record<string, string> = { ...r.meta.labels };
      if (value === undefined) delete labels[key];
      else labels[key] = value;
      ops.push({
        op: "put",
        input: { kind, mesh: r.meta.mesh, name: r.meta.name, labels, spec: r.spec },
        expectedVersion: r.meta.version,
      });
    }
    if (ops.length > 0) await store.apply(ops, { signal });
    counts.set(kind, value === undefined ? 0 : resources.length);
  }
  return counts;
}
