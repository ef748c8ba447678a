/**
 * The sync lag clocks of one type on one stream (see sync-observers.ts):
 * which keys' clocks run, since when, and which responses in flight carry
 * which clocks.
 *
 * Every zone's stream starts a clock, sends it and stops it with every
 * change, so the common case costs no allocation that outlives the call:
 * a single running clock sits in two fields, not in a map (a map emptied
 * and filled again with each change got a new table each time, and the
 * tables lived until the ACK, long enough to be promoted to the old
 * generation), and the responses in flight sit in one flat array that keeps
 * its storage (`nonce, count, key, since, key, since, ...` per response),
 * not in an object and an array per response.
 *
 * @module
 */

/** Most keys whose clock runs at once; the oldest is dropped beyond it (bounds memory for changes never sent). */
const MAX_TRACKED_KEYS = 10_000;

/**
 * Most responses whose clocks are kept: beyond it the oldest are dropped (a
 * response neither ACKed, NACKed nor reported stalled, as a response in
 * flight when its stream started over is, would otherwise stay).
 */
export const MAX_TRACKED_RESPONSES = 64;

/** Where {@link TypeLagClocks.stop} reports each stopped clock's time: one object per stream, not a function per type. */
export interface LagReport {
  /** A clock of `kind` stopped after `ms`. */
  lag(kind: string, ms: number): void;
}

/** The clocks of one type on one stream. */
export class TypeLagClocks {
  /** The kind's metrics label (looked up once per type and stream, not per event). */
  readonly kind: string;
  /** The one running clock while `#more` holds none: its key (undefined: none runs) and start. */
  #key: string | undefined;
  #since = 0;
  /** The running clocks, key -> start, in the order they started, once two ran at once (then `#key` is unused). */
  #more: Map<string, number> | undefined;
  /** The responses in flight that carry clocks, oldest first: `nonce, count, key, since, ...` each. */
  readonly #flight: Array<string | number | undefined> = [];
  /** The used length of `#flight`, and how many responses it holds. */
  #flightEnd = 0;
  #flights = 0;

  /** @param kind - the kind's metrics label */
  constructor(kind: string) {
    this.kind = kind;
  }

  /** Whether any clock runs (a response now would carry one). */
  get running(): boolean {
    return this.#key !== undefined || (this.#more !== undefined && this.#more.size > 0);
  }

  /** Starts the clock of `key` at `since`, unless it already runs from earlier. */
  start(key: string, since: number): void {
    const more = this.#more;
    if (more === undefined || more.size === 0) {
      const running = this.#key;
      if (running === undefined) {
        this.#key = key;
        this.#since = since;
        return;
      }
      if (running === key) {
        if (since < this.#since) this.#since = since;
        return;
      }
      // A second clock: both go to the map, the first one first.
      const map = more ?? new Map<string, number>();
      this.#more = map;
      map.set(running, this.#since);
      this.#key = undefined;
      map.set(key, since);
      return;
    }
    const earlier = more.get(key);
    if (earlier !== undefined) {
      if (earlier <= since) return;
      more.delete(key);
    }
    more.set(key, since);
    if (more.size > MAX_TRACKED_KEYS) more.delete(more.keys().next().value as string);
  }

  /**
   * The response sent with `nonce` takes the running clocks of `keys` in
   * flight (every running clock when `keys` is undefined: a
   * state-of-the-world response carries the whole set).
   */
  send(nonce: string, keys: readonly string[] | undefined): void {
    if (!this.running) return;
    const flight = this.#flight;
    const at = this.#flightEnd;
    let end = at + 2;
    const more = this.#more;
    if (more === undefined || more.size === 0) {
      const key = this.#key as string;
      if (keys !== undefined && !keys.includes(key)) return;
      flight[end++] = key;
      flight[end++] = this.#since;
      this.#key = undefined;
    } else if (keys === undefined) {
      for (const [key, since] of more) {
        flight[end++] = key;
        flight[end++] = since;
      }
      more.clear();
    } else {
      for (const key of keys) {
        const since = more.get(key);
        if (since === undefined) continue;
        flight[end++] = key;
        flight[end++] = since;
        more.delete(key);
      }
      if (end === at + 2) return;
    }
    flight[at] = nonce;
    flight[at + 1] = (end - at - 2) / 2;
    this.#flightEnd = end;
    if (++this.#flights > MAX_TRACKED_RESPONSES) this.#remove(0);
  }

  /**
   * Stops the clocks the response sent with `nonce` carried, telling
   * `report` each one's time with this type's kind (`now` read once);
   * nothing when it carried none (or was dropped, or already answered).
   */
  stop(nonce: string, now: () => number, report: LagReport): void {
    const at = this.#find(nonce);
    if (at < 0) return;
    const t = now();
    const flight = this.#flight;
    const end = at + 2 + 2 * (flight[at + 1] as number);
    for (let i = at + 3; i < end; i += 2) report.lag(this.kind, t - (flight[i] as number));
    this.#remove(at);
  }

  /** Puts the clocks the response sent with `nonce` carried back to running (a NACK, or its ACK timed out). */
  putBack(nonce: string): void {
    const at = this.#find(nonce);
    if (at < 0) return;
    const flight = this.#flight;
    const end = at + 2 + 2 * (flight[at + 1] as number);
    for (let i = at + 2; i < end; i += 2) this.start(flight[i] as string, flight[i + 1] as number);
    this.#remove(at);
  }

  /** Where the response sent with `nonce` starts in `#flight`, or -1. */
  #find(nonce: string): number {
    const flight = this.#flight;
    for (let at = 0; at < this.#flightEnd; at += 2 + 2 * (flight[at + 1] as number))
      if (flight[at] === nonce) return at;
    return -1;
  }

  /** Removes the response starting at `at` from `#flight`, moving the later ones down. */
  #remove(at: number): void {
    const flight = this.#flight;
    const length = 2 + 2 * (flight[at + 1] as number);
    const end = this.#flightEnd;
    for (let i = at + length; i < end; i++) flight[i - length] = flight[i];
    for (let i = end - length; i < end; i++) flight[i] = undefined;
    this.#flightEnd = end - length;
    this.#flights--;
  }
}
