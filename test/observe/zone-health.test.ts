// A zone's verdict (src/observe/zone-health.ts), derived from the status
// record as the sync engine fills it, on a clock the test steps: offline,
// then healthy, degraded for a NACK newer than the last ACK (and healthy
// again after an ACK), for rejected resources, for held deletions and for a
// failing store, stalled for the ACK watchdog; the last sent and received
// times per direction; and the count by state the kds_zones gauge shows.
import { describe, expect, it } from "vitest";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import {
  countByState,
  directionTimes,
  isZoneState,
  ZONE_STATES,
  zoneVerdict,
} from "../../src/observe/zone-health.ts";
import type { ZoneStatus } from "../../src/observe/zone-status.ts";
import { PrometheusMetrics } from "../../src/observe/prometheus.ts";
import { ZoneStatusRecord } from "../../src/sync/status.ts";
import { parseMetrics } from "./scrape.ts";

const types = createTypeRegistry(exampleTypes);
const meshUrl = types.get("Mesh").typeUrl;
const dataplaneUrl = types.get("Dataplane").typeUrl;
const T0 = Date.UTC(2026, 11, 6, 12, 0, 0);

/** A record on a wall clock the test moves with `at(ms)`. */
function record(): { record: ZoneStatusRecord; at(ms: number): void } {
  let now = T0;
  return {
    record: new ZoneStatusRecord(
      "zone-1",
      types.list(),
      () => [],
      () => now,
    ),
    at: (ms) => {
      now = T0 + ms;
    },
  };
}

const sent = (version: string) => ({
  version,
  nonce: version,
  resources: 1,
  removed: 0,
  bytes: 10,
});

