/**
 * Snapshot sources that need no store: a fixed set of resources of one type,
 * and several sources served as one.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import { digestOf } from "./digest.ts";
import type { Snapshot, SnapshotSource, WireResource } from "./types.ts";

/** Serves `resources` under `typeUrl`, unchanged for as long as the source lives. */
export function staticSource(typeUrl: string, resources: readonly WireResource[]): SnapshotSource {
  const byKey = new Map(resources.map((r) => [r.key, r]));
  const snapshot: Snapshot = {
    version: digestOf(resources),
    resources: { get: (key) => byKey.get(key), [Symbol.iterator]: () => byKey.values() },
  };
  return {
    typeUrls: [typeUrl],
    snapshot: () => Promise.resolve(snapshot),
    snapshotNow: () => snapshot,
    onChange: () => undefined, // nothing ever changes
  };
}

/** Serves every type of `sources`; throws `invalid_argument` when two serve the same type. */
export function mergeSources(sources: readonly SnapshotSource[]): SnapshotSource {
  const byUrl = new Map<string, SnapshotSource>();
  for (const source of sources) {
    for (const typeUrl of source.typeUrls) {
      if (byUrl.has(typeUrl))
        throw new KdsError("invalid_argument", `two snapshot sources serve ${typeUrl}`);
      byUrl.set(typeUrl, source);
    }
  }
  const unknown = (typeUrl: string): KdsError =>
    new KdsError("unknown_type", `no source serves ${typeUrl}`);
  return {
    typeUrls: [...byUrl.keys()],
    snapshot: (typeUrl, signal) => {
      const source = byUrl.get(typeUrl);
      if (source === undefined) return Promise.reject(unknown(typeUrl));
      return source.snapshot(typeUrl, signal);
    },
    ...(sources.every((s) => s.snapshotNow !== undefined)
      ? {
          snapshotNow: (typeUrl: string) => {
            const source = byUrl.get(typeUrl);
            if (source === undefined) throw unknown(typeUrl);
            return source.snapshotNow?.(typeUrl);
          },
        }
      : {}),
    onChange: (listener, signal) => {
      for (const source of sources) source.onChange(listener, signal);
    },
  };
}
