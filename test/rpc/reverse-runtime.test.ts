// Reverse calls on Node; the same scenarios run under Deno and Bun through test/runtime/contract.ts.
import { describe, it } from "vitest";
import { reverseCallScenarios } from "./reverse-scenarios.ts";

describe("reverse calls on this runtime", () => {
  for (const scenario of reverseCallScenarios) it(scenario.name, () => scenario.run(), 60_000);
});
