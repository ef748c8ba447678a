// Lease renewal of many zones: in store batches of RENEW_BATCH with the event
// loop free between them, every live lease renewed, a takeover in one batch
// closing only that zone's session, and a claim that failed written again.
import { create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it } from "vitest";
import { ZoneInsightSpecSchema } from "../../src/gen/kds/v1/resource_pb.ts";
import { KdsError } from "../../src/errors.ts";
import { RENEW_BATCH, ZoneOwnership } from "../../src/global/zone-ownership.ts";
import { silentLogger } from "../../src/log.ts";
import type { SessionEnd } from "../../src/mux/state.ts";
import type { Session } from "../../src/mux/views.ts";
import type { ResourceStore, WriteOp } from "../../src/store/contract.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import {
  ZONE_INSIGHT_KIND,
  createTypeRegistry,
  zoneInsightType,
} from "../../src/kinds/builtin-types.ts";
import { eventually } from "../contract/harness.ts";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

function stopper(): AbortController {
  const stop = new AbortController();
  cleanups.push(() => stop.abort());
  return stop;
}

/** The part of a session the ownership uses; `closedWith` records a close. */
function fakeSession(zone: string): Session & { closedWith: string | undefined } {
  let end: (e: SessionEnd) => void = () => undefined;
  const closed = new Promise<SessionEnd>((resolve) => (end = resolve));
  const session = {
    peerId: zone,
    closed,
    closedWith: undefined as string | undefined,
    stats: () => ({ heartbeatRttMs: 1 }),
    close: (options?: { code?: string; message?: string }) => {
      session.closedWith = options?.code;
      const e = {
        code: options?.code ?? "shutdown",
        message: options?.message ?? "",
        initiator: "local",
        graceful: true,
      } as SessionEnd;
      end(e);
      return Promise.resolve(e);
    },
  };
  return session as unknown as Session & { closedWith: string | undefined };
}

/** An in-memory store that records the size of every batch and whether the loop ran between batches. */
function recordingStore(): { store: ResourceStore; batches: number[]; turnsBetween: number[] } {
  const types = createTypeRegistry();
  types.register(zoneInsightType);
  const inner = new InMemoryStore(types);
  const batches: number[] = [];
  const turnsBetween: number[] = [];
  let turns = 0;
  const tick = setInterval(() => turns++, 0);
  cleanups.push(() => clearInterval(tick));
  const store = new Proxy(inner, {
    get(target, key) {
      if (key === "apply") {
        return (ops: readonly WriteOp[], options?: { signal?: AbortSignal }) => {
          batches.push(ops.length);
          turnsBetween.push(turns);
          return target.apply(ops, options);
        };
      }
      const value = Reflect.get(target, key, target) as unknown;
      return typeof value === "function"
        ? (value as (...a: unknown[]) => unknown).bind(target)
        : value;
    },
  });
  return { store, batches, turnsBetween };
}

