// `inspect zones` as a table: counters in the words of each side's part, the
// current session beside all sessions, and each zone's last error under it.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { formatZones, zoneDocument } from "../../src/cli/format.ts";
import { ZoneInsightSchema, type ZoneInsight } from "../../src/gen/kds/admin/v1/admin_pb.ts";

const now = Date.parse("2030-01-01T00:10:00Z");
const ago = (s: number) => timestampFromDate(new Date(now - s * 1000));

/** zone-2 as the global sees it: offline after a refusal, then a lost connection. */
const zones = (): ZoneInsight[] => [
  create(ZoneInsightSchema, {
    zone: "zone-2",
    online: false,
    state: "offline",
    stateReason:
      "last session ended: transport: the peer cancelled the stream or the connection was lost",
    stateSince: ago(60),
    connectedAt: ago(70),
    disconnectedAt: ago(60),
    lastEndCode: "transport",
    lastEndMessage: "the peer cancelled the stream or the connection was lost",
    lastErrorCode: "kinds_refused",
    lastErrorMessage: 'zone "zone-2" refuses the kinds of global "global": kind "Gateway" differs',
    lastErrorAt: ago(125),
    heartbeatRttMs: -1,
    softwareVersion: "kds-mux/0.0.9",
    protocolVersion: 2,
    features: ["calls"],
    types: [
      {
        kind: "Mesh",
        direction: "global-to-zone",
        side: "sender",
        sent: 7n,
        acked: 6n,
        nacked: 1n,
        lastNackError: "bad mesh",
        session: { sent: 2n, acked: 2n },
      },
      {
        kind: "Dataplane",
        direction: "zone-to-global",
        side: "receiver",
        accepted: 5n,
        rejected: 1n,
        resourcesReceived: 9n,
        session: { accepted: 1n, resourcesReceived: 3n },
      },
    ],
  }),
];

describe("formatZones", () => {
  it("shows sender and receiver counters under their own words, this session beside all sessions, and the last error apart from the last end", () => {
    const lines = formatZones(zones(), "table", now).split("\n");
    expect(lines[0]).toMatch(
      /^ZONE +STATUS +STATE +SINCE +RTT +PEER VERSION +PROTOCOL +TYPE +DIRECTION +THIS SESSION +ALL SESSIONS +LAST ERROR$/,
    );
    expect(lines[1]).toMatch(
      /^zone-2 +offline +offline +60s ago +- +kds-mux\/0\.0\.9 +2 \(calls\) +Mesh +global-to-zone +sent 2, acked 2, nacked 0 +sent 7, acked 6, nacked 1 +bad mesh$/,
    );
    expect(lines[2]).toMatch(
      /^ +Dataplane +zone-to-global +received 1, accepted 1, rejected 0 +received 6, accepted 5, rejected 1 +-$/,
    );
    expect(lines.slice(3)).toEqual([
      "",
      'zone-2: last error (kinds_refused, 2m ago): zone "zone-2" refuses the kinds of global "global": kind "Gateway" differs',
      "zone-2: last session ended (transport, 60s ago): the peer cancelled the stream or the connection was lost",
    ]);
  });

  it("shows '-' for the version and protocol of a zone that never connected, and the version fields in the JSON document", () => {
    const never = create(ZoneInsightSchema, { zone: "zone-9", heartbeatRttMs: -1 });
    expect(formatZones([never], "table", now).split("\n")[1]).toMatch(
      /^zone-9 +offline +- +never +- +- +- +- +- +- +- +-$/,
    );
    expect(zoneDocument(never)).toMatchObject({
      softwareVersion: null,
      protocolVersion: null,
      features: [],
    });
    expect(zoneDocument(zones()[0] as ZoneInsight)).toMatchObject({
      softwareVersion: "kds-mux/0.0.9",
      protocolVersion: 2,
      features: ["calls"],
    });
  });

  it("shows each zone's state, a note with the reason of a degraded or stalled one, and the state in the JSON document", () => {
    const degraded = zones()[0] as ZoneInsight;
    degraded.online = true;
    degraded.state = "degraded";
    degraded.stateReason = "Mesh: the peer NACKed it: bad mesh";
    degraded.stateSince = ago(30);
    degraded.directions = [
      {
        $typeName: "kds.admin.v1.DirectionTimes",
        direction: "global-to-zone",
        lastSentAt: ago(31),
        lastReceivedAt: ago(30),
      },
    ];
    const text = formatZones([degraded], "table", now);
    expect(text.split("\n")[1]).toMatch(/^zone-2 +online +degraded +/);
    expect(text).toContain("zone-2: DEGRADED for 30s: Mesh: the peer NACKed it: bad mesh");
    expect(zoneDocument(degraded)).toMatchObject({
      state: "degraded",
      stateReason: "Mesh: the peer NACKed it: bad mesh",
      stateSince: "2030-01-01T00:09:30.000Z",
      directions: [
        {
          direction: "global-to-zone",
          lastSentAt: "2030-01-01T00:09:29.000Z",
          lastReceivedAt: "2030-01-01T00:09:30.000Z",
        },
      ],
    });
  });

  it("prints no notes for a zone with no error that is online", () => {
    const fine = zones()[0] as ZoneInsight;
    fine.online = true;
    fine.lastErrorCode = "";
    fine.lastErrorMessage = "";
    fine.lastErrorAt = undefined;
    expect(formatZones([fine], "table", now)).not.toContain("last");
  });

  it("puts side, received, the session's counters and the last error in the JSON document", () => {
    const doc = zoneDocument(zones()[0] as ZoneInsight) as {
      lastError: unknown;
      lastEnd: unknown;
      types: Record<string, unknown>[];
    };
    expect(doc.lastError).toEqual({
      code: "kinds_refused",
      message: 'zone "zone-2" refuses the kinds of global "global": kind "Gateway" differs',
      at: "2030-01-01T00:07:55.000Z",
    });
    expect(doc.lastEnd).toEqual({
      code: "transport",
      message: "the peer cancelled the stream or the connection was lost",
    });
    expect(doc.types[1]).toMatchObject({
      kind: "Dataplane",
      side: "receiver",
      received: 6,
      accepted: 5,
      rejected: 1,
      session: { received: 1, accepted: 1, rejected: 0, resourcesReceived: 3, sent: 0 },
    });
    expect(doc.types[0]).toMatchObject({
      side: "sender",
      sent: 7,
      session: { sent: 2, acked: 2, nacked: 0 },
    });
  });
});

