/**
 * The delta diff of one type on one stream: which resources the client does
 * not hold yet (or holds at another version) and which it holds that are
 * gone, taken one response's worth at a time. A change split over many
 * responses is diffed once: each response goes on where the last stopped.
 *
 * @module
 */
import type { ResourceSet, WireResource } from "./types.ts";

/** Worst-case framing of one repeated entry (tag + length). */
export const ENTRY_OVERHEAD = 6;

/** What the diff of one type keeps between responses (part of the server's per-type state). */
export interface DeltaDiffState {
  /**
   * What the client holds once the responses in flight are applied, key ->
   * version: set when a response is sent, not when it is ACKed (a NACK or a
   * timeout marks what the responses in flight carried as in doubt; see the
   * discovery server's start-over). Made at the first entry: most types of
   * most streams never hold one, and an empty Map is about 180 bytes.
   */
  known: Map<string, string> | undefined;
  /** Explicit subscriptions; undefined means all ("*"). */
  names: Set<string> | undefined;
  /** Resources left out as too large, key -> version; made at the first. */
  oversized: Map<string, string> | undefined;
  /** The next diff must look at every resource (first send, after a NACK, ...). */
  full: boolean;
  /** Keys changed since the last diff (at most one entry per resource); made at the first change. */
  changed: Set<string> | undefined;
  /**
   * The rest of the last full diff's keys that no response has looked at yet,
   * from `sweepAt`: the resource itself for a key that was in the set, the
   * key for one the client held (or will) that was not.
   */
  sweep: ReadonlyArray<WireResource | string>;
  /** Where the next response goes on in `sweep`. */
  sweepAt: number;
  /**
   * The set's version when the sweep was made: while the set still has it,
   * the sweep's resources are the set's (its version changes with any
   * resource), and a response takes them without looking each up again.
   */
  sweepVersion: string | undefined;
  /** Changed keys taken for a diff that no response has looked at yet (looked at after the sweep); made at the first. */
  taken: Set<string> | undefined;
  /**
   * Keys a diff held back for the order between kinds (an upsert while a
   * kind this one depends on has upserts to send, a removal while a kind
   * depending on this one has removals to send); the next diff looks at them
   * again. Made at the first.
   */
  held: Set<string> | undefined;
  /** Among {@link held}: an upsert. */
  heldUpserts: boolean;
  /** Among {@link held}: a removal. */
  heldRemovals: boolean;
}

/** What a diff may send now, given the order between kinds (see {@link DeltaDiffState.held}). */
export interface DiffOrder {
  /** Resources may be sent: no kind this one depends on has upserts to send. */
  readonly upserts: boolean;
  /** Removals may be sent: no kind depending on this one has removals to send. */
  readonly removals: boolean;
}

/** One response's worth of a delta diff. */
export interface DeltaPart {
  /** Resources to send. */
  readonly upserts: WireResource[];
  /** Keys to send as removed. */
  readonly removed: string[];
  /** Their budgeted size in bytes. */
  readonly bytes: number;
  /** More of the change is left for the next response. */
  readonly more: boolean;
}

/**
 * The empty sweep, shared by every type of every stream (a sweep is replaced,
 * never pushed to): an empty array per type and stream was about 130 bytes of
 * every idle zone's. A new type's state starts with it.
 */
export const NO_SWEEP: ReadonlyArray<WireResource | string> = Object.freeze([]);

/** What a state without `known` holds: nothing (only read, never written). */
const NOTHING_KNOWN: ReadonlyMap<string, string> = new Map();

/**
 * Takes the work before the snapshot is read (a change that lands while it
 * is being read marks the type again and is handled next round). Returns
 * whether this diff is full; give it back with {@link giveBack} if no
 * snapshot came.
 */
export function takeWork(state: DeltaDiffState): boolean {
  const full = state.full;
  state.full = false;
  if (full) {
    // A full diff looks at every key anyway.
    state.sweep = NO_SWEEP;
    state.sweepAt = 0;
    state.sweepVersion = undefined;
    state.taken?.clear();
    state.changed?.clear();
  } else if (state.taken === undefined || state.taken.size === 0) {
    [state.taken, state.changed] = [state.changed, state.taken];
  } else if (state.changed !== undefined) {
    for (const key of state.changed) state.taken.add(key);
    state.changed.clear();
  }
  const held = state.held;
  if (held !== undefined && held.size > 0) {
    // Held keys are looked at again (a full diff looks at every key anyway).
    if (!full) {
      state.taken ??= new Set();
      for (const key of held) state.taken.add(key);
    }
    held.clear();
  }
  state.heldUpserts = false;
  state.heldRemovals = false;
  return full;
}

/** Gives back work taken by {@link takeWork} when no snapshot could be read (the changed keys stay taken). */
export function giveBack(state: DeltaDiffState, full: boolean): void {
  state.full = state.full || full;
}

