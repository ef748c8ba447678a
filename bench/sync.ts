// Initial sync of N resources global -> zone (SotW vs delta) over gRPC on
// loopback, the zone in its own process (bench/sync-zone.ts): once the global
// serves all of them (as a deployed global has long loaded its resources when
// a zone connects), time from the zone dialing until it holds all of them,
// and bytes on the wire; then resume after a reconnect with 0.1% changed.
// Both processes collect their garbage (untimed) before the zone dials, and
// each phase's CPU and GC time is reported beside its wall clock
// (bench/cpu-phase.ts). Run alone (a fresh process, as `npm run bench` does):
// `node --import ./bench/loader/register.mjs bench/sync.ts 100000 delta time memory`.
import { create } from "@bufbuild/protobuf";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { serveGlobal } from "../src/adapters/node/serve-global.ts";
import { TrafficPolicySpecSchema, exampleTypes } from "../examples/example-kinds/index.ts";
import { GlobalControlPlane } from "../src/global/global-control-plane.ts";
import { silentLogger } from "../src/log.ts";
import { createTypeRegistry } from "../src/kinds/builtin-types.ts";
import type { WriteOp } from "../src/store/contract.ts";
import { openDatabase, openStore, type StoreKind } from "./bench-store.ts";
import { childNodeArgs, isMain, BENCH_LOADER } from "./fresh.ts";
import { SKIPPED } from "./summary.ts";
import { phase, settle, type PhaseCost } from "./cpu-phase.ts";

export interface SyncResult {
  readonly resources: number;
  /** The global's store. */
  readonly store: StoreKind;
  readonly mode: "sotw" | "delta";
  /** From the last write until the global serves all `resources` (its snapshot cache caught up); not part of `initialMs`. */
  readonly catchUpMs: number;
  /** From the zone dialing (the global serving all `resources`) until the zone holds all of them. */
  readonly initialMs: number;
  /** The zone process's CPU time (user + system, every thread) over `initialMs`: steadier than wall time on a loaded machine. */
  readonly initialZoneCpuMs: number;
  readonly initialBytes: number;
  readonly resumeChanged: number;
  readonly resumeMs: number;
  /** The zone process's CPU time over `resumeMs`. */
  readonly resumeZoneCpuMs: number;
  readonly resumeBytes: number;
  readonly resumeResources: number;
  /** Where the time went, per process and phase (CPU and GC time beside the wall clock; bench/cpu-phase.ts). */
  readonly phases: SyncPhases;
}

/** CPU and GC time of the sync's phases in the global's process and the zone's. */
export interface SyncPhases {
  /** The global: writing the `resources` (memory store: in this process), its catch-up, serving the initial sync, the resume. */
  readonly global: {
    readonly write: PhaseCost;
    readonly catchUp: PhaseCost;
    readonly initial: PhaseCost;
    readonly resume: PhaseCost;
  };
  /** The zone: CPU time spent starting (module loading) before it dialed; the initial sync; the resume. */
  readonly zone: {
    readonly startupCpuMs: number;
    readonly initial: PhaseCost;
    readonly resume: PhaseCost;
  };
}

/** `n` policies, written in transactions of 1,000. */
async function writePolicies(global: GlobalControlPlane, n: number): Promise<void> {
  for (let from = 0; from < n; from += 1_000) {
    const ops: WriteOp[] = [];
    for (let i = from; i < Math.min(n, from + 1_000); i++) {
      ops.push({
        op: "put",
        input: {
          kind: "TrafficPolicy",
          mesh: "default",
          name: `policy-${i}`,
          spec: create(TrafficPolicySpecSchema, {
            services: [`svc-${i % 100}`],
            timeoutMs: 1000,
            retries: 2,
          }),
        },
      });
    }
    await global.store.apply(ops);
  }
}

/** How long the global may take to serve what was written before the bench gives up. */
const CATCH_UP_LIMIT_MS = 300_000;

/** Waits until the global serves `n` TrafficPolicies; returns how long that took. */
async function untilServed(global: GlobalControlPlane, n: number): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    const policies = global.sync.served().find((s) => s.kind === "TrafficPolicy");
    if (policies?.loaded === true && policies.resources >= n) return performance.now() - t0;
    const waited = performance.now() - t0;
    if (waited > CATCH_UP_LIMIT_MS)
      throw new Error(
        `the global serves ${policies?.resources ?? 0} of ${n} policies after ${Math.round(waited)} ms (${policies?.error ?? "no store error"})`,
      );
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * Runs one initial sync + resume of `n` resources in `mode`, the zone in its
 * own process, the global on `storeKind`; `count` adds a wire tally (and its
 * encoding cost). The string when the store is the PostgreSQL server and none answers.
 */
