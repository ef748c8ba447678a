// CPU time and garbage-collection time of this process over a phase of a
// scenario: on a loaded machine wall-clock times swing with the other
// processes, the process's own CPU time (user + system, every thread) and the
// time V8 spent collecting far less, so these say where a slow run's time went.
import { PerformanceObserver } from "node:perf_hooks";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

/**
 * Collects this process's garbage before a timed phase, so the phase does
 * not pay for what came before it (module loading, the writes that set the
 * scenario up): a deployed global has long collected its loading garbage
 * when a zone connects.
 */
export function settle(): void {
  for (let i = 0; i < 3; i++) gc();
}

let gcMs = 0;
let gcCount = 0;
let observer: PerformanceObserver | undefined;

function count(entries: readonly { readonly duration: number }[]): void {
  for (const entry of entries) {
    gcMs += entry.duration;
    gcCount++;
  }
}

/** Starts counting this process's GC pauses (idempotent). */
function observeGc(): void {
  if (observer !== undefined) return;
  observer = new PerformanceObserver((list) => count(list.getEntries()));
  observer.observe({ entryTypes: ["gc"] });
}

/** What one phase cost this process. */
export interface PhaseCost {
  /** Wall-clock time. */
  readonly wallMs: number;
  /** User + system CPU time of the process (every thread: the GC's helpers and libuv's too). */
  readonly cpuMs: number;
  /** Time in GC pauses (V8's `gc` performance entries). */
  readonly gcMs: number;
  /** GC pauses. */
  readonly gcs: number;
  /** Heap used at the phase's end, MiB. */
  readonly heapMiB: number;
}

/**
 * Starts a phase; the function it returns ends it and says what it cost. Node
 * makes a GC's performance entry on a later turn of the event loop, which a
 * phase of promise chains may not have given it, so ending waits two turns
 * (after taking the times) before it counts the pauses.
 */
export function phase(): () => Promise<PhaseCost> {
  observeGc();
  const wall0 = performance.now();
  const cpu0 = process.cpuUsage();
  const gc0 = gcMs;
  const count0 = gcCount;
  return async () => {
    const wallMs = performance.now() - wall0;
    const cpu = process.cpuUsage(cpu0);
    for (let i = 0; i < 2; i++) await new Promise((r) => setImmediate(r));
    // The observer's callback may not have run yet: take what is buffered.
    if (observer !== undefined) count(observer.takeRecords());
    return {
      wallMs,
      cpuMs: (cpu.user + cpu.system) / 1000,
      gcMs: gcMs - gc0,
      gcs: gcCount - count0,
      heapMiB: process.memoryUsage().heapUsed / 2 ** 20,
    };
  };
}

/** This process's CPU time since it started, ms (module loading and the JIT's first work included). */
export function cpuSinceStartMs(): number {
  const cpu = process.cpuUsage();
  return (cpu.user + cpu.system) / 1000;
}
