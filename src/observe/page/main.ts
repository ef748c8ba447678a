// The live status page of a kds-mux global or zone: it follows
// /status/events (server-sent events) and redraws on every snapshot. No
// framework: plain DOM, every text set through textContent (zone names and
// error texts come from peers). Bundled by scripts/status-page.mjs.
import type { SyncCounters } from "../zone-status.ts";
import type { LagPoint, SessionEntry, StatusSnapshot } from "../status-feed.ts";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = [
  "#2f6fdb",
  "#d9480f",
  "#2b8a3e",
  "#9c36b5",
  "#e8590c",
  "#1098ad",
  "#c2255c",
  "#5c940d",
];
/** The chart spans the history there is, from 30 s up to the 5 min the server keeps. */
const MIN_WINDOW_MS = 30 * 1000;
const MAX_WINDOW_MS = 5 * 60 * 1000;

type Child = Node | string | null | undefined;

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function svg(
  tag: string,
  attrs: Record<string, string | number>,
  ...children: Child[]
): SVGElement {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function byId<T extends HTMLElement>(id: string): T {
  const node = document.getElementById(id);
  if (node === null) throw new Error(`the page has no #${id}`);
  return node as T;
}

/** "12s", "3m", "2h" ago or for. */
function ago(from: number, now: number): string {
  const s = Math.max(0, Math.round((now - from) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  if (s < 172_800) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86_400)}d`;
}

function clock(t: number): string {
  return new Date(t).toLocaleTimeString([], { hour12: false });
}

/** Under a zone's name: when the credential of its session expires (the session ends then). */
function expiryOf(z: StatusSnapshot["zones"][number]): HTMLElement[] {
  const e = z.credentialExpiry;
  if (e === null) return [];
  const what = e.credential === "certificate" ? "certificate" : "token";
  return [el("div", { class: "muted expiry" }, `${what} expires ${new Date(e.at).toISOString()}`)];
}

function colorOf(zones: string[], zone: string): string {
  return COLORS[Math.max(0, zones.indexOf(zone)) % COLORS.length] as string;
}

/** The peer's software version, and the protocol version and features of the current or last session. */
function versionText(z: StatusSnapshot["zones"][number]): string {
  if (z.peer === undefined) return "-";
  const features = z.peer.features.length === 0 ? "no features" : z.peer.features.join(", ");
  return `${z.peer.softwareVersion || "unknown"} · protocol ${z.peer.protocolVersion} · ${features}`;
}

/** The zone's verdict: a badge with its state, and the reason of a degraded or stalled one beside it (an offline one's is the last end). */
function stateCell(z: StatusSnapshot["zones"][number], now: number): HTMLElement {
  const v = z.verdict;
  const shown = v.state === "degraded" || v.state === "stalled";
  const since = v.since === null ? "" : ` (for ${ago(v.since, now)})`;
  return el(
    "td",
    { class: "state", "data-state": v.state },
    el("span", { class: `badge ${v.state}` }, v.state),
    shown ? el("span", { class: "reason" }, ` ${v.reason}${since}`) : null,
  );
}

/** Per direction: when this side last sent and received. */
function trafficCell(z: StatusSnapshot["zones"][number], now: number): HTMLElement {
  const when = (t: number | null): string => (t === null ? "never" : `${ago(t, now)} ago`);
  const lines = z.directions.map((d) =>
    el(
      "div",
      { "data-direction": d.direction },
      `${d.direction}: sent ${when(d.lastSentAt)}, received ${when(d.lastReceivedAt)}`,
    ),
  );
  return el("td", { class: "traffic muted" }, ...(lines.length === 0 ? ["-"] : lines));
}

function renderZones(s: StatusSnapshot): void {
  const body = byId<HTMLTableElement>("zones").tBodies[0] as HTMLTableSectionElement;
  const rows = s.zones.map((z) => {
    const since = z.online
      ? z.connectedAt === null
        ? "-"
        : `online for ${ago(z.connectedAt, s.now)}`
      : z.disconnectedAt === null
        ? "never connected"
        : `offline since ${clock(z.disconnectedAt)} (${ago(z.disconnectedAt, s.now)} ago)`;
    const rtt =
      z.heartbeatRttMs === undefined || z.heartbeatRttMs === null
        ? "-"
        : `${z.heartbeatRttMs.toFixed(1)} ms`;
    return el(
      "tr",
      { "data-zone": z.zone, "data-online": String(z.online) },
      el("td", {}, el("strong", {}, z.zone), ...expiryOf(z)),
      el(
        "td",
        {},
        el(
          "span",
          { class: `badge ${z.online ? "online" : "offline"}` },
          z.online ? "online" : "offline",
        ),
      ),
      stateCell(z, s.now),
      el("td", { class: "since" }, since),
      el("td", { class: "rtt" }, rtt),
      el("td", { class: "version" }, versionText(z)),
      trafficCell(z, s.now),
      el(
        "td",
        { class: "wrap muted" },
        z.lastEnd === undefined ? "-" : `${z.lastEnd.code}: ${z.lastEnd.message}`,
      ),
      el(
        "td",
        { class: "wrap last-error" },
        z.lastError === null
          ? "-"
          : `${z.lastError.code} (${ago(z.lastError.at, s.now)} ago): ${z.lastError.message}`,
      ),
    );
  });
  body.replaceChildren(
    ...(rows.length > 0
      ? rows
      : [el("tr", {}, el("td", { colspan: "9", class: "empty" }, "No zones registered."))]),
  );
}

/** A type's counters in the words of this side's part in it. */
function counters(side: "sender" | "receiver" | "both", c: SyncCounters): string {
  const sent = `sent ${c.sent}, acked ${c.acked}, nacked ${c.nacked}`;
  const received = `received ${c.accepted + c.rejected}, accepted ${c.accepted}, rejected ${c.rejected}`;
  return side === "sender" ? sent : side === "receiver" ? received : `${sent}; ${received}`;
}

function renderTypes(s: StatusSnapshot): void {
  const body = byId<HTMLTableElement>("types").tBodies[0] as HTMLTableSectionElement;
  const rows: HTMLElement[] = [];
  for (const z of s.zones) {
    for (const t of z.types) {
      const error = t.lastNackError ?? t.lastRejectError ?? t.storeError;
      const state = t.stalled
        ? el("span", { class: "badge stalled" }, "stalled")
        : error !== undefined
          ? el("span", { class: "badge offline" }, "error")
          : el("span", { class: "badge online" }, "ok");
      rows.push(
        el(
          "tr",
          { "data-zone": z.zone, "data-kind": t.kind, "data-side": t.side },
          el("td", {}, z.zone),
          el("td", {}, t.kind),
          el("td", { class: "muted" }, t.direction),
          el("td", { class: "session" }, counters(t.side, t.session)),
          el("td", { class: "total" }, counters(t.side, t)),
          el(
            "td",
            { class: "muted" },
            (t.direction === "zone-to-global"
              ? s.role === "global"
                ? t.lastAcceptedVersion
                : t.lastAckedVersion
              : s.role === "global"
                ? t.lastAckedVersion
                : t.lastAcceptedVersion) ?? "-",
          ),
          el("td", {}, state),
        ),
      );
    }
  }
  body.replaceChildren(
    ...(rows.length > 0
      ? rows
      : [el("tr", {}, el("td", { colspan: "7", class: "empty" }, "Nothing syncs yet."))]),
  );
}

function renderErrors(s: StatusSnapshot): void {
  const items: { t: number | null; text: string }[] = [];
  for (const z of s.zones) {
    if (z.heldReset !== null)
      items.push({
        t: z.heldReset.since,
        text: `${z.zone}: RESET HELD: its first exchange after connecting would delete ${z.heldReset.kinds
          .map((k) => `${k.held} of ${k.of} ${k.kind}`)
          .join(
            ", ",
          )}; the old copies are still served until an operator runs kds-mux zone accept-reset ${z.zone}${z.heldReset.releaseAt === null ? "" : ` (or until ${clock(z.heldReset.releaseAt)})`}`,
      });
    if (z.replacements !== undefined)
      items.push({
        t: z.replacements.lastAt,
        text: `${z.zone}: REPLACED ${z.replacements.count} times in the last ${Math.round(z.replacements.windowMs / 1000)} s: two processes are using zone name \`${z.zone}\``,
      });
    if (z.leadership?.role === "standby")
      items.push({
        t: null,
        text: `${z.zone}: this replica is a STANDBY: it serves reads only; the leader is ${z.leadership.leader === undefined ? "not known yet" : `at ${z.leadership.leader.address || z.leadership.leader.holder}`}`,
      });
    if (z.stale !== null)
      items.push({
        t: z.stale.since,
        text: `${z.zone}: STALE: offline since ${clock(z.stale.since)}; its ${z.stale.resources} resources are marked stale`,
      });
    if (z.lastError !== null)
      items.push({
        t: z.lastError.at,
        text: `${z.zone}: ${z.lastError.code}: ${z.lastError.message}`,
      });
    if (
      z.lastEnd !== undefined &&
      z.lastEnd.message !== z.lastError?.message &&
      !["shutdown", "replaced", "aborted"].includes(z.lastEnd.code)
    )
      items.push({
        t: z.disconnectedAt,
        text: `${z.zone}: session ended (${z.lastEnd.code}): ${z.lastEnd.message}`,
      });
    for (const t of z.types) {
      if (t.lastNackError !== undefined)
        items.push({ t: null, text: `${z.zone} ${t.kind}: the peer NACKed: ${t.lastNackError}` });
      if (t.lastRejectError !== undefined)
        items.push({ t: null, text: `${z.zone} ${t.kind}: rejected: ${t.lastRejectError}` });
      if (t.storeError !== undefined)
        items.push({ t: null, text: `${z.zone} ${t.kind}: store: ${t.storeError}` });
      if (t.stalled)
        items.push({ t: null, text: `${z.zone} ${t.kind}: a response waits past the ACK timeout` });
      for (const r of t.rejectedResources ?? [])
        items.push({ t: null, text: `${z.zone} ${t.kind} ${r.key}: left out: ${r.reason}` });
      for (const r of t.peerRejectedResources ?? [])
        items.push({
          t: null,
          text: `${z.zone} ${t.kind} ${r.key}: rejected by the peer: ${r.reason}`,
        });
    }
  }
  items.sort((a, b) => (b.t ?? s.now) - (a.t ?? s.now));
  byId("errors").replaceChildren(
    ...(items.length > 0
      ? items
          .slice(0, 20)
          .map((i) =>
            el("li", {}, el("span", { class: "when" }, i.t === null ? "now" : clock(i.t)), i.text),
          )
      : [el("li", { class: "empty" }, "No errors.")]),
  );
}

