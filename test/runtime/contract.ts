// Runs the session contract (test/contract/scenarios.ts), the fetch-server
// scenarios, the /metrics scenarios (test/observe) and the reverse-call
// scenarios (test/rpc) on whichever runtime
// executes this file: `deno run` and `bun` in `npm test`, or node through vitest.
// Prints one line per scenario and a closing "RUNTIME: N passed, M failed".
import { scenarios } from "../contract/scenarios.ts";
import { fetchScenarios } from "./fetch-scenarios.ts";
import { metricsScenarios } from "../observe/metrics-scenarios.ts";
import { reverseCallScenarios } from "../rpc/reverse-scenarios.ts";
import { storeScenarios } from "./store-scenarios.ts";
import { listenerScenarios } from "./listener-scenarios.ts";

interface RuntimeGlobals {
  Deno?: { version: { deno: string }; exit(code: number): never };
  Bun?: { version: string };
  process?: { exit(code: number): never; version: string };
}

const g = globalThis as RuntimeGlobals;
const runtime =
  g.Deno !== undefined
    ? `deno ${g.Deno.version.deno}`
    : g.Bun !== undefined
      ? `bun ${g.Bun.version}`
      : `node ${g.process?.version ?? "?"}`;
const scenarioTimeoutMs = 60_000;

function withTimeout(promise: Promise<void>, name: string): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`scenario "${name}" did not finish within ${scenarioTimeoutMs} ms`)),
      scenarioTimeoutMs,
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

let passed = 0;
let failed = 0;
for (const scenario of [
  ...scenarios,
  ...fetchScenarios,
  ...metricsScenarios,
  ...reverseCallScenarios,
  ...storeScenarios,
  ...listenerScenarios,
]) {
  const started = performance.now();
  try {
    await withTimeout(scenario.run(), scenario.name);
    passed++;
    console.log(`ok   ${scenario.name} (${Math.round(performance.now() - started)} ms)`);
  } catch (error) {
    failed++;
    console.log(
      `FAIL ${scenario.name}\n     ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
    );
  }
}
console.log(`\ncontract on ${runtime}:`);
console.log(`${runtime.split(" ")[0]}: ${passed} passed, ${failed} failed`);
const code = failed === 0 ? 0 : 1;
if (g.Deno !== undefined) g.Deno.exit(code);
else g.process?.exit(code);
