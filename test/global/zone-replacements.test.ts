// A zone name whose sessions keep replacing each other (two processes using
// one name) is said, not left to flap silently: an error log line naming it,
// and the zone's status; a reconnect now and then says nothing.
import { afterEach, describe, expect, it } from "vitest";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { ReplacementWatch } from "../../src/global/zone-replacements.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import type { Logger } from "../../src/log.ts";
import { silentLogger } from "../../src/log.ts";
import { memoryMuxTransport } from "../../src/transport/memory.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { eventually } from "../contract/harness.ts";
import { ManualClock } from "../support/manual-clock.ts";

function capture(): { logger: Logger; errors: string[] } {
  const errors: string[] = [];
  return {
    errors,
    logger: { ...silentLogger, error: (message: string) => void errors.push(message) },
  };
}

const stops: AbortController[] = [];
afterEach(() => {
  for (const s of stops.splice(0)) s.abort();
});

describe("replacement watch", () => {
  it("says nothing of a few replacements a minute, and says once a minute when there are more", () => {
    const clock = new ManualClock();
    const { logger, errors } = capture();
    const watch = new ReplacementWatch({ logger, clock, now: () => 42 });
    for (let i = 0; i < 3; i++) {
      watch.note("east");
      clock.advance(10_000);
    }
    expect(errors).toEqual([]);
    expect(watch.status("east")).toBeUndefined();
    watch.note("east");
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain("two processes are using zone name `east`");
    expect(watch.status("east")).toEqual({ count: 4, windowMs: 60_000, lastAt: 42 });
    // More within the minute: counted, not logged again.
    watch.note("east");
    expect(errors).toHaveLength(1);
    expect(watch.status("east")?.count).toBe(5);
    expect(watch.status("west")).toBeUndefined();
    // Quiet for a minute: nothing to say any more.
    clock.advance(60_000);
    expect(watch.status("east")).toBeUndefined();
  });
});

describe("two processes using one zone name", () => {
  it("show in the zone's status and an error line on the global", async () => {
    const { logger, errors } = capture();
    const types = createTypeRegistry(exampleTypes);
    const global = new GlobalControlPlane({ types, logger });
    const stop = new AbortController();
    stops.push(stop);
    global.start(stop.signal);
    await global.registerZone("east");
    const token = async (): Promise<string> => (await global.tokens.issueZoneToken("east")).token;
    // Two dialers of one name, each dialing again at once when replaced.
    for (let i = 0; i < 2; i++)
      void new ZoneClient({
        name: "east",
        transport: memoryMuxTransport(global.server),
        token,
        logger: silentLogger,
        backoff: { baseMs: 10, capMs: 20 },
      }).run(stop.signal);
    const east = async () => (await global.zoneStatuses()).find((s) => s.zone === "east");
    await eventually(
      async () => (await east())?.replacements !== undefined,
      "the zone's status to show the replacements",
    );
    expect((await east())?.replacements?.count).toBeGreaterThan(3);
    expect(
      errors.filter((e) => e.includes("two processes are using zone name `east`")),
    ).toHaveLength(1);
  });
});
