/**
 * Printing resources, types and zone status as a table, JSON or YAML.
 *
 * @module
 */
import { timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { stringify } from "yaml";
import { withFlags } from "./option-flags.ts";
import type {
  AdminResource,
  SyncCounters,
  TypeInfo,
  ZoneInsight,
} from "../gen/kds/admin/v1/admin_pb.ts";

/** Output formats. */
export type OutputFormat = "table" | "json" | "yaml";

/** A resource as `get -o json|yaml` prints it (and `apply` takes it back). */
export function resourceDocument(r: AdminResource): Record<string, unknown> {
  const doc: Record<string, unknown> = { type: r.type, name: r.name };
  if (r.mesh !== "") doc.mesh = r.mesh;
  doc.labels = { ...r.labels };
  doc.spec = JSON.parse(r.specJson === "" ? "{}" : r.specJson) as unknown;
  doc.version = r.version;
  if (r.creationTime !== undefined) doc.creationTime = iso(r.creationTime);
  if (r.modificationTime !== undefined) doc.modificationTime = iso(r.modificationTime);
  return doc;
}

function iso(t: Timestamp): string {
  return timestampDate(t).toISOString();
}

/** Renders rows as an aligned text table. */
export function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]): string =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join("   ")
      .trimEnd();
  return [line(headers), ...rows.map(line)].join("\n");
}

