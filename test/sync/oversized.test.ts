// A response too large to send is logged, not only counted: a zone that
// never receives a kind must leave a line saying why and what to change.
import { afterEach, describe, expect, it } from "vitest";
import type { Logger } from "../../src/log.ts";
import { eventually } from "../contract/harness.ts";
import { mesh, startCluster, type Cluster } from "./helpers.ts";

function recordingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const keep = (message: string): void => void lines.push(message);
  return { lines, debug: () => undefined, info: () => undefined, warn: keep, error: keep };
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

describe("an oversized response", () => {
  it("a state-of-the-world set over maxResponseResources is logged with what to change, and sent once it fits", async () => {
    const logger = recordingLogger();
    const discovery = { maxResponseResources: 3 };
    const c: Cluster = await startCluster("memory", { mode: "sotw", discovery, logger });
    cleanups.push(() => c.close());
    await c.global.registerZone("zone-a");
    for (let i = 0; i < 5; i++) await c.global.store.put(mesh(`m-${i}`));
    const zone = c.startZone("zone-a", { mode: "sotw", discovery });
    await eventually(
      () => logger.lines.some((l) => l.includes("the whole Mesh set")),
      "the oversized set logged",
    );
    const line = logger.lines.find((l) => l.includes("the whole Mesh set")) ?? "";
    expect(line).toContain('zone "zone-a"');
    expect(line).toContain("maxResponseResources");
    expect((await zone.store.list("Mesh")).resources).toHaveLength(0);
    await c.global.store.delete("Mesh", "", "m-3");
    await c.global.store.delete("Mesh", "", "m-4");
    await eventually(
      async () => (await zone.store.list("Mesh")).resources.length === 3,
      "the set of 3 mirrored once it fits",
    );
  });
});
