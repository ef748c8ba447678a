// `kds-mux inspect zones --state`: an unknown state is refused before any
// call, with the states there are (the filter itself runs against a live
// global in test/browser/status-page.test.ts).
import { describe, expect, it } from "vitest";
import { ZONE_STATES } from "../../src/observe/zone-health.ts";
import { run } from "./process.ts";

describe("inspect zones --state", { timeout: 60_000 }, () => {
  it("refuses an unknown state, listing the states", async () => {
    const r = await run([
      "inspect",
      "zones",
      "--state",
      "broken",
      "--server",
      "http://127.0.0.1:9",
    ]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("'--state <state>' argument 'broken' is invalid");
    expect(r.stderr).toContain(`Allowed choices are ${ZONE_STATES.join(", ")}.`);
  });
});
