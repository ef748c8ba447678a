// Many zones in one process may share one shutdown signal. Each zone keeps one
// listener on it for its whole run (childSignal), not one per dial and backoff
// sleep: Node's EventTarget walks every listener on each add and remove, so
// per-dial listeners on a signal shared by 2,500 zones cost the process half
// its CPU while they reconnected.
import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import { silentLogger } from "../../src/log.ts";
import type { MuxTransport } from "../../src/transport/transport.ts";
import { childSignal } from "../../src/util/abort.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";

describe("childSignal", () => {
  it("aborts with the parent's reason, follows it only until released, and starts aborted under an aborted parent", () => {
    const parent = new AbortController();
    const child = childSignal(parent.signal);
    expect(getEventListeners(parent.signal, "abort")).toHaveLength(1);
    parent.abort(new Error("stop"));
    expect(child.signal.aborted).toBe(true);
    expect((child.signal.reason as Error).message).toBe("stop");

    const other = new AbortController();
    const released = childSignal(other.signal);
    released.release();
    expect(getEventListeners(other.signal, "abort")).toHaveLength(0);
    other.abort();
    expect(released.signal.aborted).toBe(false);

    expect(childSignal(parent.signal).signal.aborted).toBe(true);
  });
});

describe("a zone's run on a shared signal", () => {
  it("keeps one listener on it while dialing and backing off, and none after it stops", async () => {
    const shared = new AbortController();
    let dials = 0;
    let dialing: (() => void) | undefined;
    // Every other dial hangs until its signal aborts; the others fail at once, so the zone also sleeps its backoff.
    const transport: MuxTransport = {
      name: "test",
      open: ({ signal }) => {
        dials++;
        if (dials % 2 === 1) return Promise.reject(new KdsError("transport", "refused"));
        return new Promise((_, reject) => {
          dialing?.();
          signal.addEventListener("abort", () => reject(new KdsError("aborted", "cut")), {
            once: true,
          });
        });
      },
    };
    const zone = new ZoneClient({
      name: "zone-1",
      transport,
      logger: silentLogger,
      backoff: { baseMs: 1, capMs: 2 },
      reconnectJitterMs: 0,
    });
    const inDial = new Promise<void>((resolve) => (dialing = resolve));
    const running = zone.run(shared.signal);
    await inDial; // the second dial hangs: a session and a dial are in progress
    expect(dials).toBe(2);
    expect(getEventListeners(shared.signal, "abort")).toHaveLength(1);
    shared.abort();
    await running;
    expect(getEventListeners(shared.signal, "abort")).toHaveLength(0);
  });
});

describe("a zone's failed dials", () => {
  it("leave no listener on the signal they were given, however many fail", async () => {
    const own = new AbortController();
    const transport: MuxTransport = {
      name: "test",
      open: () => Promise.reject(new KdsError("transport", "refused")),
    };
    const zone = new ZoneClient({ name: "zone-1", transport, logger: silentLogger });
    // More failed dials than Node's default listener limit (10), past which it warned MaxListenersExceeded.
    for (let i = 0; i < 12; i++)
      await expect(zone.dial(own.signal)).rejects.toMatchObject({ code: "transport" });
    expect(getEventListeners(own.signal, "abort")).toHaveLength(0);
  });
});