/** How long ago, compactly ("5s", "3m", "2h", "4d"). */
export function age(t: Timestamp | undefined, now = Date.now()): string {
  if (t === undefined) return "-";
  const s = Math.max(0, Math.round((now - timestampDate(t).getTime()) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  if (s < 172_800) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86_400)}d`;
}

/** Prints resources in `format`. */
export function formatResources(resources: AdminResource[], format: OutputFormat): string {
  if (format === "json") return JSON.stringify(resources.map(resourceDocument), null, 2);
  if (format === "yaml")
    return resources
      .map((r) => stringify(resourceDocument(r)))
      .join("---\n")
      .trimEnd();
  if (resources.length === 0) return "No resources found.";
  const withMesh = resources.some((r) => r.mesh !== "");
  const headers = ["TYPE", ...(withMesh ? ["MESH"] : []), "NAME", "LABELS", "VERSION", "AGE"];
  const rows = resources.map((r) => [
    r.type,
    ...(withMesh ? [r.mesh] : []),
    r.name,
    Object.entries(r.labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(",") || "-",
    r.version,
    age(r.creationTime),
  ]);
  return table(headers, rows);
}

/** Prints types in `format`. */
export function formatTypes(types: TypeInfo[], format: OutputFormat): string {
  const docs = types.map((t) => ({
    kind: t.kind,
    typeUrl: t.typeUrl,
    direction: t.direction,
    scope: t.scope,
  }));
  if (format === "json") return JSON.stringify(docs, null, 2);
  if (format === "yaml") return stringify(docs).trimEnd();
  return table(
    ["KIND", "DIRECTION", "SCOPE", "TYPE URL"],
    docs.map((t) => [t.kind, t.direction, t.scope, t.typeUrl]),
  );
}

/** One type's response counters, in the words of `side`: sent, acked, nacked; or received (accepted plus rejected), accepted, rejected. */
function countersText(
  side: string,
  c: Pick<SyncCounters, "sent" | "acked" | "nacked" | "accepted" | "rejected">,
): string {
  if (side === "")
    return `${c.sent}/${c.acked}/${c.nacked} sent/acked/nacked, ${c.accepted}/${c.rejected} accepted/rejected`; // a server too old to say its side
  const sent = `sent ${c.sent}, acked ${c.acked}, nacked ${c.nacked}`;
  const received = `received ${c.accepted + c.rejected}, accepted ${c.accepted}, rejected ${c.rejected}`;
  return side === "sender" ? sent : side === "both" ? `${sent}; ${received}` : received;
}

/** A type's session counters as the JSON document prints them (zero when absent). */
function sessionDocument(c: SyncCounters | undefined): Record<string, number> {
  const n = (v: bigint | undefined): number => Number(v ?? 0n);
  return {
    sent: n(c?.sent),
    acked: n(c?.acked),
    nacked: n(c?.nacked),
    resourcesSent: n(c?.resourcesSent),
    received: n(c?.accepted) + n(c?.rejected),
    accepted: n(c?.accepted),
    rejected: n(c?.rejected),
    resourcesReceived: n(c?.resourcesReceived),
  };
}

/** A zone's status as `inspect zones -o json|yaml` prints it. */
export function zoneDocument(z: ZoneInsight): Record<string, unknown> {
  return {
    zone: z.zone,
    ...healthDocument(z),
    online: z.online,
    connectedAt: z.connectedAt === undefined ? null : iso(z.connectedAt),
    disconnectedAt: z.disconnectedAt === undefined ? null : iso(z.disconnectedAt),
    lastEnd: z.lastEndCode === "" ? null : { code: z.lastEndCode, message: z.lastEndMessage },
    lastError:
      z.lastErrorCode === ""
        ? null
        : {
            code: z.lastErrorCode,
            message: z.lastErrorMessage,
            at: z.lastErrorAt === undefined ? null : iso(z.lastErrorAt),
          },
    heartbeatRttMs: z.heartbeatRttMs < 0 ? null : Math.round(z.heartbeatRttMs * 100) / 100,
    instance: z.instance || null,
    softwareVersion: z.softwareVersion || null,
    protocolVersion: z.protocolVersion || null,
    features: [...z.features],
    types: z.types.map((t) => ({
      kind: t.kind,
      direction: t.direction,
      side: t.side || null,
      sent: Number(t.sent),
      acked: Number(t.acked),
      nacked: Number(t.nacked),
      lastAckedVersion: t.lastAckedVersion || null,
      lastNackError: t.lastNackError || null,
      stalled: t.stalled,
      received: Number(t.accepted) + Number(t.rejected),
      accepted: Number(t.accepted),
      rejected: Number(t.rejected),
      lastRejectError: t.lastRejectError || null,
      oversized: [...t.oversized],
      resourcesSent: Number(t.resourcesSent),
      resourcesReceived: Number(t.resourcesReceived),
      rejectedResources: t.rejectedResources.map((r) => ({ key: r.key, reason: r.reason })),
      storeError: t.storeError || null,
      session: sessionDocument(t.session),
    })),
    stale:
      z.staleSince === undefined
        ? null
        : { lastOnline: iso(z.staleSince), resources: Number(z.staleResources) },
    moves:
      z.moves === undefined
        ? null
        : {
            asked: Number(z.moves.asked),
            unlanded: Number(z.moves.unlanded),
            heldUntil: z.moves.heldUntil === undefined ? null : iso(z.moves.heldUntil),
          },
    heldReset:
      z.heldReset === undefined
        ? null
        : {
            since: z.heldReset.since === undefined ? null : iso(z.heldReset.since),
            releaseAt: z.heldReset.releaseAt === undefined ? null : iso(z.heldReset.releaseAt),
            kinds: z.heldReset.kinds.map((k) => ({
              kind: k.kind,
              held: Number(k.held),
              of: Number(k.of),
            })),
          },
    ...replicaDocument(z),
    credentialExpiry:
      z.credentialExpiresAt === undefined
        ? null
        : { at: iso(z.credentialExpiresAt), credential: z.credential || "token" },
  };
}

/** A zone's replica role and repeated replacements, for json and yaml (absent when it has neither). */
function replicaDocument(z: ZoneInsight): Record<string, unknown> {
  return {
    ...(z.leadership === ""
      ? {}
      : {
          leadership: {
            role: z.leadership,
            term: Number(z.leaderTerm) || null,
            leaderAddress: z.leaderAddress || null,
          },
        }),
    ...(z.replacedRecently === 0
      ? {}
      : { replaced: { count: z.replacedRecently, windowMs: z.replacedWindowMs } }),
  };
}

/** A zone's verdict and per-direction times as the JSON document prints them. */
function healthDocument(z: ZoneInsight): Record<string, unknown> {
  return {
    state: z.state || null,
    stateReason: z.stateReason || null,
    stateSince: z.stateSince === undefined ? null : iso(z.stateSince),
    directions: z.directions.map((d) => ({
      direction: d.direction,
      lastSentAt: d.lastSentAt === undefined ? null : iso(d.lastSentAt),
      lastReceivedAt: d.lastReceivedAt === undefined ? null : iso(d.lastReceivedAt),
    })),
  };
}

/** The note under the zone table of a zone that is not healthy: its state, since when, and why. */
function stateNote(z: ZoneInsight, now: number): string | undefined {
  if (z.state === "" || z.state === "healthy" || z.state === "offline") return undefined; // offline: the notes below say how it ended
  const since = z.stateSince === undefined ? "" : ` for ${age(z.stateSince, now)}`;
  return `${z.zone}: ${z.state.toUpperCase()}${since}: ${withFlags(z.stateReason)}`;
}

/**
 * What a zone's current or last session agreed on, for the table: the
 * protocol version with the features it uses ("3 (batching, calls)"), or
 * "-" before the first session.
 */
function protocolText(z: ZoneInsight): string {
  if (z.protocolVersion === 0) return "-";
  return `${z.protocolVersion} (${z.features.length === 0 ? "no features" : z.features.join(", ")})`;
}

/** The lines under the zone table: each zone's last error, and how an offline zone's last session ended (options named as flags). */
function zoneNotes(zones: ZoneInsight[], now: number): string[] {
  const notes: string[] = [];
  for (const z of zones) {
    const state = stateNote(z, now);
    if (state !== undefined) notes.push(state);
    if (z.leadership !== "")
      notes.push(
        z.leadership === "leader"
          ? `${z.zone}: this replica is the LEADER (term ${z.leaderTerm}): it dials the global and writes`
          : `${z.zone}: this replica is a STANDBY: it serves reads only; the leader is ${z.leaderAddress === "" ? "not known yet" : `at ${z.leaderAddress}`}${z.leaderTerm > 0n ? ` (term ${z.leaderTerm})` : ""}`,
      );
    if (z.replacedRecently > 0)
      notes.push(
        `${z.zone}: REPLACED ${z.replacedRecently} times in the last ${Math.round(z.replacedWindowMs / 1000)} s: two processes are using zone name \`${z.zone}\`; give each its own name, or run replicas on one shared store (--store postgres://...) so only the leader dials`,
      );
    if (z.heldReset !== undefined) {
      const kinds = z.heldReset.kinds.map((k) => `${k.held} of ${k.of} ${k.kind}`).join(", ");
      const release =
        z.heldReset.releaseAt === undefined
          ? "until accepted"
          : `until accepted or ${iso(z.heldReset.releaseAt)}`;
      notes.push(
        `${z.zone}: RESET HELD (${age(z.heldReset.since, now)} ago): its first exchange after connecting would delete ${kinds}; the deletions are held and the old copies served ${release} (kds-mux zone accept-reset ${z.zone})`,
      );
    }
    if (z.credentialExpiresAt !== undefined)
      notes.push(
        `${z.zone}: its ${z.credential === "certificate" ? "client certificate" : "zone token"} expires at ${iso(z.credentialExpiresAt)} (${expiresIn(z.credentialExpiresAt, now)}); the session ends then`,
      );
    if (z.staleSince !== undefined)
      notes.push(
        `${z.zone}: STALE: offline since ${iso(z.staleSince)}; its ${z.staleResources} resources are marked stale (kds.io/origin-last-online)`,
      );
    if (z.lastErrorCode !== "")
      notes.push(
        `${z.zone}: last error (${z.lastErrorCode}, ${age(z.lastErrorAt, now)} ago): ${withFlags(z.lastErrorMessage)}`,
      );
    if (!z.online && z.lastEndCode !== "" && z.lastEndMessage !== z.lastErrorMessage)
      notes.push(
        `${z.zone}: last session ended (${z.lastEndCode}, ${age(z.disconnectedAt, now)} ago): ${withFlags(z.lastEndMessage)}`,
      );
  }
  return notes;
}

