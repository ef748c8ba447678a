/**
 * One verdict per zone, derived from its {@link ZoneStatus} in one pure
 * function ({@link zoneVerdict}): `offline` (no session), `stalled` (a
 * response waits for its ACK past the ACK timeout), `degraded` (a NACK newer
 * than the last ACK, a response this side rejected after its last accepted
 * one, resources the peer rejects, held deletions, or a kind whose store
 * reads fail so its data goes stale), or `healthy`. The first that applies
 * wins, in that order; the reason is kept with it. The status page,
 * `/status.json`, `inspect zones` and the `kds_zones` gauge all read it here.
 *
 * @module
 */
import type { TypeSyncStatus, ZoneStatus } from "./zone-status.ts";

/** Every zone state, best first. */
export const ZONE_STATES = ["healthy", "degraded", "stalled", "offline"] as const;

/** A zone's state: see {@link ZoneVerdict}. */
export type ZoneState = (typeof ZONE_STATES)[number];

/** Whether `value` names a {@link ZoneState}. */
export function isZoneState(value: string): value is ZoneState {
  return (ZONE_STATES as readonly string[]).includes(value);
}

/**
 * A zone's verdict. `since` is when the condition the reason names began (ms
 * since the epoch), when known: the session's start for a healthy zone, its
 * end for an offline one, the oldest current problem otherwise.
 */
export type ZoneVerdict =
  /** A session is up and nothing below holds. */
  | { readonly state: "healthy"; readonly reason: ""; readonly since: number | undefined }
  /** A session is up, changes flow, but something the operator should look at holds (`reason` says what). */
  | { readonly state: "degraded"; readonly reason: string; readonly since: number | undefined }
  /** A session is up, but a response waits for its ACK past the ACK timeout (the watchdog). */
  | { readonly state: "stalled"; readonly reason: string; readonly since: number | undefined }
  /** No session: never connected, or its last one ended (`reason`: how). */
  | { readonly state: "offline"; readonly reason: string; readonly since: number | undefined };

/** The longest reason a verdict keeps (several problems are joined with "; "). */
const MAX_REASON = 500;

/** One problem found: its text and when it began. */
interface Problem {
  readonly text: string;
  readonly since: number | undefined;
}

/** Whether `a` (undefined: never) is newer than `b` (undefined: never). */
function newer(a: number | undefined, b: number | undefined): boolean {
  return a !== undefined && (b === undefined || a > b);
}

/** What is wrong with one type, as degraded problems. */
function typeProblems(t: TypeSyncStatus): Problem[] {
  const out: Problem[] = [];
  const times = t.times;
  if (newer(times?.lastNackAt, times?.lastAckAt))
    out.push({
      text: `${t.kind}: the peer NACKed it: ${t.lastNackError ?? "(no reason given)"}`,
      since: times?.lastNackAt,
    });
  if (newer(times?.lastRejectedAt, times?.lastAcceptedAt))
    out.push({
      text: `${t.kind}: this side rejected the peer's response: ${t.lastRejectError ?? "(no reason given)"}`,
      since: times?.lastRejectedAt,
    });
  const rejected = t.peerRejectedResources.length + t.peerRejectedOmitted;
  if (rejected > 0) {
    const first = t.peerRejectedResources[0];
    out.push({
      text: `${t.kind}: the peer rejects ${rejected} resource${rejected === 1 ? "" : "s"}${first === undefined ? "" : ` (${first.key}: ${first.reason})`}`,
      since: times?.lastReceivedAt,
    });
  }
  if (t.storeError !== undefined)
    out.push({
      text: `${t.kind}: stale, this side's store reads fail: ${t.storeError}`,
      since: undefined,
    });
  return out;
}

/** The earliest of `times` that is known. */
function earliest(times: readonly (number | undefined)[]): number | undefined {
  const known = times.filter((t): t is number => t !== undefined);
  return known.length === 0 ? undefined : Math.min(...known);
}

/** `texts` joined, cut to {@link MAX_REASON} characters. */
function joined(texts: readonly string[]): string {
  const all = texts.join("; ");
  return all.length <= MAX_REASON ? all : `${all.slice(0, MAX_REASON - 1)}…`;
}

/**
 * The verdict of `status` (see the module). Pure: the same status gives the
 * same verdict, whatever the time.
 */
export function zoneVerdict(status: ZoneStatus): ZoneVerdict {
  if (!status.online) {
    const end = status.lastEnd;
    return {
      state: "offline",
      reason:
        end === undefined
          ? "never connected"
          : `last session ended: ${end.code}${end.message === "" ? "" : `: ${end.message}`}`,
      since: status.disconnectedAt?.getTime(),
    };
  }
  const stalled = status.types.filter((t) => t.stalled);
  if (stalled.length > 0)
    return {
      state: "stalled",
      reason: joined(
        stalled.map((t) => `${t.kind}: a response waits for its ACK past the ACK timeout`),
      ),
      since: earliest(stalled.map((t) => t.times?.stalledSince)),
    };
  const problems = status.types.flatMap(typeProblems);
  const held = status.heldReset;
  if (held !== undefined)
    problems.push({
      text: `deletions held by the reset guard: ${held.kinds.map((k) => `${k.kind} ${k.held} of ${k.of}`).join(", ")} (kds-mux zone accept-reset applies them)`,
      since: held.since.getTime(),
    });
  if (problems.length > 0)
    return {
      state: "degraded",
      reason: joined(problems.map((p) => p.text)),
      since: earliest(problems.map((p) => p.since)),
    };
  return { state: "healthy", reason: "", since: status.connectedAt?.getTime() };
}

/** When this side last sent and received on one direction of a zone's connection. */
export interface DirectionTimes {
  /** The direction the kinds flow. */
  readonly direction: TypeSyncStatus["direction"];
  /** The last frame this side sent of a kind of that direction (ms since the epoch; undefined: none yet). */
  readonly lastSentAt: number | undefined;
  /** The last frame this side received of a kind of that direction. */
  readonly lastReceivedAt: number | undefined;
}

/** The latest of `times` that is known. */
function latest(times: readonly (number | undefined)[]): number | undefined {
  const known = times.filter((t): t is number => t !== undefined);
  return known.length === 0 ? undefined : Math.max(...known);
}

/** Per direction with a kind in `status`, the last sent and received times over its kinds. */
export function directionTimes(status: ZoneStatus): DirectionTimes[] {
  const directions = [...new Set(status.types.map((t) => t.direction))];
  return directions.map((direction) => {
    const types = status.types.filter((t) => t.direction === direction);
    return {
      direction,
      lastSentAt: latest(types.map((t) => t.times?.lastSentAt)),
      lastReceivedAt: latest(types.map((t) => t.times?.lastReceivedAt)),
    };
  });
}

/** How many of `statuses` are in each state (every state present, 0 when none). */
export function countByState(statuses: readonly ZoneStatus[]): Record<ZoneState, number> {
  const counts: Record<ZoneState, number> = { healthy: 0, degraded: 0, stalled: 0, offline: 0 };
  for (const s of statuses) counts[zoneVerdict(s).state]++;
  return counts;
}
