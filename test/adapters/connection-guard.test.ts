// The connection guard's rules on stand-in sockets: who is closed at the cap, the authentication
// deadline (held while a check runs), and an identity's share of connections.
import { EventEmitter } from "node:events";
import type * as net from "node:net";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ConnectionGuard } from "../../src/adapters/node/connection-guard.ts";
import { resolveConnectionLimits } from "../../src/cli/connection-flags.ts";
import { silentLogger } from "../../src/log.ts";
import { noopMetrics, type ConnectionEvent } from "../../src/metrics.ts";

/** A stand-in for an accepted socket: an address and port, and destroy() that emits close. */
class FakeSocket extends EventEmitter {
  destroyed = false;
  constructor(
    readonly remotePort: number,
    readonly remoteAddress = "127.0.0.1",
  ) {
    super();
  }
  destroy(): this {
    if (!this.destroyed) {
      this.destroyed = true;
      this.emit("close");
    }
    return this;
  }
}

let port = 40_000;
const accept = (guard: ConnectionGuard): FakeSocket => {
  const socket = new FakeSocket(port++);
  guard.admit(socket as unknown as net.Socket);
  return socket;
};

describe("ConnectionGuard", () => {
  let events: ConnectionEvent[];
  const guardOf = (
    maxConnections: number,
    extra: { maxConnectionsPerIdentity?: number } = {},
  ): ConnectionGuard =>
    new ConnectionGuard({
      listener: "zones",
      maxConnections,
      authTimeoutMs: 1_000,
      metrics: { connection: (_l, e) => events.push(e) },
      ...extra,
    });

  beforeEach(() => {
    events = [];
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("at the cap closes the oldest unauthenticated connection for a new one, never an authenticated one or one being checked", async () => {
    const guard = guardOf(3);
    const zone = accept(guard);
    guard.connection(zone).authenticated("zone-1");
    const checking = accept(guard);
    let finish: () => void = () => undefined;
    const check = guard
      .connection(checking)
      .authenticating(new Promise<void>((resolve) => (finish = resolve)));
    const idle = accept(guard);
    const newcomer = accept(guard);
    expect([zone.destroyed, checking.destroyed, idle.destroyed, newcomer.destroyed]).toEqual([
      false,
      false,
      true,
      false,
    ]);
    expect(events.filter((e) => e === "evicted")).toHaveLength(1);
    // Once the newcomer authenticates and the check ends without success, the next one evicts the checked connection.
    guard.connection(newcomer).authenticated("zone-2");
    finish();
    await check;
    const another = accept(guard);
    expect([checking.destroyed, another.destroyed]).toEqual([true, false]);
    // Every connection authenticated: the newcomer itself is refused.
    guard.connection(another).authenticated("zone-3");
    const refused = accept(guard);
    expect(refused.destroyed).toBe(true);
    expect(events.filter((e) => e === "refused")).toHaveLength(1);
    expect(guard.size).toBe(3);
  });

  it("closes a connection that has not authenticated within the timeout, after any check in progress ends", async () => {
    const guard = guardOf(10);
    const silent = accept(guard);
    const proven = accept(guard);
    const slow = accept(guard);
    let fail: (e: Error) => void = () => undefined;
    const check = guard
      .connection(slow)
      .authenticating(new Promise<void>((_resolve, reject) => (fail = reject)));
    check.catch(() => undefined); // its failure is asserted below
    guard.connection(proven).authenticated("zone-1");
    await vi.advanceTimersByTimeAsync(1_100);
    expect([silent.destroyed, proven.destroyed, slow.destroyed]).toEqual([true, false, false]);
    fail(new Error("bad token"));
    await expect(check).rejects.toThrow("bad token");
    expect(slow.destroyed).toBe(true);
    expect(events.filter((e) => e === "unauthenticated_timeout")).toHaveLength(2);
  });

  it("keeps an identity to its share of connections, closing its oldest", () => {
    const guard = guardOf(10, { maxConnectionsPerIdentity: 2 });
    const [a, b, c] = [accept(guard), accept(guard), accept(guard)];
    const other = accept(guard);
    for (const s of [a, b, c]) guard.connection(s).authenticated("zone-1");
    guard.connection(other).authenticated("zone-2");
    guard.connection(accept(guard)).authenticated(undefined); // trusted without an identity: no share
    expect([a.destroyed, b.destroyed, c.destroyed, other.destroyed]).toEqual([
      true,
      false,
      false,
      false,
    ]);
    expect(events.filter((e) => e === "evicted")).toHaveLength(1);
  });
  it("on the CLI's admin listener, one admin token holding every slot with authenticated streams cannot lock out another token", () => {
    // The admin listener's limits as the CLI resolves them, with the 128 slots.
    const { admin } = resolveConnectionLimits(
      { adminMaxConnections: 128 },
      "global",
      silentLogger,
      noopMetrics,
      4_096,
    );
    expect(admin.maxConnectionsPerIdentity).toBe(16);
    const guard = new ConnectionGuard({
      ...admin,
      authTimeoutMs: 1_000,
      metrics: { connection: (_l, e) => events.push(e) },
    });
    // A read-only token (say Prometheus's) opens 128 connections, each holding a status event stream.
    const held = Array.from({ length: 128 }, () => {
      const socket = accept(guard);
      guard.connection(socket).authenticated("token-prometheus");
      return socket;
    });
    expect(held.filter((s) => !s.destroyed)).toHaveLength(16);
    // The operator's connection gets in and authenticates.
    const operator = accept(guard);
    expect(operator.destroyed).toBe(false);
    guard.connection(operator).authenticated("token-operator");
    expect(operator.destroyed).toBe(false);
    // The loopback listener's tokenless clients are trusted without an identity: no share to exceed.
    const local = Array.from({ length: 20 }, () => accept(guard));
    for (const socket of local) guard.connection(socket).authenticated(undefined);
    expect(local.filter((s) => s.destroyed)).toHaveLength(0);
    expect(events.filter((e) => e === "refused")).toHaveLength(0);
  });
});