describe("ZoneOwnership renewal", () => {
  it("renews every lease in batches of RENEW_BATCH, letting the event loop run between them", async () => {
    const { store, batches, turnsBetween } = recordingStore();
    const ownership = new ZoneOwnership({
      store,
      instance: "g0",
      renewMs: 50,
      logger: silentLogger,
    });
    const zones = 2 * RENEW_BATCH + 50;
    for (let i = 0; i < zones; i++) await ownership.claim(fakeSession(`zone-${i}`));
    const before = new Map(
      (await store.list(ZONE_INSIGHT_KIND)).resources.map((r) => [r.meta.name, r.meta.version]),
    );
    const stop = stopper();
    ownership.start(stop.signal);
    await eventually(() => batches.length >= 3, "one renewal's three batches");
    stop.abort();
    expect(batches.slice(0, 3)).toEqual([RENEW_BATCH, RENEW_BATCH, 50]);
    // Timers ran between the batches: no batch followed the previous one in the same turn of the loop.
    expect(turnsBetween[1]).toBeGreaterThan(turnsBetween[0] as number);
    expect(turnsBetween[2]).toBeGreaterThan(turnsBetween[1] as number);
    const after = (await store.list(ZONE_INSIGHT_KIND)).resources;
    expect(after).toHaveLength(zones);
    for (const r of after) expect(r.meta.version).not.toBe(before.get(r.meta.name));
  });

  it("a lease taken over by another instance closes only that zone's session; the rest of its batch is renewed", async () => {
    const { store, batches } = recordingStore();
    const ownership = new ZoneOwnership({
      store,
      instance: "g0",
      renewMs: 50,
      logger: silentLogger,
    });
    const sessions = Array.from({ length: RENEW_BATCH + 10 }, (_, i) => fakeSession(`zone-${i}`));
    for (const s of sessions) await ownership.claim(s);
    // Another instance writes zone-105's lease behind this one's back (a newer session there).
    const taken = `zone-${RENEW_BATCH + 5}`;
    await store.put({
      kind: ZONE_INSIGHT_KIND,
      name: taken,
      spec: create(ZoneInsightSpecSchema, { instance: "g1", session: "other", online: true }),
    });
    const before = new Map(
      (await store.list(ZONE_INSIGHT_KIND)).resources.map((r) => [r.meta.name, r.meta.version]),
    );
    const renewed = batches.length;
    // Started only now, so the takeover is seen only by the renewal (its conflict), not by the change feed first.
    const stop = stopper();
    ownership.start(stop.signal);
    await eventually(
      () => sessions.some((s) => s.closedWith !== undefined),
      "the session of the zone taken over closed",
    );
    await eventually(
      async () =>
        (await store.list(ZONE_INSIGHT_KIND)).resources.filter(
          (r) => r.meta.version !== before.get(r.meta.name),
        ).length >=
        sessions.length - 1,
      "every other lease renewed",
    );
    stop.abort();
    expect(sessions.filter((s) => s.closedWith !== undefined).map((s) => s.peerId)).toEqual([
      taken,
    ]);
    expect(sessions.find((s) => s.peerId === taken)?.closedWith).toBe("replaced");
    expect(batches[renewed]).toBe(RENEW_BATCH);
    expect((await store.get(ZONE_INSIGHT_KIND, "", taken))?.spec).toMatchObject({ instance: "g1" });
  });

  it("a claim whose write failed is written at the next renewal", async () => {
    const types = createTypeRegistry();
    types.register(zoneInsightType);
    const inner = new InMemoryStore(types);
    let failing = true;
    const store = new Proxy(inner, {
      get(target, key) {
        if (key === "put")
          return (...args: Parameters<InMemoryStore["put"]>) =>
            failing
              ? Promise.reject(new KdsError("store_unavailable", "the database is away"))
              : target.put(...args);
        const value = Reflect.get(target, key, target) as unknown;
        return typeof value === "function"
          ? (value as (...a: unknown[]) => unknown).bind(target)
          : value;
      },
    });
    const ownership = new ZoneOwnership({
      store,
      instance: "g0",
      renewMs: 50,
      logger: silentLogger,
    });
    const session = fakeSession("zone-1");
    await expect(ownership.claim(session)).rejects.toThrow(/the database is away/);
    expect(await inner.get(ZONE_INSIGHT_KIND, "", "zone-1")).toBeUndefined();
    failing = false;
    const stop = stopper();
    ownership.start(stop.signal);
    await eventually(
      async () => (await inner.get(ZONE_INSIGHT_KIND, "", "zone-1")) !== undefined,
      "the lease written by a renewal",
    );
    expect((await inner.get(ZONE_INSIGHT_KIND, "", "zone-1"))?.spec).toMatchObject({
      instance: "g0",
      online: true,
    });
    expect(session.closedWith).toBeUndefined();
  });
});