export async function syncBench(
  n: number,
  mode: "sotw" | "delta",
  count: boolean,
  storeKind: StoreKind = "memory",
): Promise<SyncResult | typeof SKIPPED> {
  // SotW cannot split a set: give it room for the whole set in one message, in bytes and in resources
  // (over maxResponseResources, 10,000 by default, the global reports the set as oversized and sends nothing).
  const maxMessageBytes = mode === "sotw" ? 256 * 1024 * 1024 : 4 * 1024 * 1024;
  const maxResponseResources = mode === "sotw" ? Math.max(10_000, n) : undefined;
  const database = storeKind === "memory" ? undefined : await openDatabase(storeKind);
  if (storeKind !== "memory" && database === undefined) return SKIPPED;
  const types = createTypeRegistry(exampleTypes);
  const store = await openStore(types, database, Math.max(100_000, 2 * n));
  const stop = new AbortController();
  const global = new GlobalControlPlane({
    types,
    store,
    logger: silentLogger,
    session: { maxMessageBytes },
    discovery: { maxMessageBytes: maxMessageBytes - 16 * 1024, maxResponseResources },
  });
  global.start(stop.signal);
  const served = await serveGlobal(global.server);
  const token = (await global.tokens.issueZoneToken("zone-1")).token; // the zone proves its name, as deployed
  const child = spawn(
    process.execPath,
    [
      ...childNodeArgs(),
      "--import",
      BENCH_LOADER,
      fileURLToPath(new URL("./sync-zone.ts", import.meta.url)),
      served.url,
      mode,
      String(maxMessageBytes),
      count ? "count" : "time",
      token,
      String(maxResponseResources ?? ""),
    ],
    {
      stdio: ["pipe", "pipe", "inherit"],
    },
  );
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  interface Answer {
    done: number;
    cpuMs: number;
    bytes: number;
    resources: number;
    phase: PhaseCost;
    startupCpuMs: number;
  }
  const ask = async (command: unknown): Promise<Answer> => {
    child.stdin.write(`${JSON.stringify(command)}\n`);
    const r = await lines.next();
    if (r.done === true) throw new Error("the zone process ended early");
    return JSON.parse(r.value) as Answer;
  };
  try {
    await global.registerZone("zone-1");
    let end = phase();
    await writePolicies(global, n);
    const write = await end();
    end = phase();
    const catchUpMs = await untilServed(global, n);
    const catchUp = await end();
    settle(); // untimed: the zone process settles too before it dials
    end = phase("global-initial");
    const initial = await ask({ start: { total: n } });
    const initialGlobal = await end();
    await ask({ stop: true });
    const changed = Math.max(1, Math.round(n / 1000));
    for (let i = 0; i < changed; i++) {
      await global.store.put({
        kind: "TrafficPolicy",
        mesh: "default",
        name: `policy-${i}`,
        spec: create(TrafficPolicySpecSchema, { services: ["changed"], timeoutMs: 2000 }),
      });
    }
    end = phase("global-resume");
    const resume = await ask({
      start: { total: n, changedName: `policy-${changed - 1}`, changedValue: 2000 },
    });
    const resumeGlobal = await end();
    await ask({ stop: true });
    return {
      resources: n,
      store: storeKind,
      mode,
      catchUpMs,
      initialMs: initial.done,
      initialZoneCpuMs: initial.cpuMs,
      initialBytes: initial.bytes,
      resumeChanged: changed,
      resumeMs: resume.done,
      resumeZoneCpuMs: resume.cpuMs,
      resumeBytes: resume.bytes,
      resumeResources: resume.resources,
      phases: {
        global: { write, catchUp, initial: initialGlobal, resume: resumeGlobal },
        zone: { startupCpuMs: initial.startupCpuMs, initial: initial.phase, resume: resume.phase },
      },
    };
  } finally {
    child.stdin.end(`${JSON.stringify({ exit: true })}\n`);
    await new Promise((r) => child.once("exit", r));
    stop.abort();
    await served.close();
    await store.close?.();
    await database?.close();
  }
}

if (isMain(import.meta.url)) {
  const [n, mode, count, storeKind] = process.argv.slice(2) as [
    string,
    "sotw" | "delta",
    "count" | "time",
    StoreKind,
  ];
  const result = await syncBench(Number(n), mode, count === "count", storeKind);
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(0);
}