describe("zoneVerdict", () => {
  it("is offline until the first session, healthy once up, degraded while a NACK is newer than the last ACK", () => {
    const { record: r, at } = record();
    expect(zoneVerdict(r.snapshot())).toEqual({
      state: "offline",
      reason: "never connected",
      since: undefined,
    });
    at(1_000);
    r.connected(() => 1);
    expect(zoneVerdict(r.snapshot())).toEqual({ state: "healthy", reason: "", since: T0 + 1_000 });

    const server = r.serverObserver();
    at(2_000);
    server.sent?.(meshUrl, sent("1"));
    at(2_100);
    server.acked?.(meshUrl, "1", "1");
    at(3_000);
    server.sent?.(meshUrl, sent("2"));
    at(3_200);
    server.nacked?.(meshUrl, "1", "mesh default: spec.mtls is not a boolean", "2");
    const degraded = zoneVerdict(r.snapshot());
    expect(degraded).toEqual({
      state: "degraded",
      reason: "Mesh: the peer NACKed it: mesh default: spec.mtls is not a boolean",
      since: T0 + 3_200,
    });

    // The fixed resource goes out and is ACKed: healthy again.
    at(9_000);
    server.sent?.(meshUrl, sent("3"));
    at(9_050);
    server.acked?.(meshUrl, "3", "3");
    expect(zoneVerdict(r.snapshot()).state).toBe("healthy");
  });

  it("orders a NACK and an ACK of the same millisecond by when they came", () => {
    const { record: r, at } = record();
    at(1_000);
    r.connected(() => 1);
    const server = r.serverObserver();
    server.acked?.(meshUrl, "1", "1");
    server.nacked?.(meshUrl, "1", "bad", "n");
    expect(zoneVerdict(r.snapshot()).state).toBe("degraded");
    server.acked?.(meshUrl, "2", "2");
    expect(zoneVerdict(r.snapshot()).state).toBe("healthy");
  });

  it("is degraded while the peer rejects resources, while this side rejected the peer's last response, and while a store read fails", () => {
    const { record: r, at } = record();
    at(1_000);
    r.connected(() => 1);
    const server = r.serverObserver();
    at(1_500);
    server.acked?.(meshUrl, "1", "1");
    server.resourceErrors?.(meshUrl, [{ key: "bad", reason: "no such mesh" }], 2);
    expect(zoneVerdict(r.snapshot())).toMatchObject({
      state: "degraded",
      reason: "Mesh: the peer rejects 3 resources (bad: no such mesh)",
    });
    server.resourceErrors?.(meshUrl, [], 0);
    expect(zoneVerdict(r.snapshot()).state).toBe("healthy");

    const client = r.clientObserver();
    at(2_000);
    client.rejected?.(dataplaneUrl, "7", "address is empty");
    expect(zoneVerdict(r.snapshot())).toMatchObject({
      state: "degraded",
      reason: "Dataplane: this side rejected the peer's response: address is empty",
      since: T0 + 2_000,
    });
    at(3_000);
    client.accepted?.(dataplaneUrl, { version: "8", resources: 1, removed: 0 });
    expect(zoneVerdict(r.snapshot()).state).toBe("healthy");

    const status = r.snapshot();
    const failing: ZoneStatus = {
      ...status,
      types: status.types.map((t) =>
        t.kind === "Mesh" ? { ...t, storeError: "connection refused" } : t,
      ),
    };
    expect(zoneVerdict(failing)).toMatchObject({
      state: "degraded",
      reason: "Mesh: stale, this side's store reads fail: connection refused",
    });
  });

  it("is degraded while deletions are held, with each kind in the reason", () => {
    const { record: r, at } = record();
    at(1_000);
    r.connected(() => 1);
    const held: ZoneStatus = {
      ...r.snapshot(),
      heldReset: {
        since: new Date(T0 + 5_000),
        releaseAt: undefined,
        kinds: [{ kind: "Dataplane", held: 40, of: 50 }],
      },
    };
    expect(zoneVerdict(held)).toEqual({
      state: "degraded",
      reason:
        "deletions held by the reset guard: Dataplane 40 of 50 (kds-mux zone accept-reset applies them)",
      since: T0 + 5_000,
    });
  });

  it("is stalled while the watchdog says a response waits past the ACK timeout, over degraded; offline over both", () => {
    const { record: r, at } = record();
    at(1_000);
    r.connected(() => 1);
    const server = r.serverObserver();
    server.nacked?.(meshUrl, "1", "bad", "n");
    at(4_000);
    server.stalled?.(meshUrl, "n", 60_000);
    at(5_000);
    server.stalled?.(meshUrl, "n", 61_000); // a second report keeps the first time
    expect(zoneVerdict(r.snapshot())).toEqual({
      state: "stalled",
      reason: "Mesh: a response waits for its ACK past the ACK timeout",
      since: T0 + 4_000,
    });
    at(6_000);
    server.acked?.(meshUrl, "2", "2");
    expect(zoneVerdict(r.snapshot()).state).toBe("healthy");

    server.stalled?.(meshUrl, "n", 60_000);
    at(7_000);
    r.disconnected({
      code: "heartbeat_timeout",
      message: "no heartbeat",
      graceful: false,
      initiator: "local",
    });
    expect(zoneVerdict(r.snapshot())).toEqual({
      state: "offline",
      reason: "last session ended: heartbeat_timeout: no heartbeat",
      since: T0 + 7_000,
    });
  });

  it("keeps the last sent and received time per direction", () => {
    const { record: r, at } = record();
    at(1_000);
    r.connected(() => 1);
    expect(directionTimes(r.snapshot())).toEqual(
      expect.arrayContaining([
        { direction: "global-to-zone", lastSentAt: undefined, lastReceivedAt: undefined },
      ]),
    );
    at(2_000);
    r.serverObserver().sent?.(meshUrl, sent("1"));
    at(2_500);
    r.serverObserver().acked?.(meshUrl, "1", "1");
    at(3_000);
    r.clientObserver().accepted?.(dataplaneUrl, { version: "1", resources: 1, removed: 0 });
    const times = directionTimes(r.snapshot());
    expect(times.find((d) => d.direction === "global-to-zone")).toEqual({
      direction: "global-to-zone",
      lastSentAt: T0 + 2_000,
      lastReceivedAt: T0 + 2_500,
    });
    // Received a response and ACKed it at once.
    expect(times.find((d) => d.direction === "zone-to-global")).toEqual({
      direction: "zone-to-global",
      lastSentAt: T0 + 3_000,
      lastReceivedAt: T0 + 3_000,
    });
  });

  it("counts zones by state, every state present, and the kds_zones gauge shows the counts", async () => {
    const zones: ZoneStatus[] = [];
    for (const [i, problem] of ["none", "nack", "offline", "none"].entries()) {
      const { record: r, at } = record();
      at(1_000 + i);
      if (problem !== "offline") r.connected(() => 1);
      if (problem === "nack") r.serverObserver().nacked?.(meshUrl, "1", "bad", "n");
      zones.push({ ...r.snapshot(), zone: `zone-${i}` });
    }
    expect(countByState(zones)).toEqual({ healthy: 2, degraded: 1, stalled: 0, offline: 1 });

    const metrics = new PrometheusMetrics({
      zones: async () => zones,
      readiness: () => ({ ready: false, reasons: ["draining"] }),
    });
    const scrape = await parseMetrics(await metrics.text());
    for (const [state, n] of Object.entries({ healthy: 2, degraded: 1, stalled: 0, offline: 1 }))
      expect(scrape.value("kds_zones", { state })).toBe(n);
    expect(scrape.samples("kds_zones")).toHaveLength(4);
    expect(scrape.value("kds_ready")).toBe(0);
    // Without sources neither gauge has a sample (an unlabelled gauge would otherwise read 0, "not ready").
    const bare = await parseMetrics(await new PrometheusMetrics().text());
    expect(bare.samples("kds_ready")).toEqual([]);
    expect(bare.samples("kds_zones")).toEqual([]);
  });

  it("names its states, and tells a state from anything else", () => {
    expect(ZONE_STATES).toEqual(["healthy", "degraded", "stalled", "offline"]);
    expect(isZoneState("degraded")).toBe(true);
    expect(isZoneState("broken")).toBe(false);
  });
});