/**
 * Prints zone status in `format`. The table shows each zone's state
 * (healthy, degraded, stalled, offline; the reason of one neither healthy
 * nor offline is a note under it), peer software
 * version and the protocol version and features its session uses, and each type's counters in
 * the words of this side's part (sent, acked, nacked as the sender;
 * received, accepted, rejected as the receiver), for the current session
 * and for all sessions since this side started; under it, how many online
 * zones each global instance holds, then each zone's last error and, for an
 * offline zone, how its last session ended.
 */
export function formatZones(zones: ZoneInsight[], format: OutputFormat, now = Date.now()): string {
  if (format === "json") return JSON.stringify(zones.map(zoneDocument), null, 2);
  if (format === "yaml") return stringify(zones.map(zoneDocument)).trimEnd();
  if (zones.length === 0) return "No zones registered.";
  const rows: string[][] = [];
  for (const z of zones) {
    const rtt = z.heartbeatRttMs < 0 ? "-" : `${z.heartbeatRttMs.toFixed(1)}ms`;
    const status = z.online ? "online" : z.staleSince !== undefined ? "stale" : "offline";
    const since = z.online
      ? age(z.connectedAt, now)
      : z.disconnectedAt === undefined
        ? "never"
        : `${age(z.disconnectedAt, now)} ago`;
    for (const [i, t] of z.types.entries()) {
      const rejected = t.rejectedResources.at(-1);
      const lastError =
        t.storeError ||
        t.lastNackError ||
        t.lastRejectError ||
        (rejected === undefined ? "" : `left out ${rejected.key}: ${rejected.reason}`) ||
        (t.stalled ? "stalled: waiting for ACK" : "");
      rows.push([
        i === 0 ? z.zone : "",
        i === 0 ? status + (z.heldReset === undefined ? "" : ", reset held") : "",
        i === 0 ? z.state || "-" : "",
        i === 0 ? since : "",
        i === 0 ? rtt : "",
        i === 0 ? z.softwareVersion || "-" : "",
        i === 0 ? protocolText(z) : "",
        t.kind,
        t.direction,
        countersText(
          t.side,
          t.session ?? { sent: 0n, acked: 0n, nacked: 0n, accepted: 0n, rejected: 0n },
        ),
        countersText(t.side, t),
        lastError === "" ? "-" : lastError,
      ]);
    }
    if (z.types.length === 0)
      rows.push([
        z.zone,
        status + (z.heldReset === undefined ? "" : ", reset held"),
        z.state || "-",
        since,
        rtt,
        z.softwareVersion || "-",
        protocolText(z),
        "-",
        "-",
        "-",
        "-",
        "-",
      ]);
  }
  const notes = zoneNotes(zones, now);
  const perInstance = instanceCounts(zones);
  const moves = unlandedMoves(zones);
  const printed = table(
    [
      "ZONE",
      "STATUS",
      "STATE",
      "SINCE",
      "RTT",
      "PEER VERSION",
      "PROTOCOL",
      "TYPE",
      "DIRECTION",
      "THIS SESSION",
      "ALL SESSIONS",
      "LAST ERROR",
    ],
    rows,
  );
  return [
    printed,
    ...(perInstance === "" ? [] : [perInstance]),
    ...(moves === "" ? [] : [moves]),
    ...(notes.length === 0 ? [] : [notes.join("\n")]),
  ].join("\n\n");
}

