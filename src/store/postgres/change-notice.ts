/**
 * What a write's `NOTIFY` says, and which watches it wakes.
 *
 * Every committed write notifies the store's channel, and every instance
 * LISTENs on it. A watch follows some kinds; a wake costs it a catch-up query
 * (the change log after its cursor). An instance holds several watches (zone
 * ownership, Zone resources, credentials, the served kinds), so waking them
 * all on every notification multiplied the catch-up queries by the watches of
 * every instance: at 10 instances connecting 10,000 zones, 60,810 queries,
 * most of them finding nothing, as a connect writes only zone statuses.
 *
 * So the payload names the kinds the write changed, and a notification wakes
 * only the watches of one of them:
 *
 *     <revision> <Kind>,<Kind>,...
 *
 * The kinds are sorted. A payload that names no kinds (the revision alone,
 * as earlier releases sent, or a write whose kinds would not fit the server's
 * 8,000-byte payload limit) wakes every watch. Nothing is lost either way: a
 * watch reads everything after its cursor when it wakes, and polls.
 *
 * @module
 */

/** Kinds longer than this together are left out of the payload (PostgreSQL refuses payloads of 8,000 bytes and more). */
const MAX_KINDS_CHARS = 7_000;

/** The payload of the `NOTIFY` of a write that ends at `revision` and changed `kinds`. */
export function noticePayload(revision: number, kinds: ReadonlySet<string>): string {
  const named = [...kinds].sort().join(",");
  return named.length === 0 || named.length > MAX_KINDS_CHARS
    ? String(revision)
    : `${revision} ${named}`;
}

/** The kinds a payload names, or undefined when it names none (every watch wakes). */
export function noticedKinds(payload: string): ReadonlySet<string> | undefined {
  const space = payload.indexOf(" ");
  if (space < 0) return undefined;
  const named = payload.slice(space + 1);
  return named.length === 0 ? undefined : new Set(named.split(","));
}

/** Whether a watch of `watched` kinds wakes for a change of `changed` kinds (undefined: unknown, so yes). */
export function wakes(
  watched: ReadonlySet<string>,
  changed: ReadonlySet<string> | undefined,
): boolean {
  if (changed === undefined) return true;
  for (const kind of changed) if (watched.has(kind)) return true;
  return false;
}
