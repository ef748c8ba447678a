// What reading whether a signal aborted costs when a process holds many
// signals, as a global holds one or more per zone: `signal.aborted` against
// isAborted (src/util/abort.ts), which calls the prototype's getter directly.
// On Node 20 every AbortSignal has a hidden class of its own (V8's
// %HaveSameMap, under --allow-natives-syntax, is false for two new signals
// there and true on Node 22), so the property read misses V8's lookup
// caches once a path sees thousands of them.
// Prints, per count of signals, the median over the repetitions of the
// nanoseconds per read for each way; not part of `npm run bench`.
//
//   node --import ./bench/loader/register.mjs bench/abort-read.ts 10000 7
//   npx bun bench/abort-read.ts 10000 7; npx deno run bench/abort-read.ts 10000 7
import { isAborted } from "../src/util/abort.ts";
import { spreadOf } from "./summary.ts";

const largest = Number(process.argv[2] ?? 10_000);
const repetitions = Number(process.argv[3] ?? 7);
/** Reads per timed pass, whatever the count of signals. */
const READS = 3_000_000;

/** Nanoseconds per read of `read` over `signals`, READS reads in all. */
function time(signals: readonly AbortSignal[], read: (s: AbortSignal) => boolean): number {
  const passes = Math.max(1, Math.round(READS / signals.length));
  let seen = 0;
  const start = performance.now();
  for (let p = 0; p < passes; p++) for (const s of signals) if (read(s)) seen++;
  const ns = ((performance.now() - start) * 1e6) / (passes * signals.length);
  if (seen !== 0) throw new Error("a signal that never aborted read as aborted");
  return ns;
}

const rows: { signals: number; property: number; isAborted: number }[] = [];
for (const count of [1, 100, 1_000, largest]) {
  const signals = Array.from({ length: count }, () => new AbortController().signal);
  const property: number[] = [];
  const getter: number[] = [];
  for (let r = 0; r < repetitions; r++) {
    // Interleaved, so a slow moment of the machine falls on both.
    property.push(time(signals, (s) => s.aborted));
    getter.push(time(signals, isAborted));
  }
  rows.push({
    signals: count,
    property: spreadOf(property).median,
    isAborted: spreadOf(getter).median,
  });
}
const runtime = globalThis as { Bun?: { version: string }; Deno?: { version: { deno: string } } };
const name =
  runtime.Bun !== undefined
    ? `Bun ${runtime.Bun.version}`
    : runtime.Deno !== undefined
      ? `Deno ${runtime.Deno.version.deno}`
      : `Node ${process.version}`;
console.log(`${name}, ns per read (median of ${repetitions})`);
console.log("| signals | signal.aborted | isAborted |");
console.log("|---:|---:|---:|");
for (const r of rows)
  console.log(`| ${r.signals} | ${r.property.toFixed(1)} | ${r.isAborted.toFixed(1)} |`);
