// Runs the session contract (test/contract/scenarios.ts) on Node. The same
// scenarios run under Deno and Bun through test/runtime/contract.ts.
import { describe, it } from "vitest";
import { scenarios } from "./contract/scenarios.ts";

describe("session contract", () => {
  for (const scenario of scenarios) {
    it(scenario.name, () => scenario.run(), 30_000);
  }
});