/**
 * "Online zones per global instance: a 7, b 7, c 6", when a zone names the
 * instance holding it (a global; several instances share its store), else "".
 */
export function instanceCounts(zones: readonly ZoneInsight[]): string {
  const counts = new Map<string, number>();
  for (const z of zones)
    if (z.online && z.instance !== "") counts.set(z.instance, (counts.get(z.instance) ?? 0) + 1);
  if (counts.size === 0) return "";
  return `Online zones per global instance: ${[...counts]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([instance, n]) => `${instance} ${n}`)
    .join(", ")}`;
}

/**
 * "Rebalancing moves that did not land: zone-7 1 of 2 (not asked again until
 * ...), ...": the zones rebalancing on the instance answering asked to move
 * and that came back to it, else "".
 */
export function unlandedMoves(zones: readonly ZoneInsight[]): string {
  const back: string[] = [];
  for (const z of zones) {
    if (z.moves === undefined || z.moves.unlanded === 0n) continue;
    back.push(
      `${z.zone} ${z.moves.unlanded} of ${z.moves.asked}${z.moves.heldUntil === undefined ? "" : ` (not asked again until ${iso(z.moves.heldUntil)})`}`,
    );
  }
  return back.length === 0 ? "" : `Rebalancing moves that did not land: ${back.join(", ")}`;
}

/** "in 3h", or "passed" once it has: how far off a credential's expiry is. */
function expiresIn(at: Timestamp, now: number): string {
  const left = timestampDate(at).getTime() - now;
  // age() of a time as far in the past as `at` is in the future.
  return left <= 0 ? "passed" : `in ${age(timestampFromDate(new Date(now - left)), now)}`;
}
