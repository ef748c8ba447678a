// failoverMuxTransport: after a failed dial, or a goaway RECONNECT naming no
// listed instance, another listed instance at random; a named instance in the
// list is dialed next; one outside it is followed once with `follow` when its
// scheme matches the URL dialed (never http <-> https), and a failed dial
// there falls back to the list.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import { FrameSchema, GoAwayReason, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { failoverMuxTransport } from "../../src/transport/failover.ts";
import type { MuxDialRequest, MuxTransport } from "../../src/transport/transport.ts";

/** What the fake instances do: `down` ones fail the dial; the others answer with goaway RECONNECT naming `hint`, or, when `plain`, one frame and an end without a goaway. */
interface FakeState {
  hint: string;
  down: Set<string>;
  plain: boolean;
}

/** A transport that records each dial in `dials` and answers as `state` says. */
function fake(url: string, dials: string[], state: FakeState): MuxTransport {
  return {
    name: url,
    open: async () => {
      dials.push(url);
      if (state.down.has(url)) throw new KdsError("transport", `${url} is down`);
      if (state.plain)
        return (async function* () {
          yield create(FrameSchema, {});
        })();
      const goaway: Frame = create(FrameSchema, {
        value: {
          case: "goaway",
          value: { reason: GoAwayReason.RECONNECT, message: "move", reconnectTo: state.hint },
        },
      });
      return (async function* () {
        yield goaway;
      })();
    },
  };
}

const request = (): MuxDialRequest => ({
  headers: new Headers(),
  outbound: (async function* () {
    // the fake transports read no frames from the zone
  })(),
  signal: new AbortController().signal,
});

/** Dials once and reads the answer to its end; a failed dial is swallowed (recorded in `dials`). */
async function dialOnce(t: MuxTransport): Promise<void> {
  try {
    for await (const _ of await t.open(request())) {
      // reading to the end is what moves the transport on
    }
  } catch (error) {
    if (!KdsError.is(error, "transport")) throw error; // a down instance: the test reads it from the dials
  }
}

function setup(urls: string[], follow: boolean, random?: () => number) {
  const dials: string[] = [];
  const made: string[] = [];
  const state: FakeState = { hint: "", down: new Set<string>(), plain: false };
  const transport = failoverMuxTransport(
    urls.map((u) => fake(u, dials, state)),
    {
      targets: urls,
      random,
      follow: follow
        ? (url) => {
            made.push(url);
            return fake(url, dials, state);
          }
        : undefined,
    },
  );
  return { dials, made, state, transport };
}

describe("failoverMuxTransport after a failed dial", () => {
  const urls = ["http://g0:5685", "http://g1:5685", "http://g2:5685", "http://g3:5685"];

  it("spreads the zones of a failed instance evenly over the others, not onto the next one", async () => {
    // 300 zones that all dial g1 first (their lists rotated to start there), with draws spread evenly over [0, 1).
    const zones = 300;
    const landed = new Map<string, number>();
    for (let z = 0; z < zones; z++) {
      const rotated = [...urls.slice(1), ...urls.slice(0, 1)];
      const { dials, state, transport } = setup(rotated, false, () => (z + 0.5) / zones);
      state.down.add("http://g1:5685");
      await dialOnce(transport); // g1 is down
      await dialOnce(transport); // another instance
      expect(dials[0]).toBe("http://g1:5685");
      const second = dials[1] as string;
      landed.set(second, (landed.get(second) ?? 0) + 1);
    }
    expect(Object.fromEntries(landed)).toEqual({
      "http://g0:5685": 100,
      "http://g2:5685": 100,
      "http://g3:5685": 100,
    });
  });

  it("never dials the failed instance next, whatever the draw, and stays put with one instance", async () => {
    for (const draw of [0, 0.999_999, 1, -0.5]) {
      const { dials, state, transport } = setup(urls, false, () => draw);
      state.down.add("http://g0:5685");
      await dialOnce(transport);
      await dialOnce(transport);
      expect(dials[0], `draw ${draw}`).toBe("http://g0:5685");
      expect(dials[1], `draw ${draw}`).not.toBe("http://g0:5685");
    }
    let draws = 0;
    const { dials, state, transport } = setup(["http://g0:5685"], false, () => {
      draws++;
      return 0.5;
    });
    state.down.add("http://g0:5685");
    await dialOnce(transport);
    await dialOnce(transport);
    expect(dials).toEqual(["http://g0:5685", "http://g0:5685"]);
    expect(draws).toBe(0);
  });

  it("a draw that is not a number still moves on to another instance", async () => {
    const { dials, state, transport } = setup(urls, false, () => Number.NaN);
    state.down.add("http://g0:5685");
    await dialOnce(transport); // g0 down: NaN picks the first of the others
    state.down.add("http://g1:5685");
    await dialOnce(transport); // g1 down too: from g1, the first of the others is g2
    await dialOnce(transport);
    expect(dials).toEqual(["http://g0:5685", "http://g1:5685", "http://g2:5685"]);
  });

  it("a RECONNECT naming no listed instance also moves on at random", async () => {
    // From g0, the others are g1, g2, g3: a draw of 0.9 picks the third.
    const { dials, state, transport } = setup(urls, false, () => 0.9);
    state.hint = "http://elsewhere:5685";
    await dialOnce(transport);
    state.hint = "http://g3:5685";
    await dialOnce(transport);
    expect(dials).toEqual(["http://g0:5685", "http://g3:5685"]);
  });

  it("redials the same instance, with no draw, after a session that ended without a RECONNECT", async () => {
    let draws = 0;
    const { dials, state, transport } = setup(urls, false, () => {
      draws++;
      return 0.5;
    });
    state.plain = true;
    await dialOnce(transport);
    await dialOnce(transport);
    expect(dials).toEqual(["http://g0:5685", "http://g0:5685"]);
    expect(draws).toBe(0);
  });

  it("keeps dialing the instance that answered until it fails or asks the zone to move", async () => {
    let draws = 0;
    const { dials, state, transport } = setup(urls, false, () => {
      draws++;
      return 0.5;
    });
    state.down.add("http://g0:5685");
    await dialOnce(transport); // g0 down: a draw (0.5 of 3 others: the second, g2)
    state.hint = "http://g2:5685"; // g2 answers and names itself: stay
    await dialOnce(transport);
    await dialOnce(transport);
    expect(dials).toEqual(["http://g0:5685", "http://g2:5685", "http://g2:5685"]);
    expect(draws).toBe(1);
  });
});

