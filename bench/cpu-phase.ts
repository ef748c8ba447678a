// CPU time and garbage-collection time of this process over a phase of a
// scenario: on a loaded machine wall-clock times swing with the other
// processes, the process's own CPU time (user + system, every thread) and the
// time V8 spent collecting far less, so these say where a slow run's time went.
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector";
import { join } from "node:path";
import { PerformanceObserver, constants } from "node:perf_hooks";
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
let majorMs = 0;
let majors = 0;
let observer: PerformanceObserver | undefined;
/**
 * When the latest phase started (performance.now()). Node reports a pause
 * from a callback after it, so the collections `settle` forces just before a
 * phase arrived within the phase and were counted in it (the global's 100k
 * sync had 4 major collections and 510 ms of pauses that were settle's);
 * a pause that began before the phase is not counted.
 */
let countFrom = 0;

function count(
  entries: readonly {
    readonly startTime: number;
    readonly duration: number;
    readonly detail?: unknown;
  }[],
): void {
  for (const entry of entries) {
    if (entry.startTime < countFrom) continue;
    gcMs += entry.duration;
    gcCount++;
    if (
      (entry.detail as { kind?: number } | undefined)?.kind === constants.NODE_PERFORMANCE_GC_MAJOR
    ) {
      majorMs += entry.duration;
      majors++;
    }
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
  /** Of `gcMs`, the time in pauses of full (mark-compact) collections. */
  readonly gcMajorMs: number;
  /** Of `gcs`, the full collections. */
  readonly gcMajors: number;
  /** Heap used at the phase's end, MiB. */
  readonly heapMiB: number;
  /**
   * CPU time of the main thread (JavaScript, the GC's main-thread part,
   * HTTP/2) and of every other thread together (V8's helpers: concurrent and
   * parallel GC, compilation; libuv's pool) over the phase, from Linux's
   * /proc in 10 ms ticks; absent elsewhere.
   */
  readonly threadCpuMs?: { readonly main: number; readonly others: number };
}

/** This process's CPU time so far on its main thread and on the others, ms (undefined without /proc). */
function threadCpuMs(): { main: number; others: number } | undefined {
  let tasks: string[];
  try {
    tasks = readdirSync("/proc/self/task");
  } catch {
    return undefined; // not Linux: no per-thread figures, said by their absence
  }
  const out = { main: 0, others: 0 };
  for (const task of tasks) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/self/task/${task}/stat`, "utf8");
    } catch {
      continue; // the thread ended between the listing and the read
    }
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // utime and stime, fields 14 and 15 of stat(5) (11 and 12 after the name and state), in 100 Hz ticks.
    const ms = (Number(fields[11]) + Number(fields[12])) * 10;
    // The main thread's id is the process's (every thread of Node 20 is named "node").
    if (Number(task) === process.pid) out.main += ms;
    else out.others += ms;
  }
  return out;
}

/** `KDS_BENCH_PHASE_PROFILE`: a directory for CPU profiles of the phases that name one. */
const profileDir = process.env.KDS_BENCH_PHASE_PROFILE;

/**
 * Starts V8's CPU profiler in this process (the inspector, same thread) and
 * returns what stops it and writes `<dir>/<name>.<pid>.cpuprofile`. The main
 * thread's session answers synchronously, so the profile starts here.
 */
function startProfile(dir: string, name: string): () => void {
  const session = new Session();
  session.connect();
  const fail = (error: Error | null): void => {
    if (error !== null) throw error;
  };
  session.post("Profiler.enable", fail);
  session.post("Profiler.setSamplingInterval", { interval: 250 }, fail);
  session.post("Profiler.start", fail);
  return () => {
    session.post("Profiler.stop", (error, result) => {
      fail(error);
      writeFileSync(join(dir, `${name}.${process.pid}.cpuprofile`), JSON.stringify(result.profile));
      session.disconnect();
    });
  };
}

/**
 * Starts a phase; the function it returns ends it and says what it cost. Node
 * makes a GC's performance entry on a later turn of the event loop, which a
 * phase of promise chains may not have given it, so ending waits two turns
 * (after taking the times) before it counts the pauses. With
 * `KDS_BENCH_PHASE_PROFILE` set to a directory, a phase given `profileAs` is
 * CPU-profiled (sampling every 250 µs) into `<dir>/<profileAs>.<pid>.cpuprofile`;
 * the profiler's own cost is then in the phase's figures.
 */
export function phase(profileAs?: string): () => Promise<PhaseCost> {
  observeGc();
  const stopProfile =
    profileDir === undefined || profileAs === undefined
      ? undefined
      : startProfile(profileDir, profileAs);
  const threads0 = threadCpuMs();
  const wall0 = performance.now();
  countFrom = wall0;
  const cpu0 = process.cpuUsage();
  const gc0 = gcMs;
  const count0 = gcCount;
  const major0 = majorMs;
  const majors0 = majors;
  return async () => {
    const wallMs = performance.now() - wall0;
    const cpu = process.cpuUsage(cpu0);
    const threads1 = threadCpuMs();
    stopProfile?.();
    for (let i = 0; i < 2; i++) await new Promise((r) => setImmediate(r));
    // The observer's callback may not have run yet: take what is buffered.
    if (observer !== undefined) count(observer.takeRecords());
    return {
      wallMs,
      cpuMs: (cpu.user + cpu.system) / 1000,
      gcMs: gcMs - gc0,
      gcs: gcCount - count0,
      gcMajorMs: majorMs - major0,
      gcMajors: majors - majors0,
      heapMiB: process.memoryUsage().heapUsed / 2 ** 20,
      ...(threads0 === undefined || threads1 === undefined
        ? {}
        : {
            threadCpuMs: {
              main: threads1.main - threads0.main,
              others: threads1.others - threads0.others,
            },
          }),
    };
  };
}

/** This process's CPU time since it started, ms (module loading and the JIT's first work included). */
export function cpuSinceStartMs(): number {
  const cpu = process.cpuUsage();
  return (cpu.user + cpu.system) / 1000;
}
