// npm run fuzz [-- --frames N --duration SECONDS --seed S --concurrency C --json FILE]:
// the full hostile-peer fuzz (default: 100,000 mutated frames, at most 30 minutes)
// against a real `kds-mux global` process; prints the report (docs/hostile.md
// explains it). Exits 1 when a check fails: a crash, a hang, a session ended
// with OK and no goaway after a protocol error, a store change, or a sync probe that never arrived.
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { formatReport, runFuzz } from "./fuzz.ts";

const { values } = parseArgs({
  options: {
    frames: { type: "string", default: "100000" },
    duration: { type: "string", default: "1800" },
    seed: { type: "string", default: String(Date.now() % 1_000_000) },
    concurrency: { type: "string", default: "8" },
    json: { type: "string" },
  },
});
const report = await runFuzz({
  frames: Number(values.frames),
  durationMs: Number(values.duration) * 1000,
  seed: Number(values.seed),
  concurrency: Number(values.concurrency),
  log: (line) => void process.stderr.write(`${line}\n`),
});
console.log(formatReport(report));
if (values.json !== undefined) writeFileSync(values.json, `${JSON.stringify(report, null, 2)}\n`);
const failed =
  report.crashed ||
  report.hangs > 0 ||
  report.okWithoutGoaway.unexplained > 0 ||
  report.store.changed.length > 0 ||
  report.sync.failed > 0 ||
  report.garbledBytes > 0;
process.exit(failed ? 1 : 0);
