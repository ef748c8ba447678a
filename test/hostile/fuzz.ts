// The hostile-peer fuzz run: a real `kds-mux global` child process, a real
// `kds-mux zone` that must keep syncing both ways throughout, and hostile
// peers on raw HTTP/2 sending mutated frames planned from frames recorded
// off a real session. Measures what the run promises to check: the global
// stays alive, its RSS stays bounded (peak reported), its store keeps what it
// had (hostile zones may only add what a zone may: their own zone-to-global
// resources), the honest zone keeps syncing, and every hostile session ends
// with a clear error (the distribution of end reasons is reported).
//
// Run by `npm run fuzz` (test/hostile/fuzz-main.ts) and, bounded, by
// test/hostile/hostile.test.ts.
import { create } from "@bufbuild/protobuf";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import * as http2 from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { adminClient, tokenClient } from "../../src/cli/admin-client.ts";
import { AdminResourceSchema, type AdminResource } from "../../src/gen/kds/admin/v1/admin_pb.ts";
import { KdsProcess } from "../cli/process.ts";
import { parseMetrics, type Scrape } from "../observe/scrape.ts";
import { corpusKinds, recordCorpus, type SeedFrame } from "./corpus.ts";
import { Planner, type Identity } from "./mutate.ts";
import { hostileCall, type CallEnd } from "./peer.ts";

/** How a fuzz run is bounded and shaped. */
export interface FuzzOptions {
  /** Stop once this many mutated frames were sent. */
  readonly frames: number;
  /** ... or once this much time passed, whichever comes first. */
  readonly durationMs: number;
  /** Seed of the session planner (the same seed plans the same sessions). */
  readonly seed: number;
  /** Hostile sessions in flight at once. Default 8. */
  readonly concurrency?: number;
  /** HTTP/2 connections the hostile sessions share. Default 4. */
  readonly connections?: number;
  /** Registered zones the hostile peers hold tokens of. Default 6. */
  readonly hostileZones?: number;
  /** How long a hostile session may take to be ended after its last byte. Default 20 s. */
  readonly sessionTimeoutMs?: number;
  /** Extra arguments of `kds-mux global`. */
  readonly globalArgs?: readonly string[];
  /** Progress lines go here. Default: nowhere. */
  readonly log?: (line: string) => void;
}

/** What a fuzz run measured. */
export interface FuzzReport {
  readonly seed: number;
  readonly seconds: number;
  readonly sessions: number;
  /** Envelopes written by hostile peers (valid ones included). */
  readonly framesSent: number;
  /** Of those, mutated or out-of-place ones. */
  readonly mutatedFrames: number;
  readonly corpus: Record<string, number>;
  readonly families: Record<string, number>;
  readonly mutations: Record<string, number>;
  /** Hostile sessions by how they ended: "goaway REASON / status" or "no goaway / status". */
  readonly endReasons: Record<string, number>;
  /** Mean time from opening a hostile session to its end, by end reason, in ms. */
  readonly endMeanMs: Record<string, number>;
  /**
   * Sessions the global ended with status OK and no goaway, by what the peer
   * did last: "peer goaway" (the peer ended the session itself), "peer eof"
   * (it half-closed with the session open) or "unexplained" (its last frame
   * was a protocol error, or a broken one: each is a finding).
   */
  readonly okWithoutGoaway: {
    readonly "peer goaway": number;
    readonly "peer eof": number;
    readonly unexplained: number;
  };
  /** A sample of the unexplained ones, with the family that caused them. */
  readonly okWithoutGoawaySamples: string[];
  /** Sessions the global did not end within the session timeout. */
  readonly hangs: number;
  /** Response bytes that did not parse (should be 0). */
  readonly garbledBytes: number;
  /**
   * What the global's /metrics counted during the fuzz (honest zone included):
   * mux frames it decoded and dispatched, sessions closed after their hello by
   * end code, and admissions by result.
   */
  readonly server: {
    readonly framesReceived: number;
    readonly sessionsClosed: Record<string, number>;
    readonly admissions: Record<string, number>;
  };
  /** Hostile sessions that ended in a stream reset or a refused stream, by the error seen. */
  readonly resets: Record<string, number>;
  /** HTTP/2 GOAWAY frames (connection level) the global sent the hostile peers, by HTTP/2 error code. */
  readonly connectionGoaways: Record<number, number>;
  /** The global process exited during the run (a crash). */
  readonly crashed: boolean;
  /** Lines of the global's output that look like a crash or an unexpected error. */
  readonly alarmingLogLines: string[];
  readonly rss: {
    readonly startMiB: number;
    readonly peakMiB: number;
    readonly endMiB: number;
    readonly afterSettleMiB: number;
    readonly samples: number;
  };
  /** Honest zone's sync probes: global-to-zone and zone-to-global changes, and how long they took to arrive. */
  readonly sync: {
    readonly probes: number;
    readonly delivered: number;
    readonly failed: number;
    readonly maxLagMs: number;
    readonly meanLagMs: number;
  };
  /** Store check: changes to what was there before (must be empty) and what hostile zones added. */
  readonly store: {
    readonly before: number;
    readonly after: number;
    readonly changed: string[];
    readonly hostileAdded: Record<string, number>;
  };
}

