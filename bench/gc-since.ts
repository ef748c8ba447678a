// What the collector did since the last look: a diagnostic the fan-out's
// global (bench/fanout.ts) and its zone processes (bench/fanout-zones.ts)
// print per change under KDS_BENCH_TRACE.
import { constants, PerformanceObserver } from "node:perf_hooks";

/**
 * Follows this process's garbage collections from now (for the rest of the
 * process: each fan-out process is one of its own); each call of the
 * returned function says what happened since its last call (count, total
 * and longest pause, in ms) and starts over. A diagnostic for
 * KDS_BENCH_TRACE.
 */
export function gcSince(): () => string {
  let count = 0;
  let major = 0;
  let total = 0;
  let longest = 0;
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      count++;
      // Node's kinds (perf_hooks constants): 1 a scavenge (minor), 4 a mark-compact (major), 8 incremental marking, 16 weak callbacks.
      const { detail } = entry as unknown as { detail?: { kind?: number } };
      if (detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR) major++;
      total += entry.duration;
      longest = Math.max(longest, entry.duration);
    }
  });
  observer.observe({ entryTypes: ["gc"] });
  return () => {
    const said = `${count} collections of which ${major} major, ${Math.round(total)} ms, longest ${Math.round(longest)} ms`;
    count = 0;
    major = 0;
    total = 0;
    longest = 0;
    return said;
  };
}
