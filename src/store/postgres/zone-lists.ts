/**
 * Lists of one zone's resources, read several zones to a statement.
 *
 * A global lists each zone's resources of every kind zones send when the
 * zone's session starts (what it holds decides what the zone resends). In a
 * restart storm that is one statement per zone and kind, thousands a second,
 * each sent to the server on its own: in a 2,000-zone storm the global spent
 * about 750 ms of CPU in its PostgreSQL client's socket writes, most of them
 * for these lists.
 *
 * So lists that differ only in the zone they name go together: the first
 * goes at once, alone; those that arrive while a statement of their group
 * runs wait for it and then go together in the next, up to
 * {@link ZONES_PER_STATEMENT} zones. Under no load nothing waits; under load
 * the statements grow with it. Each caller gets what its own list would have
 * read, at the statement's snapshot: the rows of its zone, in the statement's
 * order, and the statement's revision. A row that cannot be decoded fails
 * only the list of its zone.
 *
 * A caller whose signal aborts is rejected at once, waiting or not; a
 * statement is cancelled only once every list it reads for has been
 * (so a lone list's abort cancels its statement, as before). The waiting
 * lists are bounded by the callers' own concurrency, one entry per call in
 * flight. A caller's signal carries one abort listener whatever the lists
 * under it, as in postgres/guard.ts: a global's lists share long-lived
 * signals (its stop signal, a zone session's), and Node warns past 10.
 *
 * @module
 */
import { abortError } from "../../errors.ts";
import type { StoredResource } from "../../kinds/resource-types.ts";
import type { ListResult } from "../contract.ts";

/** The most zones one statement reads; the rest wait for the next. */
export const ZONES_PER_STATEMENT = 500;

/** What one statement read: its snapshot's revision and each zone's rows, in the statement's order. */
export interface ZonesRead<Row> {
  readonly revision: number;
  readonly rows: ReadonlyMap<string, readonly Row[]>;
}

/** How a group reads: the rows of `zones` (distinct) in one statement, cancelled when `signal` aborts. */
export interface ZoneListReader<Row> {
  read(zones: readonly string[], signal: AbortSignal): Promise<ZonesRead<Row>>;
  decode(row: Row): StoredResource;
}

/**
 * The abort handlers of the lists waiting or in flight under each signal,
 * behind one abort listener per signal (a listener per list would put
 * thousands on a shared signal in a storm).
 */
const abortsBySignal = new WeakMap<AbortSignal, Set<() => void>>();

/** The abort handlers under `signal`, its one listener added the first time. */
function abortsUnder(signal: AbortSignal): Set<() => void> {
  let aborts = abortsBySignal.get(signal);
  if (aborts === undefined) {
    const handlers = new Set<() => void>();
    aborts = handlers;
    abortsBySignal.set(signal, handlers);
    signal.addEventListener(
      "abort",
      () => {
        for (const abort of [...handlers]) abort();
        handlers.clear();
      },
      { once: true },
    );
  }
  return aborts;
}

/** One waiting or in-flight list. */
interface Pending {
  readonly zone: string;
  settled: boolean;
  resolve(result: ListResult): void;
  reject(error: unknown): void;
}

/** One group: its reader, the lists waiting, and the statement in flight (its lists and canceller). */
interface Group<Row> {
  readonly reader: ZoneListReader<Row>;
  waiting: Pending[];
  inFlight: { readonly lists: readonly Pending[]; readonly cancel: AbortController } | undefined;
}

/** Concurrent lists of one zone each, read together by group (see the module's notes). */
export class ZoneLists<Row> {
  readonly #groups = new Map<string, Group<Row>>();

  /**
   * Lists `zone`'s resources through the statements of group `key` (lists of
   * one key differ in nothing but their zone); `reader` is that of the
   * group's first caller while the group lasts.
   */
  list(
    key: string,
    zone: string,
    signal: AbortSignal | undefined,
    reader: ZoneListReader<Row>,
  ): Promise<ListResult> {
    if (signal?.aborted) return Promise.reject(abortError(signal, "list"));
    // Before the group is touched: nothing below may throw, or the group would be left without a runner.
    const aborts = signal === undefined ? undefined : abortsUnder(signal);
    let group = this.#groups.get(key);
    const first = group === undefined;
    if (group === undefined) {
      group = { reader, waiting: [], inFlight: undefined };
      this.#groups.set(key, group);
    }
    const joined = group;
    const result = new Promise<ListResult>((resolve, reject) => {
      const onAbort = (): void => {
        pending.reject(abortError(signal as AbortSignal, "list"));
        const inFlight = joined.inFlight;
        if (inFlight?.lists.includes(pending) && inFlight.lists.every((p) => p.settled))
          inFlight.cancel.abort();
      };
      const settle = (): boolean => {
        if (pending.settled) return false;
        pending.settled = true;
        aborts?.delete(onAbort);
        return true;
      };
      const pending: Pending = {
        zone,
        settled: false,
        resolve: (value) => {
          if (settle()) resolve(value);
        },
        reject: (error) => {
          if (settle()) reject(error);
        },
      };
      aborts?.add(onAbort);
      joined.waiting.push(pending);
    });
    if (first) void this.#run(key, joined);
    return result;
  }

  /** Reads the group's lists a statement at a time until none waits, then forgets the group; settles every list it takes. */
  async #run(key: string, group: Group<Row>): Promise<void> {
    for (;;) {
      const lists = take(group);
      // Taking the last lists and forgetting the group happen in one step, so no list joins a group that is done.
      if (lists.length === 0) {
        this.#groups.delete(key);
        return;
      }
      const cancel = new AbortController();
      group.inFlight = { lists, cancel };
      try {
        const read = await group.reader.read([...new Set(lists.map((p) => p.zone))], cancel.signal);
        for (const p of lists) {
          if (p.settled) continue; // aborted meanwhile: nobody waits for these rows, so they are not decoded
          try {
            p.resolve({
              revision: read.revision,
              resources: (read.rows.get(p.zone) ?? []).map((row) => group.reader.decode(row)),
            });
          } catch (error) {
            p.reject(error); // a row of this zone does not decode: its list alone fails
          }
        }
      } catch (error) {
        for (const p of lists) p.reject(error);
      }
      group.inFlight = undefined;
    }
  }
}

/** The next statement's lists: unsettled ones in arrival order, up to ZONES_PER_STATEMENT distinct zones. */
function take<Row>(group: Group<Row>): Pending[] {
  const lists: Pending[] = [];
  const zones = new Set<string>();
  const waiting = group.waiting;
  let end = 0;
  for (; end < waiting.length; end++) {
    const p = waiting[end] as Pending;
    if (p.settled) continue;
    if (!zones.has(p.zone) && zones.size === ZONES_PER_STATEMENT) break;
    zones.add(p.zone);
    lists.push(p);
  }
  group.waiting = end === waiting.length ? [] : waiting.slice(end);
  return lists;
}