const GOOD_ZONE = "good-zone";
const RECORDER = "recorder";

/** Reads the VmRSS of `pid` in MiB, or undefined once it is gone. */
function rssMiB(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const m = status.match(/VmRSS:\s+(\d+) kB/);
    return m === null ? undefined : Number(m[1]) / 1024;
  } catch {
    return undefined; // the process is gone: the caller reports that as a crash
  }
}

const keyOf = (r: AdminResource): string => `${r.type}/${r.mesh}/${r.name}`;

/** Every resource the admin API shows, by type/mesh/name -> version. */
async function snapshot(url: string): Promise<Map<string, AdminResource>> {
  const admin = adminClient(url);
  const { types } = await admin.listTypes({});
  const out = new Map<string, AdminResource>();
  for (const t of types) {
    const { resources } = await admin.get({ type: t.kind });
    for (const r of resources) out.set(keyOf(r), r);
  }
  return out;
}

const resource = (type: string, name: string, spec: unknown, mesh = ""): AdminResource =>
  create(AdminResourceSchema, { type, name, mesh, specJson: JSON.stringify(spec) });

/** Runs the fuzz; the global and zone processes are stopped before it resolves. */
export async function runFuzz(options: FuzzOptions): Promise<FuzzReport> {
  const log = options.log ?? (() => undefined);
  const started = performance.now();
  const dir = mkdtempSync(join(tmpdir(), "kds-mux-fuzz-"));
  const global = new KdsProcess([
    "global",
    "--listen",
    "127.0.0.1:0",
    "--admin-listen",
    "127.0.0.1:0",
    "--store",
    "memory",
    ...(options.globalArgs ?? []),
  ]);
  let zone: KdsProcess | undefined;
  const stop = new AbortController();
  const alarming: string[] = [];
  const alarm =
    /uncaught|unhandled|heap out of memory|FATAL|RangeError|TypeError|ReferenceError|Maximum call stack|\bat .*\.ts:\d+/i;
  /** Scans what a process printed since the last call for alarming lines, and forgets it (the run prints a lot). */
  const scan = (p: KdsProcess, who: string): void => {
    for (const line of p.output.split("\n"))
      if (alarm.test(line) && alarming.length < 50) alarming.push(`${who}: ${line.slice(0, 400)}`);
    p.output = "";
  };
  try {
    const listening = await global.waitFor(
      /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
    );
    const muxUrl = listening[1] as string;
    const adminUrl = listening[2] as string;
    const pid = global.child.pid as number;
    const admin = adminClient(adminUrl);
    const tokens = tokenClient(adminUrl);
    const hostileNames = Array.from(
      { length: options.hostileZones ?? 6 },
      (_, i) => `hostile-${i}`,
    );
    await admin.apply({
      resources: [
        ...[GOOD_ZONE, RECORDER, ...hostileNames].map((name) =>
          resource("Zone", name, { enabled: true }),
        ),
        resource("Mesh", "default", { mtls: true }),
        resource("TrafficPolicy", "fuzz-probe", { timeoutMs: 0 }, "default"),
      ],
    });
    const tokenOf = async (name: string): Promise<string> =>
      (await tokens.generateZoneToken({ zone: name })).token;
    const identities: Identity[] = [];
    for (const name of hostileNames) identities.push({ zone: name, token: await tokenOf(name) });

    // The honest zone: a real process that must keep syncing while the fuzz runs.
    const tokenFile = join(dir, "good-zone.token");
    writeFileSync(tokenFile, `${await tokenOf(GOOD_ZONE)}\n`);
    zone = new KdsProcess([
      "zone",
      "--name",
      GOOD_ZONE,
      "--global",
      muxUrl,
      "--token-file",
      tokenFile,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
    ]);
    const zoneUrl = (
      await zone.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/)
    )[1] as string;
    await zone.waitFor(/connected to global/);
    const zoneAdmin = adminClient(zoneUrl);

    log(`global pid ${pid}; recording the corpus from a real session`);
    const corpus: SeedFrame[] = await recordCorpus({
      muxUrl,
      adminUrl,
      zone: RECORDER,
      token: await tokenOf(RECORDER),
      signal: stop.signal,
    });
    log(`corpus: ${corpus.length} frames ${JSON.stringify(corpusKinds(corpus))}`);

    // The zone applies its own Dataplane once; the probes below move both directions.
    await zoneAdmin.apply({
      resources: [
        resource(
          "Dataplane",
          "probe",
          { address: "10.0.0.1", service: "probe", port: 1 },
          "default",
        ),
      ],
    });
    const before = await waitStable(
      adminUrl,
      (m) =>
        m.has(`Dataplane/default/${GOOD_ZONE}.probe`) &&
        m.has(`Dataplane/default/${RECORDER}.recorded-2`),
    );
    scan(global, "global");
    scan(zone, "zone");
    const metricsBefore = await scrape(adminUrl);

    // RSS of the global, sampled until the end.
    const rss = { start: rssMiB(pid) ?? 0, peak: 0, end: 0, samples: 0 };
    const sampler = setInterval(() => {
      const v = rssMiB(pid);
      if (v === undefined) return;
      rss.peak = Math.max(rss.peak, v);
      rss.end = v;
      rss.samples++;
    }, 200);

    // Sync probes: every round changes one global resource and one zone resource and waits for each to cross.
    const sync = { probes: 0, delivered: 0, failed: 0, maxLagMs: 0, totalLagMs: 0 };
    const probing = (async () => {
      for (let i = 1; !stop.signal.aborted; i++) {
        const t0 = performance.now();
        const down = admin
          .apply({
            resources: [resource("TrafficPolicy", "fuzz-probe", { timeoutMs: i }, "default")],
          })
          .then(() =>
            poll(
              async () =>
                (
                  await zoneAdmin.get({
                    type: "TrafficPolicy",
                    name: "fuzz-probe",
                    mesh: "default",
                  })
                ).resources[0]?.specJson.includes(`"timeoutMs":${i}`) === true,
              60_000,
            ),
          );
        const up = zoneAdmin
          .apply({
            resources: [
              resource(
                "Dataplane",
                "probe",
                { address: "10.0.0.1", service: "probe", port: i + 1 },
                "default",
              ),
            ],
          })
          .then(() =>
            poll(
              async () =>
                (
                  await admin.get({
                    type: "Dataplane",
                    name: `${GOOD_ZONE}.probe`,
                    mesh: "default",
                  })
                ).resources[0]?.specJson.includes(`"port":${i + 1}`) === true,
              60_000,
            ),
          );
        for (const arrived of await Promise.all([down.catch(() => false), up.catch(() => false)])) {
          sync.probes++;
          const lag = performance.now() - t0;
          if (arrived) {
            sync.delivered++;
            sync.maxLagMs = Math.max(sync.maxLagMs, lag);
            sync.totalLagMs += lag;
          } else sync.failed++;
        }
        await sleep(500);
      }
    })();

    // The hostile peers.
    const planner = new Planner(options.seed, corpus, identities);
    const connections: (http2.ClientHttp2Session | undefined)[] = [];
    /** HTTP/2 GOAWAY frames the global sent on the hostile connections, by error code. */
    const connectionGoaways: Record<number, number> = {};
    const resets: Record<string, number> = {};
    const connection = (i: number): http2.ClientHttp2Session => {
      let c = connections[i];
      if (c === undefined || c.closed || c.destroyed) {
        c = http2.connect(muxUrl);
        c.on("error", () => undefined); // a connection the global cut: the sessions on it report "reset", the next one reconnects
        c.on("goaway", (code: number) => {
          connectionGoaways[code] = (connectionGoaways[code] ?? 0) + 1;
        });
        connections[i] = c;
      }
      return c;
    };
    const counts = { sessions: 0, frames: 0, mutated: 0, hangs: 0, garbled: 0 };
    const okWithoutGoaway = { "peer goaway": 0, "peer eof": 0, unexplained: 0 };
    const endReasons: Record<string, number> = {};
    const endMs: Record<string, number> = {};
    const families: Record<string, number> = {};
    const okSamples: string[] = [];
    const deadline = performance.now() + options.durationMs;
    const more = (): boolean =>
      counts.mutated < options.frames &&
      performance.now() < deadline &&
      global.child.exitCode === null;
    let lastLog = performance.now();
    const worker = async (w: number): Promise<void> => {
      while (more()) {
        const plan = planner.next();
        counts.sessions++;
        counts.frames += plan.frames;
        counts.mutated += plan.mutated;
        families[plan.family] = (families[plan.family] ?? 0) + 1;
        const t0 = performance.now();
        const slot = w % (options.connections ?? 4);
        const end: CallEnd = await hostileCall(connection(slot), {
          protocol: plan.protocol,
          headers: plan.headers,
          chunks: plan.chunks,
          timeoutMs: options.sessionTimeoutMs ?? 20_000,
        });
        const reason = `${end.goaway === undefined ? "no goaway" : `goaway ${end.goaway}`} / ${end.status}`;
        endReasons[reason] = (endReasons[reason] ?? 0) + 1;
        endMs[reason] = (endMs[reason] ?? 0) + (performance.now() - t0);
        counts.garbled += end.garbled;
        if (end.status === "hang") counts.hangs++;
        if (end.status === "reset") resets[end.message] = (resets[end.message] ?? 0) + 1;
        if (end.message.includes("ENHANCE_YOUR_CALM")) {
          // The global's HTTP/2 layer refuses this connection's streams (too many resets) without a GOAWAY: open another.
          connections[slot]?.destroy();
          connections[slot] = undefined;
        }
        if (end.status === "ok" && end.goaway === undefined) {
          const why = plan.peerGoaway
            ? "peer goaway"
            : plan.ending === "eof"
              ? "peer eof"
              : "unexplained";
          okWithoutGoaway[why]++;
          if (why === "unexplained" && okSamples.length < 10)
            okSamples.push(
              `${plan.family} (${plan.protocol}, ending ${plan.ending}, ${plan.frames} frames, ${end.framesReceived} received, ${Math.round(performance.now() - t0)} ms)`,
            );
        }
        if (performance.now() - lastLog > 5_000) {
          lastLog = performance.now();
          scan(global, "global");
          if (zone !== undefined) scan(zone, "zone");
          log(
            `${counts.sessions} sessions, ${counts.mutated} mutated frames of ${counts.frames}; resets ${JSON.stringify(resets)}; RSS ${rss.end.toFixed(0)} MiB (peak ${rss.peak.toFixed(0)}); sync ${sync.delivered}/${sync.probes} (max ${sync.maxLagMs.toFixed(0)} ms)`,
          );
        }
      }
    };
    await Promise.all(Array.from({ length: options.concurrency ?? 8 }, (_, w) => worker(w)));
    for (const c of connections) c?.close();
    log("fuzz done; letting the global settle");

    // One more probe round after the fuzz, then settle and measure.
    await sleep(3_000);
    stop.abort();
    await probing;
    clearInterval(sampler);
    const crashed = global.child.exitCode !== null;
    const metricsAfter = crashed ? undefined : await scrape(adminUrl);
    const delta = (name: string, label: string): Record<string, number> => {
      const out: Record<string, number> = {};
      if (metricsAfter === undefined) return out;
      for (const m of metricsAfter.samples(name)) {
        const key = m.labels[label] ?? "";
        const was = metricsBefore.value(name, { [label]: key });
        if ((m.value ?? 0) - was > 0) out[key] = (m.value ?? 0) - was;
      }
      return out;
    };
    const server = {
      framesReceived: delta("kds_mux_frames_total", "direction").received ?? 0,
      sessionsClosed: delta("kds_sessions_closed_total", "code"),
      admissions: delta("kds_admissions_total", "result"),
    };
    const afterSettle = rssMiB(pid) ?? 0;
    let after = new Map<string, AdminResource>();
    const changed: string[] = [];
    const hostileAdded: Record<string, number> = {};
    if (!crashed) {
      after = await snapshot(adminUrl);
      const hostile = (r: AdminResource): boolean =>
        hostileNames.some((h) => r.labels["kds.io/zone"] === h);
      const ours = (key: string): boolean =>
        key === "TrafficPolicy/default/fuzz-probe" ||
        key === `Dataplane/default/${GOOD_ZONE}.probe`;
      for (const [key, was] of before) {
        const now = after.get(key);
        if (ours(key)) continue;
        if (now === undefined) changed.push(`${key}: deleted`);
        else if (now.version !== was.version)
          changed.push(`${key}: version ${was.version} -> ${now.version}`);
      }
      for (const [key, now] of after) {
        if (before.has(key)) continue;
        if (hostile(now) && now.type === "Dataplane")
          hostileAdded[now.type] = (hostileAdded[now.type] ?? 0) + 1;
        else changed.push(`${key}: created (labels ${JSON.stringify(now.labels)})`);
      }
    }
    scan(global, "global");
    scan(zone, "zone");
    return {
      seed: options.seed,
      seconds: (performance.now() - started) / 1000,
      sessions: counts.sessions,
      framesSent: counts.frames,
      mutatedFrames: counts.mutated,
      corpus: corpusKinds(corpus),
      families,
      mutations: planner.mutations,
      endReasons,
      endMeanMs: Object.fromEntries(
        Object.entries(endMs).map(([k, ms]) => [k, Math.round(ms / (endReasons[k] ?? 1))]),
      ),
      okWithoutGoaway,
      okWithoutGoawaySamples: okSamples,
      hangs: counts.hangs,
      garbledBytes: counts.garbled,
      server,
      resets,
      connectionGoaways,
      crashed,
      alarmingLogLines: alarming,
      rss: {
        startMiB: rss.start,
        peakMiB: rss.peak,
        endMiB: rss.end,
        afterSettleMiB: afterSettle,
        samples: rss.samples,
      },
      sync: {
        probes: sync.probes,
        delivered: sync.delivered,
        failed: sync.failed,
        maxLagMs: sync.maxLagMs,
        meanLagMs: sync.delivered === 0 ? 0 : sync.totalLagMs / sync.delivered,
      },
      store: { before: before.size, after: after.size, changed, hostileAdded },
    };
  } finally {
    stop.abort();
    await zone?.stop();
    await global.stop();
  }
}

