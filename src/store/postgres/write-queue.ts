/**
 * Group commit for the PostgreSQL store's writes.
 *
 * Every write takes the store's one write lock (the `kds_state` row that
 * holds the revision counter) for its whole transaction, several round trips
 * long. Written one transaction each, concurrent writes queue on that lock,
 * and a busy process makes each round trip longer still: 2,000 concurrent
 * one-resource writes went in at about 100 a second, the same writes in
 * batches of 100 at 4,000-7,000 a second (one process, a loaded 2-core
 * machine). A global whose zones reconnect at once writes one ownership
 * lease per zone, and at first connect each zone's resources: that was the
 * restart storm's and the fleet's bottleneck.
 *
 * So one writer per store writes the queued writes, in arrival order, as
 * groups of up to {@link GROUP_OPS} ops, one transaction each; writes that
 * arrive meanwhile wait for the next group. Each write keeps its own
 * outcome (the store decides per write, see `PostgresStore.apply`). The
 * queue holds the callers' pending writes, one entry per call in flight; its
 * length is bounded by the callers' own concurrency, as the connection
 * pool's queue was before.
 *
 * A write whose signal aborts while it waits is taken out and rejected at
 * once; once its group is being written it is rejected at once too, but the
 * group may still commit it (as a write aborted during its COMMIT always
 * could). Signals are watched with one abort listener each, whatever the
 * number of writes under them.
 *
 * @module
 */
import { abortError } from "../../errors.ts";

/** The most ops one group (one transaction) takes; a single larger write goes alone. */
export const GROUP_OPS = 5_000;

/** One queued write and how to settle its caller (each at most once). */
export interface QueuedWrite<W, R> {
  /** What to write. */
  readonly work: W;
  /** Its caller's signal. */
  readonly signal: AbortSignal | undefined;
  /** True once the caller has its outcome. */
  readonly settled: boolean;
  /** Settles the caller with `result` (no effect once settled). */
  resolve(result: R): void;
  /** Settles the caller with `error` (no effect once settled). */
  reject(error: unknown): void;
}

/**
 * Writes `group` (in order, none of it settled when called) and settles each
 * of its writes; a write it leaves unsettled is rejected with the error it
 * throws, or an internal error.
 */
export type WriteGroup<W, R> = (group: readonly QueuedWrite<W, R>[]) => Promise<void>;

class Entry<W, R> implements QueuedWrite<W, R> {
  settled = false;
  constructor(
    readonly work: W,
    readonly size: number,
    readonly signal: AbortSignal | undefined,
    readonly done: (entry: Entry<W, R>) => void,
    readonly settle: { resolve: (r: R) => void; reject: (e: unknown) => void },
  ) {}

  resolve(result: R): void {
    if (this.settled) return;
    this.settled = true;
    this.done(this);
    this.settle.resolve(result);
  }

  reject(error: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.done(this);
    this.settle.reject(error);
  }
}

/** Queued writes of one store, written in groups by one writer. */
export class WriteQueue<W, R> {
  readonly #write: WriteGroup<W, R>;
  #queue: Entry<W, R>[] = [];
  #writing = false;
  /** The waiting and in-flight writes under each signal, behind one abort listener per signal. */
  readonly #bySignal = new WeakMap<AbortSignal, Set<Entry<W, R>>>();

  /** @param write - writes one group (see {@link WriteGroup}) */
  constructor(write: WriteGroup<W, R>) {
    this.#write = write;
  }

  /**
   * Queues `work` (`size` ops) and resolves with its outcome once its group
   * was written; rejects at once when `signal` aborts (see the module's
   * notes on what an abort means once the group is being written).
   */
  submit(work: W, size: number, signal: AbortSignal | undefined, what: string): Promise<R> {
    if (signal?.aborted) return Promise.reject(abortError(signal, what));
    return new Promise<R>((resolve, reject) => {
      const entry = new Entry<W, R>(work, size, signal, (e) => this.#forget(e), {
        resolve,
        reject,
      });
      if (signal !== undefined) this.#underSignal(signal, what).add(entry);
      this.#queue.push(entry);
      if (!this.#writing) void this.#run();
    });
  }

  #underSignal(signal: AbortSignal, what: string): Set<Entry<W, R>> {
    let entries = this.#bySignal.get(signal);
    if (entries === undefined) {
      const set = new Set<Entry<W, R>>();
      entries = set;
      this.#bySignal.set(signal, set);
      signal.addEventListener(
        "abort",
        () => {
          for (const entry of [...set]) entry.reject(abortError(signal, what));
        },
        { once: true },
      );
    }
    return entries;
  }

  #forget(entry: Entry<W, R>): void {
    if (entry.signal !== undefined) this.#bySignal.get(entry.signal)?.delete(entry);
  }

  /** The writer: groups until the queue is empty. Never rejects; every write taken is settled. */
  async #run(): Promise<void> {
    this.#writing = true;
    try {
      for (;;) {
        const group = this.#take();
        if (group.length === 0) break;
        try {
          await this.#write(group);
        } catch (error) {
          for (const entry of group) entry.reject(error);
        }
        for (const entry of group)
          entry.reject(new Error("postgres write queue: the writer left a write unsettled"));
      }
    } finally {
      this.#writing = false;
    }
  }

  /** The next group: unsettled writes in arrival order, up to GROUP_OPS ops (at least one write). */
  #take(): Entry<W, R>[] {
    const queue = this.#queue;
    let end = 0;
    let ops = 0;
    const group: Entry<W, R>[] = [];
    while (end < queue.length) {
      const entry = queue[end] as Entry<W, R>;
      if (!entry.settled) {
        if (group.length > 0 && ops + entry.size > GROUP_OPS) break;
        group.push(entry);
        ops += entry.size;
      }
      end++;
    }
    this.#queue = end === queue.length ? [] : queue.slice(end);
    return group;
  }
}
