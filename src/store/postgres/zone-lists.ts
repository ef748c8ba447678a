/**
 * Concurrent lists of one zone's resources, read several zones at a time.
 *
 * A global reads each zone's resources of each zone-to-global kind when the
 * zone's session starts (`list(kind, { labels: { "kds.io/zone": zone, ... } })`).
 * After a restart every zone comes back at once: 20,000 such lists for
 * 10,000 zones, one statement each, queued on the pool's connections (2.1 s
 * each on average in a 10,000-zone restart storm, behind each other and the
 * ownership writes), and each costs the process a round trip's work.
 *
 * So at most {@link ZONE_LISTS_IN_FLIGHT} such statements run at once; a
 * list that arrives while they all run waits, and the next statement reads
 * every waiting list of the same kind and other labels (up to
 * {@link ZONE_LIST_ZONES} zones) in one go, `WHERE zone = ANY($zones)`
 * through the zone label's index, one snapshot for all of them. A list
 * that finds a free slot goes at once, alone, so a quiet store answers
 * as before. The queue holds the callers' pending lists, one entry per call
 * in flight, so its length is bounded by their concurrency, as the pool's
 * queue was before.
 *
 * A waiting list whose signal aborts is taken out and rejected at once. A
 * statement for one list keeps that list's signal (an abort cancels it); a
 * statement for several runs to its end (the callers whose signals aborted
 * were already rejected).
 *
 * @module
 */
import { abortError } from "../../errors.ts";

/** Zone-list statements running at once; more lists wait and go together. */
export const ZONE_LISTS_IN_FLIGHT = 4;

/** The most zones one statement reads. */
export const ZONE_LIST_ZONES = 1_000;

/** Which lists can share a statement: the same kind and the same other labels. */
export interface ZoneListQuery {
  /** The kind listed. */
  readonly kind: string;
  /** The filter's labels other than the zone's. */
  readonly others: Readonly<Record<string, string>>;
}

/**
 * Reads `zones`' resources of `query` in one statement (cancelled through
 * `signal` when given): the snapshot's revision and each zone's rows.
 */
export type ReadZones<R> = (
  query: ZoneListQuery,
  zones: readonly string[],
  signal: AbortSignal | undefined,
) => Promise<{ readonly revision: number; readonly byZone: ReadonlyMap<string, R[]> }>;

class Waiting<R> {
  settled = false;
  #onAbort: (() => void) | undefined;

  constructor(
    readonly key: string,
    readonly query: ZoneListQuery,
    readonly zone: string,
    readonly signal: AbortSignal | undefined,
    readonly settle: {
      resolve: (r: { revision: number; resources: R[] }) => void;
      reject: (e: unknown) => void;
    },
  ) {}

  /** Rejects at once when the signal aborts (while waiting or in a shared statement). */
  watch(): void {
    const signal = this.signal;
    if (signal === undefined) return;
    this.#onAbort = () => this.reject(abortError(signal, "list"));
    signal.addEventListener("abort", this.#onAbort, { once: true });
  }

  resolve(result: { revision: number; resources: R[] }): void {
    if (this.#done()) this.settle.resolve(result);
  }

  reject(error: unknown): void {
    if (this.#done()) this.settle.reject(error);
  }

  #done(): boolean {
    if (this.settled) return false;
    this.settled = true;
    if (this.#onAbort !== undefined) this.signal?.removeEventListener("abort", this.#onAbort);
    return true;
  }
}

/** Lists of single zones, coalesced while the store is busy with them. */
export class ZoneLists<R> {
  readonly #read: ReadZones<R>;
  #waiting: Waiting<R>[] = [];
  #inFlight = 0;

  /** @param read - reads several zones' resources of one query in one statement */
  constructor(read: ReadZones<R>) {
    this.#read = read;
  }

  /** Lists `zone`'s resources of `query`; see the module's notes on when it waits and goes with others. */
  list(
    query: ZoneListQuery,
    zone: string,
    signal: AbortSignal | undefined,
  ): Promise<{ revision: number; resources: R[] }> {
    if (signal?.aborted) return Promise.reject(abortError(signal, "list"));
    const key = `${query.kind}\u0000${JSON.stringify(Object.entries(query.others).sort())}`;
    return new Promise((resolve, reject) => {
      const entry = new Waiting<R>(key, query, zone, signal, { resolve, reject });
      if (this.#inFlight < ZONE_LISTS_IN_FLIGHT) {
        void this.#run([entry]);
        return;
      }
      entry.watch();
      this.#waiting.push(entry);
    });
  }

  /** Reads `group` (one key) in one statement and settles each; then takes the next waiting group while any wait. */
  async #run(first: Waiting<R>[]): Promise<void> {
    this.#inFlight++;
    try {
      for (let group = first; group.length > 0; group = this.#take()) {
        const head = group[0] as Waiting<R>;
        const alone = group.length === 1 ? head.signal : undefined;
        try {
          const zones = [...new Set(group.map((e) => e.zone))];
          const { revision, byZone } = await this.#read(head.query, zones, alone);
          for (const entry of group)
            entry.resolve({ revision, resources: [...(byZone.get(entry.zone) ?? [])] });
        } catch (error) {
          for (const entry of group) entry.reject(error);
        }
      }
    } finally {
      this.#inFlight--;
    }
  }

  /** The oldest waiting list's key, with every waiting list of that key (up to ZONE_LIST_ZONES zones), in arrival order. */
  #take(): Waiting<R>[] {
    const waiting = this.#waiting.filter((e) => !e.settled);
    const head = waiting[0];
    if (head === undefined) {
      this.#waiting = [];
      return [];
    }
    const group: Waiting<R>[] = [];
    const rest: Waiting<R>[] = [];
    const zones = new Set<string>();
    for (const entry of waiting) {
      if (entry.key === head.key && (zones.has(entry.zone) || zones.size < ZONE_LIST_ZONES)) {
        zones.add(entry.zone);
        group.push(entry);
      } else rest.push(entry);
    }
    this.#waiting = rest;
    return group;
  }
}