/**
 * The next response's worth of the diff against `resources` (the set at
 * `version`): it closes at `target` bytes or at `entries` resources plus
 * removals (when given), except that a first entry larger than `target`
 * still goes alone up to `limit`; a resource larger than `limit` is left
 * out and reported to `oversized` once per version.
 */
export function nextPart(
  state: DeltaDiffState,
  resources: ResourceSet,
  version: string,
  full: boolean,
  size: { readonly limit: number; readonly target: number; readonly entries?: number },
  oversized: (key: string, bytes: number) => void,
  order?: DiffOrder,
): DeltaPart {
  const upserts: WireResource[] = [];
  const removed: string[] = [];
  let bytes = 0;
  // What the client will hold once the responses in flight are applied.
  const known = state.known ?? NOTHING_KNOWN;
  /** Looks at one key (`r`: its resource, if in the set): "skip" (nothing to send), "taken" (in the response), or "full" (it waits for the next one). */
  const maxEntries = size.entries ?? Infinity;
  const take = (key: string, r: WireResource | undefined): "skip" | "taken" | "full" => {
    let cost: number;
    if (r !== undefined && (state.names === undefined || state.names.has(key))) {
      if (known.get(key) === r.version) return "skip";
      if (order !== undefined && !order.upserts) {
        hold(state, key);
        state.heldUpserts = true;
        return "skip";
      }
      cost = r.resourceBytes + ENTRY_OVERHEAD;
      if (cost > size.limit) {
        if (state.oversized?.get(key) !== r.version) {
          state.oversized ??= new Map();
          state.oversized.set(key, r.version);
          oversized(key, r.resourceBytes);
        }
        return "skip";
      }
      if (
        (bytes > 0 && bytes + cost > size.target) ||
        upserts.length + removed.length >= maxEntries
      )
        return "full";
      upserts.push(r);
    } else if (r === undefined && known.has(key)) {
      if (order !== undefined && !order.removals) {
        hold(state, key);
        state.heldRemovals = true;
        return "skip";
      }
      cost = key.length * 3 + ENTRY_OVERHEAD;
      if (
        (bytes > 0 && bytes + cost > size.target) ||
        upserts.length + removed.length >= maxEntries
      )
        return "full";
      removed.push(key);
    } else return "skip";
    bytes += cost;
    return "taken";
  };
  if (full) {
    // Every key of the set, then every key the client holds (or will) that is no longer in it; what does not fit waits in the sweep.
    let more = false;
    state.sweepVersion = version;
    let sweep: Array<WireResource | string> | undefined;
    const visit = (key: string, r: WireResource | undefined): void => {
      if (!more && take(key, r) !== "full") return;
      more = true;
      if (sweep === undefined) sweep = [...state.sweep];
      sweep.push(r ?? key);
    };
    for (const r of resources) visit(r.key, r);
    for (const key of known.keys()) if (resources.get(key) === undefined) visit(key, undefined);
    if (sweep !== undefined) state.sweep = sweep;
  } else {
    let more = false;
    const sweep = state.sweep;
    // The set has not changed since the sweep was made: its resources are the set's (a 100k-resource initial sync
    // looked each up again, a fifth of the global's CPU); otherwise each is looked up (it may be gone or newer).
    const current = state.sweepVersion === version;
    for (; state.sweepAt < sweep.length; state.sweepAt++) {
      const item = sweep[state.sweepAt] as WireResource | string;
      const key = typeof item === "string" ? item : item.key;
      const r = typeof item !== "string" && current ? item : resources.get(key);
      if (take(key, r) !== "full") continue;
      more = true;
      break;
    }
    if (!more) {
      // A new array only when the sweep held something: most parts (one change) had none, and an array made per
      // part lived until the next change, long enough to be promoted.
      if (sweep.length > 0) state.sweep = NO_SWEEP;
      state.sweepAt = 0;
      state.sweepVersion = undefined;
      // Deleting the visited keys while iterating is well defined for a Set.
      const taken = state.taken;
      if (taken !== undefined && taken.size > 0) {
        // A key this response already carries (the sweep reached it after it changed) is not added twice: the
        // sweep's entry is the current one, and `known` learns of this response only once it is sent.
        // Most often the part is empty here (nothing swept: one change taken): no set to build for that.
        const inPart = upserts.length + removed.length === 0 ? undefined : new Set<string>(removed);
        if (inPart !== undefined) for (const r of upserts) inPart.add(r.key);
        for (const key of taken) {
          if (inPart?.has(key) !== true && take(key, resources.get(key)) === "full") break;
          taken.delete(key);
        }
      }
    }
  }
  return {
    upserts,
    removed,
    bytes,
    more: state.sweepAt < state.sweep.length || (state.taken?.size ?? 0) > 0,
  };
}

/** Holds `key` back for the order between kinds: the next diff looks at it again. */
function hold(state: DeltaDiffState, key: string): void {
  state.held ??= new Set();
  state.held.add(key);
}
