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
