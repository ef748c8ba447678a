// The zone side of the churn scenario (bench/churn.ts), used by the zone
// processes (bench/fanout-zones.ts with `churn`): the change-to-ACK lag each
// zone reports, the changes driven at a rate over the process's zones, and
// what the zones hold and have had ACKed, for the settle wait and the final
// comparison with the global's store.
//
// The lag is the zones' own sync-lag metric (Metrics.syncLag, measured by
// src/sync/sync-observers.ts on the zone's discovery server, which serves
// the zone-to-global kinds): from the zone's store reporting a change on
// its change feed (an InMemoryStore wakes its watchers inside the write, so
// this is the write plus a few microtasks) until the global's ACK of the
// response that carried it on the zone's session. A key written again
// before its first write was sent keeps the earlier start (one lag for
// both, the longer).
import { create } from "@bufbuild/protobuf";
import { DataplaneSpecSchema } from "../examples/example-kinds/index.ts";
import { LABELS } from "../src/kinds/resource-types.ts";
import { noopMetrics, type Metrics } from "../src/metrics.ts";
import type { ZoneControlPlane } from "../src/zone/zone-control-plane.ts";

/** The kind the scenario changes (zone-to-global in the example kinds). */
export const CHURN_KIND = "Dataplane";

/** The name of a zone's resource `d` (as fanout-zones.ts seeds them). */
export const churnName = (d: number): string => `dp-${d}`;

/** A zone's change-to-ACK lags of {@link CHURN_KIND}, recorded while `recording` is on. */
export interface LagRecorder {
  /** Give each zone this (ZoneControlPlaneOptions.metrics). */
  readonly metrics: Metrics;
  /** Whether lags are kept (off while seeding: the initial sync has no clocks anyway). */
  recording: boolean;
  /** Takes the lags kept so far (ms) and forgets them. */
  take(): number[];
}

/** One recorder for all zones of a process (lags from every zone go to one list). */
export function lagRecorder(): LagRecorder {
  let lags: number[] = [];
  const recorder: LagRecorder = {
    metrics: {
      ...noopMetrics,
      syncLag: (_peer, kind, ms) => {
        if (recorder.recording && kind === CHURN_KIND) lags.push(ms);
      },
    },
    recording: false,
    take: () => {
      const taken = lags;
      lags = [];
      return taken;
    },
  };
  return recorder;
}

/** What one process's share of the changes did. */
export interface DriveResult {
  /** Changes written. */
  readonly writes: number;
  /** When the schedule started and the last write completed (performance.timeOrigin + performance.now()). */
  readonly startedAt: number;
  readonly endedAt: number;
  /** How far behind its due time the latest-issued write went out, ms (0 when the schedule was kept). */
  readonly behindMaxMs: number;
}

/** Most writes of a process in flight at once: beyond it the driver waits (and falls behind, which `behindMaxMs` shows). */
const MAX_IN_FLIGHT = 1_000;

/**
 * Writes `rate × seconds` changes, change k due at start + k / rate (an
 * absolute schedule: a slow write makes the later ones late, it does not
 * lower the rate), each to a random one of `zones`' own `resources`
 * resources, a new address each time.
 */
export async function driveChanges(
  zones: readonly ZoneControlPlane[],
  options: { rate: number; seconds: number; resources: number },
  signal: AbortSignal,
): Promise<DriveResult> {
  const now = (): number => performance.timeOrigin + performance.now();
  const total = Math.round(options.rate * options.seconds);
  const startedAt = now();
  let issued = 0;
  let done = 0;
  let behindMaxMs = 0;
  let failure: unknown;
  let inFlight = 0;
  let freed: (() => void) | undefined;
  const write = (k: number): void => {
    const zone = zones[k % zones.length] as ZoneControlPlane;
    const d = Math.floor(Math.random() * options.resources);
    inFlight++;
    zone.store
      .put({
        kind: CHURN_KIND,
        mesh: "default",
        name: churnName(d),
        spec: create(DataplaneSpecSchema, { address: `churn-${k}` }),
      })
      .then(
        () => void done++,
        (error: unknown) => {
          failure ??= error;
        },
      )
      .finally(() => {
        inFlight--;
        freed?.();
      });
  };
  while (issued < total) {
    if (failure !== undefined) throw failure;
    if (signal.aborted) throw signal.reason;
    const due = Math.min(total, Math.floor(((now() - startedAt) / 1000) * options.rate) + 1);
    for (; issued < due; issued++) {
      if (inFlight >= MAX_IN_FLIGHT) await new Promise<void>((r) => (freed = r));
      behindMaxMs = Math.max(behindMaxMs, now() - (startedAt + (issued / options.rate) * 1000));
      write(issued);
    }
    if (issued < total) {
      const next = startedAt + (issued / options.rate) * 1000;
      await new Promise((r) => setTimeout(r, Math.max(0, next - now())));
    }
  }
  while (inFlight > 0) await new Promise<void>((r) => (freed = r));
  if (failure !== undefined) throw failure;
  return { writes: done, startedAt, endedAt: now(), behindMaxMs };
}

/**
 * The zones' {@link CHURN_KIND} responses: sent over all sessions, not yet
 * answered on the current ones (neither ACKed nor NACKed), and how many
 * zones have not yet sent `resources` resources in all (a zone that
 * reconnected sends only what the global lacks, so the totals, not the
 * session's, tell that each zone's resources went out once).
 */
export function ackState(
  zones: readonly ZoneControlPlane[],
  resources: number,
): { sent: number; unacked: number; short: number } {
  let sent = 0;
  let unacked = 0;
  let short = 0;
  for (const zone of zones) {
    const t = zone.status().types.find((x) => x.kind === CHURN_KIND);
    if (t === undefined || t.resourcesSent < resources) short++;
    if (t === undefined) continue;
    sent += t.sent;
    unacked += t.session.sent - t.session.acked - t.session.nacked;
  }
  return { sent, unacked, short };
}

/** A zone's own {@link CHURN_KIND} resources: [name, address, version] each. */
export async function zoneEntries(zone: ZoneControlPlane): Promise<[string, string, string][]> {
  const { resources } = await zone.store.list(CHURN_KIND);
  return resources
    .filter((r) => r.meta.labels[LABELS.origin] === undefined)
    .map((r) => [r.meta.name, (r.spec as unknown as { address: string }).address, r.meta.version]);
}
