// The zone status record: counters per session beside the totals, and the
// last named failure kept apart from the last session end.
import { describe, expect, it } from "vitest";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import type { SessionEnd } from "../../src/mux/state.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { KIND_CATALOG_TYPE_URL } from "../../src/sync/kind-catalog.ts";
import { sideOf } from "../../src/observe/zone-status.ts";
import { ZoneStatusRecord } from "../../src/sync/status.ts";

const types = createTypeRegistry(exampleTypes);
const meshUrl = types.get("Mesh").typeUrl;
const dataplaneUrl = types.get("Dataplane").typeUrl;
const end = (
  code: SessionEnd["code"],
  message: string,
  graceful: boolean,
  initiator: SessionEnd["initiator"] = "peer",
): SessionEnd => ({ code, message, graceful, initiator });

/** One session of `record` in which the global sent `sent` Mesh responses (all ACKed) and accepted `accepted` Dataplane responses. */
function session(record: ZoneStatusRecord, sent: number, accepted: number): void {
  record.connected(() => 1);
  const server = record.serverObserver();
  const client = record.clientObserver();
  for (let i = 0; i < sent; i++) {
    server.sent?.(meshUrl, {
      version: `v${i}`,
      nonce: `n${i}`,
      resources: 2,
      removed: 0,
      bytes: 100,
    });
    server.acked?.(meshUrl, `v${i}`, `n${i}`);
  }
  for (let i = 0; i < accepted; i++)
    client.accepted?.(dataplaneUrl, { version: `d${i}`, resources: 1, removed: 0 });
}

describe("ZoneStatusRecord", () => {
  it("counts the current session beside the totals; a new session starts its counters at zero", () => {
    const record = new ZoneStatusRecord("zone-1", types.list());
    session(record, 3, 2);
    record.clientObserver().rejected?.(dataplaneUrl, "d9", "bad address");
    record.disconnected(end("transport", "connection lost", false));
    session(record, 1, 0);
    const status = record.snapshot();
    const mesh = status.types.find((t) => t.kind === "Mesh");
    const dp = status.types.find((t) => t.kind === "Dataplane");
    expect(mesh).toMatchObject({
      sent: 4,
      acked: 4,
      nacked: 0,
      resourcesSent: 8,
      session: { sent: 1, acked: 1, nacked: 0, resourcesSent: 2 },
    });
    expect(dp).toMatchObject({
      accepted: 2,
      rejected: 1,
      resourcesReceived: 2,
      session: { accepted: 0, rejected: 0, resourcesReceived: 0 },
    });
    // The snapshot is a copy: counting on does not change it.
    record
      .serverObserver()
      .sent?.(meshUrl, { version: "v9", nonce: "x", resources: 1, removed: 0, bytes: 50 });
    expect(mesh?.session.sent).toBe(1);
    expect(record.snapshot().types.find((t) => t.kind === "Mesh")?.session.sent).toBe(2);
  });

  it("keeps the last named failure when later sessions end cleanly or lose their connection", () => {
    const record = new ZoneStatusRecord("zone-1", types.list());
    record.connected(() => undefined);
    record
      .serverObserver()
      .nacked?.(
        KIND_CATALOG_TYPE_URL,
        "1-abc",
        'zone "zone-1" refuses the kinds of global "global": kind "Mesh" differs',
        "n1",
      );
    record.disconnected(
      end(
        "shutdown",
        'zone "zone-1" refuses the kinds of global "global": kind "Mesh" differs',
        true,
        "local",
      ),
    );
    record.connected(() => undefined);
    record.disconnected(
      end("transport", "the peer cancelled the stream or the connection was lost", false),
    );
    record.connected(() => undefined);
    record.disconnected(end("shutdown", 'zone "zone-1" is shutting down', true));
    const status = record.snapshot();
    expect(status.lastEnd).toEqual({ code: "shutdown", message: 'zone "zone-1" is shutting down' });
    expect(status.lastError).toMatchObject({
      code: "kinds_refused",
      message: 'zone "zone-1" refuses the kinds of global "global": kind "Mesh" differs',
    });
    expect(status.lastError?.at).toBeInstanceOf(Date);
  });

  it("replaces the last error with the next named failure, a failed session end or a failed sync", () => {
    const record = new ZoneStatusRecord("zone-1", types.list());
    expect(record.snapshot().lastError).toBeUndefined();
    record.connected(() => undefined);
    record.disconnected(end("heartbeat_timeout", "heard nothing for 30 s", false, "local"));
    expect(record.snapshot().lastError).toMatchObject({
      code: "heartbeat_timeout",
      message: "heard nothing for 30 s",
    });
    record.connected(() => undefined);
    record.failed("sync_failed", "sync with zone-1 failed: store down");
    record.disconnected(end("shutdown", "sync failed", true, "local"));
    expect(record.snapshot().lastError).toMatchObject({
      code: "sync_failed",
      message: "sync with zone-1 failed: store down",
    });
    // A NACK of an ordinary kind is that kind's error, not the zone's.
    record.connected(() => undefined);
    record.serverObserver().nacked?.(meshUrl, "v1", "bad mesh", "n1");
    expect(record.snapshot().lastError?.code).toBe("sync_failed");
    expect(record.snapshot().types.find((t) => t.kind === "Mesh")).toMatchObject({
      nacked: 1,
      lastNackError: "bad mesh",
      session: { nacked: 1 },
    });
  });

  it("counts what a replaced session still does after the newer one connected in the totals only, and its end leaves the zone online", () => {
    // A zone that redials while the global still applies its older session's response: the global replaces that
    // session (closing it gracefully), and the older session's apply, ACK and end come after the newer one connected.
    const record = new ZoneStatusRecord("zone-1", types.list());
    const older = record.connected(() => 1);
    const olderServer = record.serverObserver(older);
    const olderClient = record.clientObserver(older);
    olderServer.sent?.(meshUrl, {
      version: "v1",
      nonce: "n1",
      resources: 2,
      removed: 0,
      bytes: 100,
    });
    const newer = record.connected(() => 1);
    const newerServer = record.serverObserver(newer);
    const newerClient = record.clientObserver(newer);
    olderClient.accepted?.(dataplaneUrl, { version: "d1", resources: 1000, removed: 0 });
    olderServer.stalled?.(meshUrl, "n1", 30_000);
    olderServer.sent?.(meshUrl, {
      version: "v2",
      nonce: "n2",
      resources: 2,
      removed: 0,
      bytes: 100,
    });
    record.disconnected(end("replaced", "a newer session replaced this one", true, "local"), older);
    newerServer.sent?.(meshUrl, {
      version: "v2",
      nonce: "n3",
      resources: 2,
      removed: 0,
      bytes: 100,
    });
    newerServer.acked?.(meshUrl, "v2", "n3");
    newerClient.accepted?.(dataplaneUrl, { version: "d1", resources: 0, removed: 0 });
    const status = record.snapshot();
    expect(status.online).toBe(true);
    expect(status.lastEnd).toBeUndefined();
    expect(status.types.find((t) => t.kind === "Mesh")).toMatchObject({
      sent: 3,
      acked: 1,
      stalled: false,
      session: { sent: 1, acked: 1 },
    });
    expect(status.types.find((t) => t.kind === "Dataplane")).toMatchObject({
      accepted: 2,
      resourcesReceived: 1000,
      session: { accepted: 1, resourcesReceived: 0 },
    });
    // The newer session's own end does mark the zone offline.
    record.disconnected(end("transport", "connection lost", false), newer);
    expect(record.snapshot().online).toBe(false);
  });

  it("names each side's part in a kind", () => {
    expect(sideOf("global", "global-to-zone")).toBe("sender");
    expect(sideOf("global", "zone-to-global")).toBe("receiver");
    expect(sideOf("zone", "global-to-zone")).toBe("receiver");
    expect(sideOf("zone", "zone-to-global")).toBe("sender");
  });
});