describe("failoverMuxTransport and reconnect_to", () => {
  it("follows a RECONNECT naming an instance outside its list once, then dials its list again", async () => {
    const { dials, made, state, transport } = setup(["http://g1:5685"], true);
    state.hint = "http://g2:5685/";
    await dialOnce(transport); // g1 asks it to move to g2
    state.hint = "";
    await dialOnce(transport); // g2, once (its goaway names nobody)
    await dialOnce(transport); // the list again
    expect(dials).toEqual(["http://g1:5685", "http://g2:5685", "http://g1:5685"]);
    expect(made).toEqual(["http://g2:5685"]);
  });

  it("falls back to its list when the dial to the named instance fails", async () => {
    const { dials, state, transport } = setup(["http://g1:5685"], true);
    state.hint = "http://g2:5685";
    state.down.add("http://g2:5685");
    await dialOnce(transport);
    state.hint = "";
    await dialOnce(transport); // g2 is down
    await dialOnce(transport);
    await dialOnce(transport);
    expect(dials).toEqual(["http://g1:5685", "http://g2:5685", "http://g1:5685", "http://g1:5685"]);
  });

  it("never follows to another scheme: not from https to http, nor from http to https", async () => {
    for (const [from, to] of [
      ["https://g1:5685", "http://g2:5685"],
      ["http://g1:5685", "https://g2:5685"],
    ] as const) {
      const { dials, made, state, transport } = setup([from], true);
      state.hint = to;
      await dialOnce(transport);
      await dialOnce(transport);
      expect(dials, `${from} -> ${to}`).toEqual([from, from]);
      expect(made).toEqual([]);
    }
  });

  it("without follow, a RECONNECT naming an unlisted instance moves on to another listed one", async () => {
    const { dials, state, transport } = setup(["http://g1:5685", "http://g3:5685"], false);
    state.hint = "http://g2:5685";
    await dialOnce(transport);
    await dialOnce(transport);
    expect(dials).toEqual(["http://g1:5685", "http://g3:5685"]);
  });

  it("a listed instance named is dialed next, not followed as a detour", async () => {
    const { dials, made, state, transport } = setup(
      ["http://g1:5685", "http://g2:5685", "http://g3:5685"],
      true,
    );
    state.hint = "http://g3:5685";
    await dialOnce(transport);
    state.hint = "";
    await dialOnce(transport);
    expect(dials).toEqual(["http://g1:5685", "http://g3:5685"]);
    expect(made).toEqual([]);
  });

  it("reuses the transport it made while detours name the same instance", async () => {
    const { dials, made, state, transport } = setup(["http://g1:5685"], true);
    state.hint = "http://g2:5685";
    await dialOnce(transport); // g1 -> detour g2
    await dialOnce(transport); // g2 names g2 again (itself): another detour there
    await dialOnce(transport);
    expect(dials).toEqual(["http://g1:5685", "http://g2:5685", "http://g2:5685"]);
    expect(made).toEqual(["http://g2:5685"]);
  });
});
