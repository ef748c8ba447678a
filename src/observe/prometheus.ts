/**
 * {@link Metrics} backed by prom-client, exposed in the Prometheus text
 * format. prom-client uses Node built-ins (`util`, `cluster`) through
 * `require`, which Node, Deno and Bun all provide; it does not run in a
 * browser, so the root entry point does not re-export this module.
 *
 * Every instance has its own registry, so several control planes in one
 * process do not share or clash over series. Labels are kinds, lanes and
 * outcomes, never zone names, so the number of series does not grow with the
 * number of zones (per-zone figures are on the status page and in
 * `inspect zones`).
 *
 * @module
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { FrameTally } from "./frame-tally.ts";
import type {
  AdmissionResult,
  ConnectionEvent,
  DiscoveryEvent,
  ListenerName,
  MetricLane,
  Metrics,
  PeerVersion,
} from "../metrics.ts";
import type { Readiness } from "./probes.ts";
import { countByState, ZONE_STATES } from "./zone-health.ts";
import type { ZoneStatus } from "./zone-status.ts";

/** The names of every series {@link PrometheusMetrics} exposes (for docs and tests). */
export const METRIC_NAMES = Object.freeze([
  "kds_sessions_open",
  "kds_sessions_closed_total",
  "kds_sessions_open_by_version",
  "kds_sessions_open_by_feature",
  "kds_admissions_total",
  "kds_connections_open",
  "kds_connections_refused_total",
  "kds_connections_idle_closed_total",
  "kds_connections_evicted_total",
  "kds_connections_unauthenticated_closed_total",
  "kds_requests_timed_out_total",
  "kds_mux_frames_total",
  "kds_mux_frame_bytes_total",
  "kds_mux_credit_wait_seconds_total",
  "kds_discovery_responses_sent_total",
  "kds_discovery_acks_total",
  "kds_discovery_nacks_total",
  "kds_discovery_partial_acks_total",
  "kds_discovery_responses_received_total",
  "kds_sync_lag_seconds",
  "kds_store_operation_seconds",
  "kds_stale_resources",
  "kds_held_deletions",
  "kds_zones",
  "kds_ready",
  "kds_rebalance_moves_total",
  "kds_zone_token_earliest_expiry_seconds",
] as const);

/** Options of {@link PrometheusMetrics}. */
export interface PrometheusMetricsOptions {
  /** Added to every series (for example `{ role: "global" }`). */
  readonly labels?: Record<string, string>;
  /**
   * The zones `kds_zones` counts by state, read at each scrape (on a global
   * with several instances: those whose session this instance holds, and
   * the offline ones). Without it `kds_zones` has no samples.
   */
  readonly zones?: () => Promise<readonly ZoneStatus[]>;
  /** Whether this instance is ready, for `kds_ready`, read at each scrape. Without it `kds_ready` has no sample. */
  readonly readiness?: () => Readiness;
}

/** Buckets of the sync lag histogram, in seconds (1 ms to 1 min). */
const LAG_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];
/** Buckets of the store latency histogram, in seconds (50 µs to 5 s). */
const STORE_BUCKETS = [
  0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5,
];

/**
 * A peer's software version as a label value: the peer chooses it, so only a
 * plain version string ("kds-mux/0.1.0") becomes a label, anything else
 * "other", and none "unknown"; a peer cannot grow the series with free text.
 */
function softwareLabel(software: string): string {
  if (software === "") return "unknown";
  return /^[A-Za-z0-9._+/-]{1,64}$/.test(software) ? software : "other";
}

