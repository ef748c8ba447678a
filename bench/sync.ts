// Initial sync of N resources global -> zone (SotW vs delta) over gRPC on
// loopback, the zone in its own process (bench/sync-zone.ts): once the global
// serves all of them (as a deployed global has long loaded its resources when
// a zone connects), time from the zone dialing until it holds all of them,
// and bytes on the wire; then resume after a reconnect with 0.1% changed.
// Run alone (a fresh process, as `npm run bench` does):
// `npx tsx bench/sync.ts 100000 delta time memory`.
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
import { childNodeArgs, isMain } from "./fresh.ts";
import { SKIPPED } from "./summary.ts";

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
  // SotW cannot split a set: give it room for the whole set in one message.
  const maxMessageBytes = mode === "sotw" ? 256 * 1024 * 1024 : 4 * 1024 * 1024;
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
    discovery: { maxMessageBytes: maxMessageBytes - 16 * 1024 },
  });
  global.start(stop.signal);
  const served = await serveGlobal(global.server);
  const token = (await global.tokens.issueZoneToken("zone-1")).token; // the zone proves its name, as deployed
  const child = spawn(
    process.execPath,
    [
      ...childNodeArgs(),
      "--import",
      "tsx",
      fileURLToPath(new URL("./sync-zone.ts", import.meta.url)),
      served.url,
      mode,
      String(maxMessageBytes),
      count ? "count" : "time",
      token,
    ],
    {
      stdio: ["pipe", "pipe", "inherit"],
    },
  );
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const ask = async (command: unknown): Promise<Record<string, number>> => {
    child.stdin.write(`${JSON.stringify(command)}\n`);
    const r = await lines.next();
    if (r.done === true) throw new Error("the zone process ended early");
    return JSON.parse(r.value) as Record<string, number>;
  };
  try {
    await global.registerZone("zone-1");
    await writePolicies(global, n);
    const catchUpMs = await untilServed(global, n);
    const initial = await ask({ start: { total: n } });
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
    const resume = await ask({
      start: { total: n, changedName: `policy-${changed - 1}`, changedValue: 2000 },
    });
    await ask({ stop: true });
    return {
      resources: n,
      store: storeKind,
      mode,
      catchUpMs,
      initialMs: initial.done as number,
      initialZoneCpuMs: initial.cpuMs as number,
      initialBytes: initial.bytes as number,
      resumeChanged: changed,
      resumeMs: resume.done as number,
      resumeZoneCpuMs: resume.cpuMs as number,
      resumeBytes: resume.bytes as number,
      resumeResources: resume.resources as number,
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
