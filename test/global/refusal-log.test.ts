// Credential refusals are logged once per reason and burst: varying the
// client-id (or a forged token's key id) must not start a new burst per name.
import { afterEach, describe, expect, it, vi } from "vitest";
import { TokenAuthority } from "../../src/auth/token-authority.ts";
import { TokenZoneAuthenticator } from "../../src/auth/zone-authenticator.ts";
import { GlobalServer } from "../../src/global/global-server.ts";
import { refusalReason } from "../../src/global/refusal-log.ts";
import { InMemoryZoneRegistry } from "../../src/global/zone-registry.ts";
import type { Logger, LogFields } from "../../src/log.ts";
import type { Message } from "../../src/gen/kds/mux/v1/mux_pb.ts";

const N = 1_000;

function recorder(): { logger: Logger; warns: { message: string; fields?: LogFields }[] } {
  const warns: { message: string; fields?: LogFields }[] = [];
  const none = (): void => {};
  return { warns, logger: { debug: none, info: none, error: none, warn: (message, fields) => void warns.push({ message, fields }) } };
}

async function* nothing(): AsyncIterable<Message> {}

const b64 = (value: unknown): string => btoa(JSON.stringify(value)).replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");

describe("credential refusal log", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it(`${N} tokenless streams with distinct client-ids write a bounded number of lines, and the burst line counts them and names a zone`, async () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const { logger, warns } = recorder();
    const global = new GlobalServer({ registry: new InMemoryZoneRegistry([]), logger, authenticator: new TokenZoneAuthenticator(new TokenAuthority({ issuer: "global" })) });
    const signal = new AbortController().signal;
    const refusals = (): typeof warns => warns.filter((w) => w.message.startsWith("refused"));
    for (let i = 0; i < N; i++) {
      await expect(global.accept(new Headers({ "client-id": `zone-${i}` }), nothing(), signal)).rejects.toMatchObject({ code: "unauthenticated" });
    }
    // Forged tokens naming ever new signing keys are one reason too.
    for (let i = 0; i < 100; i++) {
      const token = `${b64({ alg: "EdDSA", kid: `forged-key-${i}` })}.${b64({ sub: `zone-${i}` })}.c2ln`;
      await expect(global.accept(new Headers({ "client-id": `zone-${i}`, authorization: `Bearer ${token}` }), nothing(), signal)).rejects.toMatchObject({ code: "unauthenticated" });
    }
    expect(refusals().map((w) => w.message.split(" (more refusals")[0])).toEqual([
      expect.stringMatching(/^refused zone "zone-0": zone "zone-0" presented no token/),
      expect.stringMatching(/^refused zone "zone-0": the zone token was signed by key "forged-key-0", which this control plane does not hold/),
    ]);
    // After the interval, the next refusal of each reason sums the burst in one line.
    vi.advanceTimersByTime(11_000);
    await expect(global.accept(new Headers({ "client-id": "late-zone" }), nothing(), signal)).rejects.toMatchObject({ code: "unauthenticated" });
    const lines = refusals();
    expect(lines).toHaveLength(3);
    expect(lines[2]?.message).toMatch(new RegExp(`^refused ${N} more zone streams in the last 11 s for the same reason; the latest: refused zone "(late-zone|zone-${N - 1})": zone ".*" presented no token`));
    expect(lines[2]?.fields).toMatchObject({ code: "unauthenticated", refused: N });
    await global.close();
  });

  it("blanks quoted values (zone names, key ids) and numbers, and keeps the code and the rest of the reason", () => {
    expect(refusalReason("unauthenticated", 'zone "a" presented no token')).toBe(refusalReason("unauthenticated", 'zone "bb-2" presented no token'));
    expect(refusalReason("unauthenticated", 'the zone token was signed by key "k1"')).toBe(refusalReason("unauthenticated", 'the zone token was signed by key "k2"'));
    expect(refusalReason("unauthenticated", "the zone token expired at 12:01")).toBe(refusalReason("unauthenticated", "the zone token expired at 13:59"));
    expect(refusalReason("unauthenticated", "the zone token expired")).not.toBe(refusalReason("unauthenticated", "the zone token was revoked"));
    expect(refusalReason("permission_denied", "x")).not.toBe(refusalReason("unauthenticated", "x"));
  });
});