describe("ZoneStatusRecord snapshot shape", () => {
  /** A record on a clock that steps 10 ms a read, with every event of one type on both sides. */
  function exercised(): ZoneStatusRecord {
    let t = 1_000;
    const record = new ZoneStatusRecord(
      "zone-1",
      types.list(),
      () => [{ kind: "Mesh", loaded: true, error: "slow", resources: 3 }],
      () => (t += 10),
    );
    record.connected(() => 7, { softwareVersion: "1.2.3", protocolVersion: 3, features: ["x"] });
    const server = record.serverObserver();
    const client = record.clientObserver();
    server.sent?.(meshUrl, { version: "v1", nonce: "n1", resources: 2, removed: 0, bytes: 9 });
    server.stalled?.(meshUrl, "n1", 5000);
    server.nacked?.(meshUrl, "v1", "bad", "n1");
    server.sent?.(meshUrl, { version: "v2", nonce: "n2", resources: 1, removed: 0, bytes: 9 });
    server.acked?.(meshUrl, "v2", "n2");
    server.resourceErrors?.(meshUrl, [{ key: "m1", reason: "no" }], 2);
    server.oversized?.(meshUrl, "big", 1, 0);
    client.accepted?.(meshUrl, { version: "a1", resources: 4, removed: 0 });
    client.rejected?.(meshUrl, "a2", "refused");
    client.resourceRejected?.(meshUrl, "r1", "invalid");
    return record;
  }

  it("keeps the fields of a type, their order and their values", () => {
    const mesh = exercised()
      .snapshot()
      .types.find((t) => t.kind === "Mesh");
    // The order is what JSON output and the admin page show: pinned with the values.
    expect(mesh === undefined ? [] : Object.keys(mesh)).toEqual([
      "kind",
      "typeUrl",
      "direction",
      "sent",
      "resourcesSent",
      "acked",
      "nacked",
      "accepted",
      "resourcesReceived",
      "rejected",
      "session",
      "lastAckedVersion",
      "lastNackError",
      "stalled",
      "oversized",
      "lastAcceptedVersion",
      "lastRejectError",
      "rejectedResources",
      "peerRejectedResources",
      "peerRejectedOmitted",
      "storeLoaded",
      "storeError",
      "times",
    ]);
    expect(mesh).toEqual({
      kind: "Mesh",
      typeUrl: meshUrl,
      direction: types.get("Mesh").direction,
      sent: 2,
      resourcesSent: 3,
      acked: 1,
      nacked: 1,
      accepted: 1,
      resourcesReceived: 4,
      rejected: 1,
      session: {
        sent: 2,
        resourcesSent: 3,
        acked: 1,
        nacked: 1,
        accepted: 1,
        resourcesReceived: 4,
        rejected: 1,
      },
      lastAckedVersion: "v2",
      lastNackError: "bad",
      stalled: false,
      oversized: ["big"],
      lastAcceptedVersion: "a1",
      lastRejectError: "refused",
      rejectedResources: [{ key: "r1", reason: "invalid" }],
      peerRejectedResources: [{ key: "m1", reason: "no" }],
      peerRejectedOmitted: 2,
      storeLoaded: true,
      storeError: "slow",
      times: {
        lastSentAt: 1080,
        lastReceivedAt: 1080,
        lastAckAt: 1060,
        lastNackAt: 1040,
        lastAcceptedAt: 1070,
        lastRejectedAt: 1080,
        stalledSince: undefined,
      },
    });
    expect(Object.keys(mesh?.session ?? {})).toEqual([
      "sent",
      "resourcesSent",
      "acked",
      "nacked",
      "accepted",
      "resourcesReceived",
      "rejected",
    ]);
    expect(Object.keys(mesh?.times ?? {})).toEqual([
      "lastSentAt",
      "lastReceivedAt",
      "lastAckAt",
      "lastNackAt",
      "lastAcceptedAt",
      "lastRejectedAt",
      "stalledSince",
    ]);
  });

  it("gives an untouched type zeros, empty lists and no times, and the zone's own fields in their order", () => {
    const status = new ZoneStatusRecord("zone-1", types.list(), undefined, () => 5).snapshot();
    expect(Object.keys(status)).toEqual([
      "zone",
      "online",
      "connectedAt",
      "disconnectedAt",
      "lastEnd",
      "lastError",
      "heartbeatRttMs",
      "types",
    ]);
    const kinds = types.list().filter((t) => t.direction !== "local");
    expect(status.types.map((t) => t.kind)).toEqual(kinds.map((t) => t.kind));
    const dp = status.types.find((t) => t.kind === "Dataplane");
    expect(dp).toEqual({
      kind: "Dataplane",
      typeUrl: dataplaneUrl,
      direction: types.get("Dataplane").direction,
      sent: 0,
      resourcesSent: 0,
      acked: 0,
      nacked: 0,
      accepted: 0,
      resourcesReceived: 0,
      rejected: 0,
      session: {
        sent: 0,
        resourcesSent: 0,
        acked: 0,
        nacked: 0,
        accepted: 0,
        resourcesReceived: 0,
        rejected: 0,
      },
      lastAckedVersion: undefined,
      lastNackError: undefined,
      stalled: false,
      oversized: [],
      lastAcceptedVersion: undefined,
      lastRejectError: undefined,
      rejectedResources: [],
      peerRejectedResources: [],
      peerRejectedOmitted: 0,
      storeLoaded: undefined,
      storeError: undefined,
      times: {
        lastSentAt: undefined,
        lastReceivedAt: undefined,
        lastAckAt: undefined,
        lastNackAt: undefined,
        lastAcceptedAt: undefined,
        lastRejectedAt: undefined,
        stalledSince: undefined,
      },
    });
  });

  it("keeps a stalled flag through a NACK, which clears only its time, and clears both on an ACK and at the end", () => {
    let t = 0;
    const record = new ZoneStatusRecord("zone-1", types.list(), undefined, () => (t += 1));
    record.connected(() => 1);
    const server = record.serverObserver();
    const mesh = () => record.snapshot().types.find((s) => s.kind === "Mesh");
    server.stalled?.(meshUrl, "n1", 1);
    expect(mesh()?.stalled).toBe(true);
    expect(mesh()?.times?.stalledSince).toBeDefined();
    server.nacked?.(meshUrl, "v1", "bad", "n1");
    expect(mesh()).toMatchObject({ stalled: true, times: { stalledSince: undefined } });
    server.stalled?.(meshUrl, "n2", 1);
    server.acked?.(meshUrl, "v2", "n2");
    expect(mesh()).toMatchObject({ stalled: false, times: { stalledSince: undefined } });
    server.stalled?.(meshUrl, "n3", 1);
    record.disconnected(end("transport", "lost", false));
    expect(mesh()).toMatchObject({ stalled: false, times: { stalledSince: undefined } });
    // A new session starts its nack and reject counters at zero too.
    record.connected(() => 1);
    expect(mesh()?.session).toMatchObject({ nacked: 0, rejected: 0 });
    expect(mesh()?.nacked).toBe(1);
  });
});