/** Prometheus-backed metrics of one control plane. */
export class PrometheusMetrics implements Metrics {
  /** The registry holding this instance's series. */
  readonly registry: Registry = new Registry();
  readonly #sessionsOpen: Gauge<string>;
  readonly #sessionsClosed: Counter<"code">;
  readonly #byVersion: Gauge<"protocol_version" | "software_version">;
  readonly #byFeature: Gauge<"feature">;
  readonly #admissions: Counter<"result">;
  readonly #connectionsOpen: Gauge<"listener">;
  readonly #connectionsRefused: Counter<"listener">;
  readonly #connectionsIdleClosed: Counter<"listener">;
  readonly #connectionsEvicted: Counter<"listener">;
  readonly #connectionsUnauthenticated: Counter<"listener">;
  readonly #requestsTimedOut: Counter<"listener">;
  readonly #frames: Counter<"direction" | "lane">;
  readonly #bytes: Counter<"direction" | "lane">;
  /** Frames and bytes counted since the last collection (see frame-tally.ts). */
  readonly #frameTally = new FrameTally();
  readonly #creditWait: Counter<"lane">;
  readonly #responsesSent: Counter<"kind">;
  readonly #acks: Counter<"kind">;
  readonly #nacks: Counter<"kind">;
  readonly #partialAcks: Counter<"kind">;
  readonly #received: Counter<"kind" | "result">;
  readonly #lag: Histogram<"kind">;
  readonly #store: Histogram<"op" | "outcome">;
  readonly #stale: ZoneSums;
  readonly #held: ZoneSums;
  readonly #moves: Counter<"outcome">;
  readonly #earliestExpiry: Gauge<string>;

