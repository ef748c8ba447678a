// The benchmarks' own profiler, through the inspector of this process, so a
// profile covers only the phase that asks for it (not the start-up or the
// connecting): a V8 CPU profile, or with KDS_BENCH_HEAP_SAMPLING=1 a sampling
// heap profile of every allocation, or with KDS_BENCH_HEAP_SAMPLING=survivors
// one of only what no scavenge collected (promoted to the old generation, or
// still live), including what a full collection took later: without those the
// promoted garbage a full collection freed was not in the profile.
// KDS_BENCH_CPU_PROFILE_INTERVAL_US sets the CPU profile's sampling interval
// (V8's default is 1,000 µs).
import { writeFileSync } from "node:fs";
import { Session as InspectorSession } from "node:inspector/promises";

/** Whether KDS_BENCH_HEAP_SAMPLING asks for a heap profile instead of a CPU profile. */
export function heapSampling(): boolean {
  const heap = process.env.KDS_BENCH_HEAP_SAMPLING;
  return heap === "1" || heap === "survivors";
}

/**
 * Starts a profile of this process when `file` is given (see the top of this
 * file for which); the returned function stops it and writes it to `file`.
 */
export async function profileOf(
  file: string | undefined,
): Promise<(() => Promise<void>) | undefined> {
  if (file === undefined || file === "") return undefined;
  const session = new InspectorSession();
  session.connect();
  if (heapSampling()) {
    await session.post("HeapProfiler.enable");
    await session.post("HeapProfiler.startSampling", {
      samplingInterval: 4096,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: process.env.KDS_BENCH_HEAP_SAMPLING === "1",
    });
    return async () => {
      const { profile } = await session.post("HeapProfiler.stopSampling");
      writeFileSync(file, JSON.stringify(profile));
      session.disconnect();
    };
  }
  await session.post("Profiler.enable");
  const intervalUs = Number(process.env.KDS_BENCH_CPU_PROFILE_INTERVAL_US ?? 0);
  if (intervalUs > 0) await session.post("Profiler.setSamplingInterval", { interval: intervalUs });
  await session.post("Profiler.start");
  return async () => {
    const { profile } = await session.post("Profiler.stop");
    writeFileSync(file, JSON.stringify(profile));
    session.disconnect();
  };
}
