// The listener scenarios (test/runtime/listener-scenarios.ts) on Node; Deno
// and Bun run them through test/runtime/contract.ts.
import { describe, it } from "vitest";
import { listenerScenarios } from "../runtime/listener-scenarios.ts";

describe("a listener serving HTTP/2 and HTTP/1.1 on one plaintext port", () => {
  for (const scenario of listenerScenarios) {
    it(scenario.name, () => scenario.run(), 30_000);
  }
});
