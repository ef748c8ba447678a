// What touching one zone's state costs when a change visits every zone in
// turn: per zone a Map from type URL to counters (as the sync status keeps),
// read and bumped once per visit, the zones visited in a shuffled order
// among other live objects, as a change to N zones visits N zones' state
// in the global. Prints, per count of zones, the median over the
// repetitions of the ns per visit. With one zone the state stays in the
// CPU's caches; with thousands each visit finds it gone, which is why no
// single line of a 10,000-zone profile stands out (docs/performance.md,
// "Where a change's time goes"). Not part of `npm run bench`.
//
//   node --import ./bench/loader/register.mjs bench/cold-state.ts 7
import { spreadOf } from "./summary.ts";

const repetitions = Number(process.argv[2] ?? 7);
const TYPE_URL = "type.googleapis.com/kds.v1.KdsResource";
/** Visits per timed pass, whatever the count of zones. */
const VISITS = 2_000_000;

interface Counters {
  acked: number;
  session: { acked: number };
}

/** Nanoseconds per visit over `zones` zones' maps, VISITS visits in all. */
function time(zones: number): number {
  const maps: Map<string, Counters>[] = [];
  // Other objects allocated between the zones' maps, as a global's heap has (its streams, sessions, buffers).
  const between: unknown[] = [];
  for (let i = 0; i < zones; i++) {
    maps.push(new Map([[TYPE_URL, { acked: 0, session: { acked: 0 } }]]));
    for (let j = 0; j < 20; j++) between.push({ i, j, list: [i, j] });
  }
  const order = maps.map((_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [order[i], order[j]] = [order[j] as number, order[i] as number];
  }
  const passes = Math.max(1, Math.round(VISITS / zones));
  let sum = 0;
  const start = performance.now();
  for (let p = 0; p < passes; p++) {
    for (const i of order) {
      const counters = (maps[i] as Map<string, Counters>).get(TYPE_URL) as Counters;
      counters.acked++;
      counters.session.acked++;
      sum += counters.acked;
    }
  }
  const ns = ((performance.now() - start) * 1e6) / (passes * zones);
  if (sum <= 0 || between.length !== zones * 20) throw new Error("the visits did not run");
  return ns;
}

console.log(`ns per visit of one zone's state (median of ${repetitions})`);
console.log("| zones | ns |");
console.log("|---:|---:|");
for (const zones of [1, 100, 1_000, 10_000, 100_000]) {
  const runs: number[] = [];
  for (let r = 0; r < repetitions; r++) runs.push(time(zones));
  console.log(`| ${zones} | ${spreadOf(runs).median.toFixed(1)} |`);
}