function renderSessions(s: StatusSnapshot): void {
  const body = byId<HTMLTableElement>("sessions").tBodies[0] as HTMLTableSectionElement;
  const rows = s.sessions
    .slice(0, 15)
    .map((e: SessionEntry) =>
      el(
        "tr",
        { "data-peer": e.peer, "data-open": String(e.endedAt === undefined) },
        el("td", {}, e.peer),
        el("td", {}, `${clock(e.openedAt)} (${ago(e.openedAt, s.now)} ago)`),
        el(
          "td",
          {},
          e.endedAt === undefined
            ? el("span", { class: "badge online" }, "open")
            : clock(e.endedAt),
        ),
        el("td", { class: "muted" }, e.endCode ?? "-"),
      ),
    );
  body.replaceChildren(
    ...(rows.length > 0
      ? rows
      : [el("tr", {}, el("td", { colspan: "4", class: "empty" }, "No sessions yet."))]),
  );
}

/** A nice upper bound for the y axis: 1, 2 or 5 times a power of ten. */
function niceMax(value: number): number {
  const v = Math.max(value, 1);
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= v) as number;
}

function renderLag(s: StatusSnapshot): void {
  const zones = Object.keys(s.lag).sort();
  const w = 600;
  const h = 220;
  const left = 48;
  const bottom = 20;
  const top = 8;
  const oldest = Math.min(s.now, ...zones.map((z) => s.lag[z]?.[0]?.t ?? s.now));
  const span = Math.min(MAX_WINDOW_MS, Math.max(MIN_WINDOW_MS, s.now - oldest + 5_000));
  const from = s.now - span;
  const max = niceMax(Math.max(0, ...zones.flatMap((z) => (s.lag[z] ?? []).map((p) => p.ms))));
  const x = (t: number): number => left + ((t - from) / span) * (w - left - 8);
  const y = (ms: number): number => top + (1 - ms / max) * (h - top - bottom);
  const chart = svg("svg", {
    viewBox: `0 0 ${w} ${h}`,
    preserveAspectRatio: "none",
    role: "img",
    "aria-label": "sync lag per zone over the last five minutes",
  });
  for (const f of [0, 0.5, 1]) {
    chart.append(
      svg("line", { x1: left, x2: w - 4, y1: y(max * f), y2: y(max * f), stroke: "#e3e6eb" }),
    );
    chart.append(
      svg("text", { x: left - 6, y: y(max * f) + 4, "text-anchor": "end" }, `${max * f} ms`),
    );
  }
  for (const f of [1, 0.75, 0.5, 0.25, 0]) {
    const back = span * f;
    const label =
      f === 0
        ? "now"
        : back >= 120_000
          ? `-${Math.round(back / 60_000)}m`
          : `-${Math.round(back / 1000)}s`;
    chart.append(
      svg(
        "text",
        {
          x: x(s.now - back),
          y: h - 4,
          "text-anchor": f === 0 ? "end" : f === 1 ? "start" : "middle",
        },
        label,
      ),
    );
  }
  for (const zone of zones) {
    const points = (s.lag[zone] ?? []).filter((p: LagPoint) => p.t >= from);
    if (points.length === 0) continue;
    const color = colorOf(zones, zone);
    const coords = points.map((p) => `${x(p.t).toFixed(1)},${y(p.ms).toFixed(1)}`).join(" ");
    chart.append(
      svg("polyline", {
        points: coords,
        fill: "none",
        stroke: color,
        "stroke-width": 2,
        "data-zone": zone,
        "data-points": points.length,
      }),
    );
    for (const p of points)
      chart.append(
        svg(
          "circle",
          { cx: x(p.t).toFixed(1), cy: y(p.ms).toFixed(1), r: 2.5, fill: color },
          svg("title", {}, `${zone}: ${p.ms.toFixed(1)} ms at ${clock(p.t)}`),
        ),
      );
  }
  const legend = el(
    "div",
    { class: "legend" },
    ...(zones.length === 0
      ? [el("span", { class: "empty", style: "--c: transparent" }, "No change has been ACKed yet.")]
      : zones.map((z) => {
          const last = (s.lag[z] ?? []).at(-1);
          return el(
            "span",
            { style: `--c: ${colorOf(zones, z)}`, "data-zone": z },
            `${z}: ${last === undefined ? "-" : `${last.ms.toFixed(1)} ms`}`,
          );
        })),
  );
  byId("lag").replaceChildren(chart, legend);
}

function render(s: StatusSnapshot): void {
  byId("title").textContent = `kds-mux ${s.role} "${s.name}"`;
  document.title = `kds-mux ${s.role} ${s.name}`;
  byId("updated").textContent = `updated ${clock(s.now)}`;
  renderZones(s);
  renderTypes(s);
  renderLag(s);
  renderErrors(s);
  renderSessions(s);
  document.body.dataset.version = String(Number(document.body.dataset.version ?? "0") + 1);
}

function setLive(live: boolean): void {
  const badge = byId("live");
  badge.dataset.live = String(live);
  badge.textContent = live ? "live" : "reconnecting";
}

const events = new EventSource("status/events");
events.addEventListener("open", () => setLive(true));
events.addEventListener("error", () => setLive(false));
events.addEventListener("status", (event) => {
  setLive(true);
  render(JSON.parse((event as MessageEvent<string>).data) as StatusSnapshot);
});