describe("inspect zones: zones per global instance", () => {
  it("counts the online zones each instance holds, under the table; none when no zone names an instance", () => {
    const zone = (name: string, instance: string, online = true): ZoneInsight =>
      create(ZoneInsightSchema, {
        zone: name,
        online,
        instance,
        heartbeatRttMs: -1,
        connectedAt: ago(5),
      });
    const text = formatZones(
      [
        zone("a", "global-2"),
        zone("b", "global-1"),
        zone("c", "global-2"),
        zone("d", "global-1", false),
        zone("e", "global-3"),
      ],
      "table",
      now,
    );
    expect(text).toContain("Online zones per global instance: global-1 1, global-2 2, global-3 1");
    expect(formatZones([zone("a", "")], "table", now)).not.toContain("per global instance");
  });
});

describe("rebalancing moves in inspect zones", () => {
  const moved = (zone: string, asked: bigint, unlanded: bigint, heldFor?: number): ZoneInsight =>
    create(ZoneInsightSchema, {
      zone,
      online: true,
      instance: "g1",
      heartbeatRttMs: -1,
      moves: {
        asked,
        unlanded,
        heldUntil:
          heldFor === undefined ? undefined : timestampFromDate(new Date(now + heldFor * 1000)),
      },
    });

  it("lists the zones that came back when asked to move, with their hold-off, and puts moves in the JSON document", () => {
    const text = formatZones(
      [
        moved("zone-1", 1n, 0n),
        moved("zone-2", 2n, 1n, 60),
        create(ZoneInsightSchema, { zone: "zone-3", heartbeatRttMs: -1 }),
      ],
      "table",
      now,
    );
    expect(text).toContain(
      "Rebalancing moves that did not land: zone-2 1 of 2 (not asked again until 2030-01-01T00:11:00.000Z)",
    );
    expect(text).not.toMatch(/zone-1 0 of/);
    expect(zoneDocument(moved("zone-2", 2n, 1n, 60)).moves).toEqual({
      asked: 2,
      unlanded: 1,
      heldUntil: "2030-01-01T00:11:00.000Z",
    });
    expect(zoneDocument(create(ZoneInsightSchema, { zone: "zone-3" })).moves).toBeNull();
  });

  it("prints no line when every move landed", () => {
    expect(formatZones([moved("zone-1", 3n, 0n)], "table", now)).not.toContain("Rebalancing");
  });
});
