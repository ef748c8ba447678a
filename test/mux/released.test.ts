// A session's `released` is made when first asked for (not with every idle
// session), so it must settle whether it is asked before the release or after.
import { describe, expect, it } from "vitest";
import { MuxSession } from "../../src/mux/session.ts";

/** Whether `promise` has settled after a macrotask. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  void promise.then(
    () => {
      done = true;
    },
    () => {
      done = true;
    },
  );
  await new Promise((r) => setTimeout(r, 0));
  return done;
}

function session(): MuxSession {
  return new MuxSession({ role: "global", localId: "g", options: { closeGraceMs: 20 } });
}

describe("MuxSession.released", () => {
  it("asked before the end, settles at the release and not before", async () => {
    const s = session();
    const released = s.released;
    expect(s.released).toBe(released);
    expect(await settled(released)).toBe(false);
    s.fail("transport", "gone");
    expect(await settled(s.closed)).toBe(true);
    expect(s.state.kind).toBe("ending");
    expect(await settled(released)).toBe(false);
    await released;
    expect(s.state.kind).toBe("closed");
  });

  it("asked first after the release, is settled already", async () => {
    const s = session();
    await s.close({ code: "shutdown" });
    expect(s.state.kind).toBe("closed");
    expect(await settled(s.released)).toBe(true);
  });
});
