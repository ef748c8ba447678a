// Credential refusals are logged once per reason and burst: varying the
// client-id (or a forged token's key id) must not start a new burst per name.
import { afterEach, describe, expect, it, vi } from "vitest";
import { TokenAuthority } from "../../src/auth/token-authority.ts";
import { TokenZoneAuthenticator } from "../../src/auth/zone-authenticator.ts";
import { GlobalServer } from "../../src/global/global-server.ts";
import { refusalReason } from "../../src/global/refusal-log.ts";
import { InMemoryZoneRegistry } from "../../src/global/zone-registry.ts";
import type { Logger, LogFields } from "../../src/log.ts";
import type { Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";

const N = 1_000;

function recorder(): { logger: Logger; warns: { message: string; fields?: LogFields }[] } {
  const warns: { message: string; fields?: LogFields }[] = [];
  const none = (): void => undefined;
  return {
    warns,
    logger: {
      debug: none,
      info: none,
      error: none,
      warn: (message, fields) => void warns.push({ message, fields }),
    },
  };
}

async function* nothing(): AsyncIterable<Frame> {
  // A zone that sends no frame at all.
}

const b64 = (value: unknown): string =>
  btoa(JSON.stringify(value)).replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");

describe("credential refusal log", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it(`${N} tokenless streams with distinct client-ids write a bounded number of lines, and the burst line counts them and names a zone`, async () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const { logger, warns } = recorder();
    const global = new GlobalServer({
      registry: new InMemoryZoneRegistry([]),
      logger,
      authenticator: new TokenZoneAuthenticator(new TokenAuthority({ issuer: "global" })),
    });
    const signal = new AbortController().signal;
    const refusals = (): typeof warns => warns.filter((w) => w.message.startsWith("refused"));
    for (let i = 0; i < N; i++) {
      await expect(
        global.accept(new Headers({ "client-id": `zone-${i}` }), nothing(), signal),
      ).rejects.toMatchObject({ code: "unauthenticated" });
    }
    // Forged tokens naming ever new signing keys are one reason too.
    for (let i = 0; i < 100; i++) {
      const token = `${b64({ alg: "EdDSA", kid: `forged-key-${i}` })}.${b64({ sub: `zone-${i}` })}.c2ln`;
      await expect(
        global.accept(
          new Headers({ "client-id": `zone-${i}`, authorization: `Bearer ${token}` }),
          nothing(),
          signal,
        ),
      ).rejects.toMatchObject({ code: "unauthenticated" });
    }
    // Per reason: the first 4 zones in full, a fifth opening the burst, the rest only counted.
    const first = refusals().map((w) => w.message.split(":")[0]);
    expect(first).toEqual([
      ...[0, 1, 2, 3, 4].map((i) => `refused zone "zone-${i}"`),
      ...[0, 1, 2, 3, 4].map((i) => `refused zone "zone-${i}"`),
    ]);
    expect(refusals()[4]?.message).toMatch(
      /presented no token.*\(more refusals for this reason are logged at most every 10 s, with their count\)$/,
    );
    expect(refusals()[9]?.message).toMatch(
      /signed by key "forged-key-4", which this control plane does not hold.*\(more refusals for this reason are logged/,
    );
    // After the interval, 4 new zones are named again, and the next refusal sums the burst in one line.
    vi.advanceTimersByTime(11_000);
    for (let i = 0; i < 5; i++) {
      await expect(
        global.accept(new Headers({ "client-id": `late-${i}` }), nothing(), signal),
      ).rejects.toMatchObject({ code: "unauthenticated" });
    }
    const lines = refusals();
    console.log(
      `refusal log: ${N} tokenless streams with distinct client-ids and 100 forged tokens with distinct key ids, then 5 more: ${lines.length} warn lines`,
    );
    expect(lines).toHaveLength(15);
    const summary = lines[14];
    expect(summary?.message).toMatch(
      new RegExp(
        `^refused ${N - 4} more zone streams in the last 11 s for the same reason; the latest: refused zone "zone-${N - 1}": zone "zone-${N - 1}" presented no token`,
      ),
    );
    expect(summary?.fields).toMatchObject({
      code: "unauthenticated",
      refused: N - 4,
      zone: `zone-${N - 1}`,
    });
    await global.close();
  });

  it("blanks quoted values (zone names, key ids) and numbers, and keeps the code and the rest of the reason", () => {
    expect(refusalReason("unauthenticated", 'zone "a" presented no token')).toBe(
      refusalReason("unauthenticated", 'zone "bb-2" presented no token'),
    );
    expect(refusalReason("unauthenticated", 'the zone token was signed by key "k1"')).toBe(
      refusalReason("unauthenticated", 'the zone token was signed by key "k2"'),
    );
    expect(refusalReason("unauthenticated", "the zone token expired at 12:01")).toBe(
      refusalReason("unauthenticated", "the zone token expired at 13:59"),
    );
    expect(refusalReason("unauthenticated", "the zone token expired")).not.toBe(
      refusalReason("unauthenticated", "the zone token was revoked"),
    );
    expect(refusalReason("permission_denied", "x")).not.toBe(refusalReason("unauthenticated", "x"));
  });
});