  /** @param options - labels of every series, and where the zones' states and readiness come from */
  constructor(options: PrometheusMetricsOptions = {}) {
    if (options.labels !== undefined) this.registry.setDefaultLabels(options.labels);
    const registers = [this.registry];
    this.#sessionsOpen = new Gauge({
      name: "kds_sessions_open",
      help: "Mux sessions whose handshake finished and that have not ended.",
      registers,
    });
    this.#sessionsClosed = new Counter({
      name: "kds_sessions_closed_total",
      help: "Mux sessions that ended after their handshake, by end code.",
      labelNames: ["code"],
      registers,
    });
    this.#byVersion = new Gauge({
      name: "kds_sessions_open_by_version",
      help: 'Open mux sessions by the protocol version they run and the peer\'s software version ("unknown" from a version 2 peer, "other" when it is not a plain version string).',
      labelNames: ["protocol_version", "software_version"],
      registers,
    });
    this.#byFeature = new Gauge({
      name: "kds_sessions_open_by_feature",
      help: "Open mux sessions by feature they use (batching, calls).",
      labelNames: ["feature"],
      registers,
    });
    this.#admissions = new Counter({
      name: "kds_admissions_total",
      help: "Zone streams the global admitted or refused, by result.",
      labelNames: ["result"],
      registers,
    });
    this.#connectionsOpen = new Gauge({
      name: "kds_connections_open",
      help: "Open connections per listener (zones: the one zones dial; admin: the admin API's).",
      labelNames: ["listener"],
      registers,
    });
    this.#connectionsRefused = new Counter({
      name: "kds_connections_refused_total",
      help: "Connections closed at once because the listener already held its maximum of connections.",
      labelNames: ["listener"],
      registers,
    });
    this.#connectionsIdleClosed = new Counter({
      name: "kds_connections_idle_closed_total",
      help: "Connections closed because they carried no request or stream for the listener's idle timeout.",
      labelNames: ["listener"],
      registers,
    });
    this.#connectionsEvicted = new Counter({
      name: "kds_connections_evicted_total",
      help: "Connections closed to make room: the oldest unauthenticated one when the listener held its maximum, or an identity's oldest beyond its share of connections.",
      labelNames: ["listener"],
      registers,
    });
    this.#connectionsUnauthenticated = new Counter({
      name: "kds_connections_unauthenticated_closed_total",
      help: "Connections closed because they presented no valid credentials within the listener's authentication timeout, whatever their streams were doing.",
      labelNames: ["listener"],
      registers,
    });
    this.#requestsTimedOut = new Counter({
      name: "kds_requests_timed_out_total",
      help: "Requests cut because their body did not arrive within the listener's request timeout (plus 1 s per 64 KiB received).",
      labelNames: ["listener"],
      registers,
    });
    const tally = this.#frameTally;
    this.#frames = new Counter({
      name: "kds_mux_frames_total",
      help: "Mux frames by direction (sent, received) and lane (requests, responses, control); frames inside a batch count one by one.",
      labelNames: ["direction", "lane"],
      registers,
      collect: () => tally.take("frames", (labels, n) => this.#frames.inc(labels, n)),
    });
    this.#bytes = new Counter({
      name: "kds_mux_frame_bytes_total",
      help: "Bytes of mux frames by direction and lane, as the mux accounts them: an upper bound of the encoded size computed without encoding (exact for payloads, up to 3 bytes per character of strings).",
      labelNames: ["direction", "lane"],
      registers,
      collect: () => tally.take("bytes", (labels, n) => this.#bytes.inc(labels, n)),
    });
    this.#creditWait = new Counter({
      name: "kds_mux_credit_wait_seconds_total",
      help: "Time sends on a lane waited because the peer had granted no credit (window), summed per lane.",
      labelNames: ["lane"],
      registers,
    });
    this.#responsesSent = new Counter({
      name: "kds_discovery_responses_sent_total",
      help: "Discovery responses this side sent, by kind.",
      labelNames: ["kind"],
      registers,
    });
    this.#acks = new Counter({
      name: "kds_discovery_acks_total",
      help: "ACKs the peer sent for this side's responses, by kind.",
      labelNames: ["kind"],
      registers,
    });
    this.#nacks = new Counter({
      name: "kds_discovery_nacks_total",
      help: "NACKs the peer sent for this side's responses, by kind.",
      labelNames: ["kind"],
      registers,
    });
    this.#partialAcks = new Counter({
      name: "kds_discovery_partial_acks_total",
      help: "ACKs in which the peer reported resources of this side's it rejects (per-resource errors; inspect zones names them), by kind.",
      labelNames: ["kind"],
      registers,
    });
    this.#received = new Counter({
      name: "kds_discovery_responses_received_total",
      help: "Discovery responses from the peer, by kind and result (accepted and ACKed, or rejected and NACKed).",
      labelNames: ["kind", "result"],
      registers,
    });
    this.#lag = new Histogram({
      name: "kds_sync_lag_seconds",
      help: "From a store change reaching this side's change feed to the peer's ACK of the response that carried it, by kind.",
      labelNames: ["kind"],
      buckets: LAG_BUCKETS,
      registers,
    });
    this.#store = new Histogram({
      name: "kds_store_operation_seconds",
      help: "Duration of store calls, by operation (get, list, put, delete, ...) and outcome (ok, error).",
      labelNames: ["op", "outcome"],
      buckets: STORE_BUCKETS,
      registers,
    });
    this.#stale = new ZoneSums(
      new Gauge({
        name: "kds_stale_resources",
        help: "Zone resources marked stale on the global (their zone offline past zoneStaleAfterMs), by kind, summed over zones.",
        labelNames: ["kind"],
        registers,
      }),
    );
    this.#held = new ZoneSums(
      new Gauge({
        name: "kds_held_deletions",
        help: "Deletions held by the reset guard (a peer's first exchange after connecting would delete most of a kind), by kind, summed over zones; non-zero needs an operator (kds-mux zone accept-reset).",
        labelNames: ["kind"],
        registers,
      }),
    );
    const { zones, readiness } = options;
    new Gauge({
      name: "kds_zones",
      help: "Zones by state (healthy, degraded, stalled, offline; inspect zones and the status page give each zone's reason). On a global with several instances each counts the zones whose session it holds, and every instance counts the offline ones.",
      labelNames: ["state"],
      registers,
      async collect() {
        if (zones === undefined) return;
        const counts = countByState(await zones());
        for (const state of ZONE_STATES) this.set({ state }, counts[state]);
      },
    });
    new Gauge({
      name: "kds_ready",
      help: "1 while this instance is ready (/readyz answers 200), 0 while it is not (starting, draining, store unreachable).",
      registers,
      collect() {
        // Without a source, no sample (prom-client starts an unlabelled gauge at 0, which would read "not ready").
        if (readiness === undefined) this.remove();
        else this.set(readiness().ready ? 1 : 0);
      },
    });
    this.#moves = new Counter({
      name: "kds_rebalance_moves_total",
      help: "Zones rebalancing asked to move to another global instance (outcome asked), and those that came back to the instance that asked (outcome unlanded: held off, not asked again for a while).",
      labelNames: ["outcome"],
      registers,
    });
    this.#earliestExpiry = new Gauge({
      name: "kds_zone_token_earliest_expiry_seconds",
      help: "The earliest expiry (unix seconds) of the credentials (zone tokens, client certificates) of the zone sessions this global holds; no sample when none expires. A session ends when its credential expires (goaway TOKEN_EXPIRED).",
      registers,
    });
    this.#earliestExpiry.remove(); // no sample until a zone with an expiring credential is online
  }

  /** The content type of {@link PrometheusMetrics.text}. */
  get contentType(): string {
    return this.registry.contentType;
  }

  /** Every series in the Prometheus text exposition format. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  sessionOpened(_peer: string, version?: PeerVersion): void {
    this.#sessionsOpen.inc();
    if (version !== undefined) this.#countVersion(version, 1);
  }

  sessionClosed(_peer: string, code: string, version?: PeerVersion): void {
    this.#sessionsOpen.dec();
    this.#sessionsClosed.inc({ code });
    if (version !== undefined) this.#countVersion(version, -1);
  }

  /** Moves the per-version and per-feature gauges of open sessions by `by`. */
  #countVersion(version: PeerVersion, by: number): void {
    this.#byVersion.inc(
      {
        protocol_version: String(version.protocolVersion),
        software_version: softwareLabel(version.softwareVersion),
      },
      by,
    );
    for (const feature of version.features) this.#byFeature.inc({ feature }, by);
  }

  admission(result: AdmissionResult): void {
    this.#admissions.inc({ result });
  }

  connection(listener: ListenerName, event: ConnectionEvent): void {
    switch (event) {
      case "opened":
        this.#connectionsOpen.inc({ listener });
        return;
      case "closed":
        this.#connectionsOpen.dec({ listener });
        return;
      case "refused":
        this.#connectionsRefused.inc({ listener });
        return;
      case "idle_timeout":
        this.#connectionsIdleClosed.inc({ listener });
        return;
      case "evicted":
        this.#connectionsEvicted.inc({ listener });
        return;
      case "unauthenticated_timeout":
        this.#connectionsUnauthenticated.inc({ listener });
        return;
      case "request_timeout":
        this.#requestsTimedOut.inc({ listener });
        return;
    }
  }

  frames(direction: "sent" | "received", lane: MetricLane, frames: number, bytes: number): void {
    this.#frameTally.add(direction, lane, frames, bytes);
  }

  creditWait(lane: "requests" | "responses", ms: number): void {
    this.#creditWait.inc({ lane }, ms / 1000);
  }

  discovery(event: DiscoveryEvent, _peer: string, kind: string): void {
    switch (event) {
      case "response":
        this.#responsesSent.inc({ kind });
        return;
      case "ack":
        this.#acks.inc({ kind });
        return;
      case "nack":
        this.#nacks.inc({ kind });
        return;
      case "partial_ack":
        this.#partialAcks.inc({ kind });
        return;
      case "accepted":
      case "rejected":
        this.#received.inc({ kind, result: event });
        return;
    }
  }

  syncLag(_peer: string, kind: string, ms: number): void {
    this.#lag.observe({ kind }, ms / 1000);
  }

  storeOperation(op: string, ms: number, ok: boolean): void {
    this.#store.observe({ op, outcome: ok ? "ok" : "error" }, ms / 1000);
  }

  staleResources(zone: string, kind: string, count: number): void {
    this.#stale.set(zone, kind, count);
  }

  heldDeletions(zone: string, kind: string, count: number): void {
    this.#held.set(zone, kind, count);
  }

  rebalanceMove(outcome: "asked" | "unlanded"): void {
    this.#moves.inc({ outcome });
  }

  zoneTokenEarliestExpiry(seconds: number | undefined): void {
    // No sample at all when no online zone's credential expires: a 0 would read as long expired.
    if (seconds === undefined) this.#earliestExpiry.remove();
    else this.#earliestExpiry.set(seconds);
  }
}

/**
 * A gauge per kind fed per zone and kind: it shows the sum over zones (zone
 * names are no labels here; per-zone figures are in `inspect zones` and on
 * the status page).
 */
class ZoneSums {
  readonly #gauge: Gauge<"kind">;
  readonly #counts = new Map<string, Map<string, number>>();

  constructor(gauge: Gauge<"kind">) {
    this.#gauge = gauge;
  }

  set(zone: string, kind: string, count: number): void {
    let byZone = this.#counts.get(kind);
    if (byZone === undefined) {
      byZone = new Map();
      this.#counts.set(kind, byZone);
    }
    if (count > 0) byZone.set(zone, count);
    else byZone.delete(zone);
    let sum = 0;
    for (const n of byZone.values()) sum += n;
    this.#gauge.set({ kind }, sum);
  }
}
