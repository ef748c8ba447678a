// `npm test`: runs every check and test suite in turn, each under a header,
// keeps going when one fails (so the log shows which suites ran and which
// failed, instead of `&&` hiding everything after the first failure), then
// prints a summary table and exits 1 if any step failed.
//
//   node scripts/test-all.mjs              every step
//   node scripts/test-all.mjs vitest bun   only the named steps, in this order
//
// Each step is an npm script from package.json, bounded by STEP_TIMEOUT_MS
// (its whole process group is killed when it runs over, and it counts as failed).
import { spawn } from "node:child_process";

/** name shown in the log -> npm script it runs. */
const STEPS = [
  ["lint", "lint"],
  ["check:gen", "check:gen"],
  ["exports", "check:exports"],
  ["layers", "check:layers"],
  ["api", "check:api"],
  ["package", "check:package"],
  ["typecheck", "typecheck"],
  ["bench", "test:bench"],
  ["vitest", "test:node"],
  ["deno", "test:deno"],
  ["bun", "test:bun"],
  ["matrix", "test:matrix"],
  ["browser", "test:browser"],
];
const STEP_TIMEOUT_MS = 20 * 60_000;

const wanted = process.argv.slice(2);
const unknown = wanted.filter((name) => !STEPS.some(([step]) => step === name));
if (unknown.length > 0) {
  console.error(
    `unknown step(s): ${unknown.join(", ")}; the steps are: ${STEPS.map(([step]) => step).join(", ")}`,
  );
  process.exit(2);
}
const plan =
  wanted.length === 0 ? STEPS : wanted.map((name) => STEPS.find(([step]) => step === name));

let current;
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    if (current !== undefined) killGroup(current, "SIGTERM");
    process.exit(130);
  });
}

const results = [];
for (const [index, [name, script]] of plan.entries()) {
  console.log(`\n=== [${index + 1}/${plan.length}] ${name} (npm run ${script}) ===\n`);
  const started = performance.now();
  const outcome = await run(script);
  const seconds = (performance.now() - started) / 1000;
  results.push({ name, script, seconds, ...outcome });
  console.log(
    `\n=== ${name}: ${outcome.passed ? "pass" : `FAIL (${outcome.detail})`} in ${seconds.toFixed(1)} s ===`,
  );
}

const width = Math.max(...results.map((r) => r.name.length), "step".length);
console.log("\n=== npm test summary ===\n");
console.log(`${"step".padEnd(width)}  result  duration  npm script`);
for (const r of results) {
  console.log(
    `${r.name.padEnd(width)}  ${(r.passed ? "pass" : "FAIL").padEnd(6)}  ${`${r.seconds.toFixed(1)} s`.padStart(8)}  ${r.script}${r.passed ? "" : ` (${r.detail})`}`,
  );
}
const failed = results.filter((r) => !r.passed);
const total = results.reduce((sum, r) => sum + r.seconds, 0);
console.log(
  `\ntotal ${total.toFixed(1)} s${failed.length > 0 ? `; failed: ${failed.map((r) => r.name).join(", ")}` : ""}`,
);
console.log(`suites: ${results.length - failed.length} passed, ${failed.length} failed`);
process.exit(failed.length > 0 ? 1 : 0);

/** Runs `npm run <script>` in its own process group; resolves with whether it passed. */
function run(script) {
  return new Promise((resolve) => {
    const child = spawn("npm", ["run", script], { stdio: "inherit", detached: true });
    current = child;
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup(child, "SIGKILL");
    }, STEP_TIMEOUT_MS);
    child.on("error", (error) => {
      clearTimeout(timer);
      current = undefined;
      resolve({ passed: false, detail: `could not start npm: ${error.message}` });
    });
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      current = undefined;
      if (timedOut)
        resolve({ passed: false, detail: `timed out after ${STEP_TIMEOUT_MS / 60_000} min` });
      else if (code === 0) resolve({ passed: true, detail: "" });
      else
        resolve({
          passed: false,
          detail: signal !== null ? `killed by ${signal}` : `exit code ${code}`,
        });
    });
  });
}

function killGroup(child, signal) {
  try {
    process.kill(-child.pid, signal);
  } catch {
    // The group is already gone (the step exited on its own): nothing left to stop.
  }
}
