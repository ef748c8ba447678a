// /metrics on Node; the same scenarios run under Deno and Bun through test/runtime/contract.ts.
import { describe, it } from "vitest";
import { metricsScenarios } from "./metrics-scenarios.ts";

describe("metrics endpoint", () => {
  for (const scenario of metricsScenarios) it(scenario.name, () => scenario.run(), 60_000);
});
