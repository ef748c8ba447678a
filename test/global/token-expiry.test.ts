// Credentials that expire (issue 47, item 3): a zone's session ends when the
// token it was admitted with expires (goaway TOKEN_EXPIRED, a log line), the
// global warns before and reports the earliest expiry; the zone dials again
// with its token read again and resumes. Time is a ManualClock, with the
// wall clock the global reads expiries against stepped with it.
import { describe, expect, it } from "vitest";
import type { ZoneIdentity } from "../../src/auth/zone-authenticator.ts";
import { CredentialExpiry } from "../../src/global/credential-expiry.ts";
import type { LogFields, Logger } from "../../src/log.ts";
import { noopMetrics, type Metrics } from "../../src/metrics.ts";
import type { SessionEnd } from "../../src/mux/state.ts";
import type { CloseOptions, Session } from "../../src/mux/views.ts";
import { eventually } from "../contract/harness.ts";
import { ManualClock } from "../support/manual-clock.ts";
import { contents, mesh, startCluster } from "../sync/helpers.ts";

/** A logger that keeps every line. */
function recordingLogger(): Logger & { lines: { level: string; message: string }[] } {
  const lines: { level: string; message: string }[] = [];
  const at =
    (level: string) =>
    (message: string, _fields?: LogFields): void => {
      lines.push({ level, message });
    };
  return { lines, debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

/** Metrics that keep the last earliest expiry reported. */
function expiryMetrics(): Metrics & { earliest: (number | undefined)[] } {
  const earliest: (number | undefined)[] = [];
  return {
    ...noopMetrics,
    earliest,
    zoneTokenEarliestExpiry: (seconds) => {
      earliest.push(seconds);
    },
  };
}

describe("zone credentials that expire", () => {
  it("end the session at expiry with token_expired; the zone dials again with its renewed token and loses nothing", async () => {
    const clock = new ManualClock();
    const start = clock.now();
    const wallStart = Date.now();
    const now = (): number => wallStart + (clock.now() - start);
    const logger = recordingLogger();
    const metrics = expiryMetrics();
    const cluster = await startCluster("memory", { clock, now, logger, metrics });
    try {
      const { global } = cluster;
      await global.registerZone("zone-1");
      for (let i = 0; i < 50; i++) await global.store.put(mesh(`mesh-${i}`));
      const first = await global.tokens.issueZoneToken("zone-1", { validForMs: 5_000 });
      let token = first.token;
      const zone = cluster.startZone("zone-1", { token: () => token, reconnectJitterMs: 10 });
      await eventually(
        async () => (await zone.store.list("Mesh")).resources.length === 50,
        "zone-1 holds the 50 meshes",
      );
      const session = global.server.session("zone-1");
      expect(session).toBeDefined();

      // Shown and reported as soon as the session is up; warned at once (5 s is within the default 24 h).
      const status = await global.zoneStatus("zone-1");
      expect(status?.credentialExpiry).toEqual({ at: first.expiresAt, credential: "token" });
      expect(metrics.earliest.at(-1)).toBe(first.expiresAt.getTime() / 1000);
      clock.advance(0);
      await eventually(
        () =>
          logger.lines.some(
            (l) =>
              l.level === "error" &&
              l.message.includes(
                `zone "zone-1"'s zone token expires at ${first.expiresAt.toISOString()}`,
              ),
          ),
        "the warning before expiry",
      );

      // Just before expiry the session is up.
      clock.advance(first.expiresAt.getTime() - now() - 100);
      await new Promise((r) => setTimeout(r, 20));
      expect(session?.end).toBeUndefined();

      // The token file is renewed; at expiry the session ends with token_expired.
      const renewed = await global.tokens.issueZoneToken("zone-1", { validForMs: 3_600_000 });
      token = renewed.token;
      clock.advance(200);
      await eventually(() => session?.end !== undefined, "the session ends at expiry");
      expect(session?.end).toMatchObject({ code: "token_expired", initiator: "local" });
      expect(session?.end?.message).toContain("token expired");
      expect(
        logger.lines.some(
          (l) => l.level === "warn" && l.message.includes(`zone "zone-1"'s zone token expired at`),
        ),
      ).toBe(true);

      // The zone dials again with the renewed token, and the global tracks its new expiry.
      await eventually(
        () =>
          global.server.session("zone-1") !== undefined &&
          global.server.session("zone-1") !== session,
        "zone-1 is back",
      );
      await eventually(
        () => metrics.earliest.at(-1) === renewed.expiresAt.getTime() / 1000,
        "the gauge shows the renewed token's expiry",
      );
      expect((await global.zoneStatus("zone-1"))?.credentialExpiry?.at).toEqual(renewed.expiresAt);
      // Nothing lost: what the zone holds is what the global has, and a new change still arrives.
      await global.store.put(mesh("after-renewal"));
      await eventually(
        async () => (await zone.store.list("Mesh")).resources.length === 51,
        "a change after the renewal reaches zone-1",
      );
      expect(await contents(zone.store, ["Mesh"])).toEqual(await contents(global.store, ["Mesh"]));

      // Offline: no sample.
      await cluster.stopZone("zone-1");
      await eventually(() => metrics.earliest.at(-1) === undefined, "no expiry once offline");
    } finally {
      await cluster.close();
    }
  });
});

describe("CredentialExpiry", () => {
  /** A session as much as CredentialExpiry uses of it. */
  function fakeSession(): Session & { closedWith: CloseOptions[] } {
    const closedWith: CloseOptions[] = [];
    let resolve: (end: SessionEnd) => void = () => undefined;
    const closed = new Promise<SessionEnd>((r) => {
      resolve = r;
    });
    const session = {
      end: undefined as SessionEnd | undefined,
      closed,
      closedWith,
      close(options: CloseOptions = {}): Promise<void> {
        closedWith.push(options);
        const end: SessionEnd = {
          code: "token_expired",
          message: options.message ?? "",
          initiator: "local",
          graceful: true,
        };
        session.end = end;
        resolve(end);
        return Promise.resolve();
      },
    };
    return session as unknown as Session & { closedWith: CloseOptions[] };
  }

  /** A CredentialExpiry on a manual clock (wall time starts at 1.8e12 ms) warning `warnBeforeMs` before expiry. */
  function expiryFixture(warnBeforeMs: number) {
    const clock = new ManualClock();
    const wall = 1_800_000_000_000;
    const now = (): number => wall + clock.now();
    const logger = recordingLogger();
    const metrics = expiryMetrics();
    const expiry = new CredentialExpiry({ logger, metrics, clock, now, warnBeforeMs, global: "g" });
    return { clock, now, logger, metrics, expiry };
  }

  it("follows a certificate valid for 30 days past the timer limit, warning the configured time before", async () => {
    const { clock, now, logger, metrics, expiry } = expiryFixture(60 * 60 * 1000);
    const day = 24 * 60 * 60 * 1000;
    const expiresAt = new Date(now() + 30 * day);
    const session = fakeSession();
    const identity: ZoneIdentity = { zone: "edge", proof: "certificate", expiresAt };
    expiry.track(session, identity);
    void session.closed.then(() => expiry.untrack(session)); // as the global server does
    expect(expiry.expiry("edge")).toEqual({ at: expiresAt, credential: "certificate" });
    expect(metrics.earliest).toEqual([expiresAt.getTime() / 1000]);

    clock.advance(30 * day - 60 * 60 * 1000 - 1);
    expect(logger.lines).toEqual([]);
    clock.advance(1);
    expect(logger.lines.map((l) => l.level)).toEqual(["error"]);
    expect(logger.lines[0]?.message).toContain(
      `zone "edge"'s client certificate expires at ${expiresAt.toISOString()} (in 1 h 0 min)`,
    );
    clock.advance(60 * 60 * 1000 - 1);
    expect(session.closedWith).toEqual([]);
    clock.advance(1);
    await Promise.resolve();
    expect(session.closedWith.map((c) => c.code)).toEqual(["token_expired"]);
    await session.closed;
    await new Promise((r) => setTimeout(r, 0));
    expect(metrics.earliest.at(-1)).toBeUndefined();
    expect(expiry.expiry("edge")).toBeUndefined();
  });

  it("keeps one timer for many sessions, ending each at its own expiry in order and none that closed first", async () => {
    const { clock, now, logger, metrics, expiry } = expiryFixture(1_000);
    const start = now();
    // Tracked out of order; zone-4's is past already (warned and ended at once), zone-2 closes before its end.
    const sessions = [
      { zone: "zone-3", at: start + 30_000 },
      { zone: "zone-1", at: start + 10_000 },
      { zone: "zone-2", at: start + 20_000 },
      { zone: "zone-4", at: start - 5 },
    ].map(({ zone, at }) => {
      const session = fakeSession();
      expiry.track(session, { zone, proof: "token", expiresAt: new Date(at) });
      void session.closed.then(() => expiry.untrack(session)); // as the global server does
      return { zone, session };
    });
    const ended = (): string[] =>
      logger.lines
        .filter((l) => l.level === "warn")
        .map((l) => /zone "([^"]+)"/.exec(l.message)?.[1] ?? "");
    expect(clock.pending).toBe(1);
    clock.advance(0);
    expect(ended()).toEqual(["zone-4"]);
    await sessions[3]?.session.closed;
    await new Promise((r) => setTimeout(r, 0));
    expect(metrics.earliest.at(-1)).toBe((start + 10_000) / 1000);

    clock.advance(10_000 - 1_000); // zone-1's warning
    expect(logger.lines.filter((l) => l.level === "error").length).toBe(2);
    await sessions[2]?.session.close({ code: "shutdown" });
    await new Promise((r) => setTimeout(r, 0));
    expect(clock.pending).toBe(1);
    clock.advance(30_000);
    expect(ended()).toEqual(["zone-4", "zone-1", "zone-3"]);
    // The closed zone-2 was neither warned nor ended.
    expect(logger.lines.some((l) => l.message.includes(`zone "zone-2"`))).toBe(false);
    for (const s of sessions) await s.session.closed;
    await new Promise((r) => setTimeout(r, 0));
    expect(clock.pending).toBe(0);
    expect(metrics.earliest.at(-1)).toBeUndefined();
  });

  it("refuses a warning time that is not a duration", () => {
    expect(
      () =>
        new CredentialExpiry({ logger: recordingLogger(), warnBeforeMs: Number.NaN, global: "g" }),
    ).toThrow(/tokenExpiryWarningMs must be a non-negative number/);
  });
});
