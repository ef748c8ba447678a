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
  return mergeLaidOut(sources, new SourceLayout(sources));
}

/**
 * Which of several sources serves each type. Worked out once and shared by
 * every merge of sources that serve the same types in the same order (one
 * per stream of a server with many peers), so a merge holds no map of its
 * own.
 */
export class SourceLayout {
  /** Every type served, in the sources' order. */
  readonly typeUrls: readonly string[];
  /** Whether every source offers `snapshotNow` (then the merge does). */
  readonly allNow: boolean;
  /** Type URL -> index of the source that serves it. */
  readonly #byUrl = new Map<string, number>();

  /**
   * @param sources - the sources, or any of the same types in the same order
   * @throws `invalid_argument` when two serve the same type
   */
  constructor(sources: readonly SnapshotSource[]) {
    sources.forEach((source, i) => {
      for (const typeUrl of source.typeUrls) {
        if (this.#byUrl.has(typeUrl))
          throw new KdsError("invalid_argument", `two snapshot sources serve ${typeUrl}`);
        this.#byUrl.set(typeUrl, i);
      }
    });
    this.typeUrls = [...this.#byUrl.keys()];
    this.allNow = sources.every((s) => s.snapshotNow !== undefined);
  }

  /** The index of the source that serves `typeUrl`, or undefined. */
  indexOf(typeUrl: string): number | undefined {
    return this.#byUrl.get(typeUrl);
  }
}

/**
 * Serves every type of `sources` by `layout`, which was worked out from
 * `sources` or from sources of the same types in the same order.
 */
export function mergeLaidOut(
  sources: readonly SnapshotSource[],
  layout: SourceLayout,
): SnapshotSource {
  return layout.allNow ? new MergedSourceNow(sources, layout) : new MergedSource(sources, layout);
}

/** No source serves `typeUrl`. */
function unknownType(typeUrl: string): KdsError {
  return new KdsError("unknown_type", `no source serves ${typeUrl}`);
}

/** Several sources as one (an object with its methods on its prototype: a server holds one per stream). */
class MergedSource implements SnapshotSource {
  protected readonly sources: readonly SnapshotSource[];
  protected readonly layout: SourceLayout;

  /**
   * @param sources - the sources
   * @param layout - which serves each type
   */
  constructor(sources: readonly SnapshotSource[], layout: SourceLayout) {
    this.sources = sources;
    this.layout = layout;
  }

  /** Every type served. */
  get typeUrls(): readonly string[] {
    return this.layout.typeUrls;
  }

  /** The set of `typeUrl` from the source that serves it; rejects with `unknown_type` when none does. */
  snapshot(typeUrl: string, signal: AbortSignal): Promise<Snapshot | undefined> {
    const i = this.layout.indexOf(typeUrl);
    if (i === undefined) return Promise.reject(unknownType(typeUrl));
    return (this.sources[i] as SnapshotSource).snapshot(typeUrl, signal);
  }

  /** Calls `listener` on every source's changes until `signal` aborts. */
  onChange(listener: (typeUrl: string, key?: string) => void, signal: AbortSignal): void {
    for (const source of this.sources) source.onChange(listener, signal);
  }
}

/** {@link MergedSource} of sources that all offer `snapshotNow`: a separate class, so only such a merge offers it. */
class MergedSourceNow extends MergedSource {
  /** {@link MergedSource.snapshot} at once; throws `unknown_type` when no source serves `typeUrl`. */
  snapshotNow(typeUrl: string): Snapshot | undefined {
    const i = this.layout.indexOf(typeUrl);
    if (i === undefined) throw unknownType(typeUrl);
    return (this.sources[i] as SnapshotSource).snapshotNow?.(typeUrl);
  }
}