/** The global's metrics (the admin listener serves /metrics). */
async function scrape(url: string): Promise<Scrape> {
  return parseMetrics(await (await fetch(`${url}/metrics`)).text());
}

/** Calls `check` every 100 ms until it is true; false after `timeoutMs`. */
async function poll(check: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await check().catch(() => false)) return true;
    if (performance.now() > deadline) return false;
    await sleep(100);
  }
}

/** Snapshots the store until `ready` accepts it (the setup's writes have landed). */
async function waitStable(
  url: string,
  ready: (m: Map<string, AdminResource>) => boolean,
): Promise<Map<string, AdminResource>> {
  const deadline = performance.now() + 60_000;
  for (;;) {
    const m = await snapshot(url);
    if (ready(m)) return m;
    if (performance.now() > deadline)
      throw new Error(
        `the global's store never held the setup's resources; it holds ${[...m.keys()].join(", ")}`,
      );
    await sleep(200);
  }
}

/** The report as markdown lines (for docs/hostile.md and the console). */
export function formatReport(r: FuzzReport): string {
  const table = (rows: Record<string, number>): string =>
    Object.entries(rows)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `| ${k} | ${v} |`)
      .join("\n");
  return [
    `- seed ${r.seed}, ${r.seconds.toFixed(0)} s, ${r.sessions} hostile sessions`,
    `- frames sent: ${r.framesSent} (${r.mutatedFrames} mutated or out of place)`,
    `- crashes: ${r.crashed ? 1 : 0}; hangs (session not ended within the timeout): ${r.hangs}; unparsable response bytes: ${r.garbledBytes}`,
    `- global RSS: start ${r.rss.startMiB.toFixed(0)} MiB, peak ${r.rss.peakMiB.toFixed(0)} MiB, end ${r.rss.endMiB.toFixed(0)} MiB, after settling ${r.rss.afterSettleMiB.toFixed(0)} MiB (${r.rss.samples} samples)`,
    `- honest zone sync: ${r.sync.delivered}/${r.sync.probes} probes delivered (failed ${r.sync.failed}), lag mean ${r.sync.meanLagMs.toFixed(0)} ms, max ${r.sync.maxLagMs.toFixed(0)} ms`,
    `- store: ${r.store.before} resources before, ${r.store.after} after; changed: ${r.store.changed.length === 0 ? "none" : r.store.changed.join("; ")}; added by hostile zones: ${JSON.stringify(r.store.hostileAdded)}`,
    `- the global's metrics: ${r.server.framesReceived} mux frames decoded and dispatched; sessions closed after hello by code ${JSON.stringify(r.server.sessionsClosed)}; admissions ${JSON.stringify(r.server.admissions)}`,
    `- sessions ended with OK and no goaway: ${r.okWithoutGoaway["peer goaway"]} after the peer's own goaway, ${r.okWithoutGoaway["peer eof"]} after the peer half-closed an open session, ${r.okWithoutGoaway.unexplained} after a protocol error (findings)${r.okWithoutGoawaySamples.length > 0 ? ` (e.g. ${r.okWithoutGoawaySamples.slice(0, 3).join("; ")})` : ""}`,
    `- stream resets by cause: ${JSON.stringify(r.resets)}; HTTP/2 connection GOAWAYs from the global by error code: ${JSON.stringify(r.connectionGoaways)}`,
    `- alarming log lines: ${r.alarmingLogLines.length === 0 ? "none" : r.alarmingLogLines.slice(0, 5).join(" | ")}`,
    "",
    "| end reason (goaway / status) | sessions | mean time to end |",
    "| --- | --- | --- |",
    Object.entries(r.endReasons)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `| ${k} | ${v} | ${r.endMeanMs[k] ?? 0} ms |`)
      .join("\n"),
    "",
    "| session family | sessions |",
    "| --- | --- |",
    table(r.families),
  ].join("\n");
}
