import { getEventListeners } from "node:events";
import type { PendingQuery, Row } from "postgres";
import { describe, expect, it } from "vitest";
import { silentLogger } from "../../src/log.ts";
import { CancelRequests } from "../../src/store/postgres/cancels.ts";
import { guarded } from "../../src/store/postgres/guard.ts";

const cancels = new CancelRequests(silentLogger, "test");

/** A statement in flight until `finish()` or its cancel, as postgres.js's PendingQuery is awaited and cancelled. */
class FakeStatement {
  cancelled = false;
  readonly #done: Promise<Row[]>;
  #resolve!: (rows: Row[]) => void;
  #reject!: (error: Error) => void;
  constructor() {
    this.#done = new Promise<Row[]>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
  }
  finish(): void {
    this.#resolve([]);
  }
  cancel(): void {
    this.cancelled = true;
    this.#reject(new Error("canceling statement due to user request"));
  }
  // biome-ignore lint/suspicious/noThenProperty: a PendingQuery is a thenable, and so is its stand-in
  then<A, B>(ok: (rows: Row[]) => A, fail: (error: unknown) => B): Promise<A | B> {
    return this.#done.then(ok, fail);
  }
  get query(): PendingQuery<Row[]> {
    return this as unknown as PendingQuery<Row[]>;
  }
}

describe("guarded statements", () => {
  it("holds one abort listener per signal however many statements run under it, and an abort cancels those in flight only", async () => {
    const stop = new AbortController();
    const statements = Array.from({ length: 25 }, () => new FakeStatement());
    const runs = statements.map((s) =>
      guarded(stop.signal, "test statement", cancels, (run) => run(s.query)),
    );
    await Promise.resolve();
    expect(getEventListeners(stop.signal, "abort")).toHaveLength(1);
    for (const s of statements.slice(0, 5)) s.finish();
    await Promise.all(runs.slice(0, 5));
    stop.abort();
    const ends = await Promise.allSettled(runs);
    expect(ends.slice(0, 5).every((e) => e.status === "fulfilled")).toBe(true);
    expect(ends.slice(5).every((e) => e.status === "rejected")).toBe(true);
    expect(statements.map((s) => s.cancelled)).toEqual(statements.map((_, i) => i >= 5));
  });

  it("refuses to start a statement once the signal is aborted", async () => {
    const stop = new AbortController();
    stop.abort();
    const s = new FakeStatement();
    await expect(
      guarded(stop.signal, "late statement", cancels, (run) => run(s.query)),
    ).rejects.toThrow(/late statement/);
    expect(s.cancelled).toBe(false);
  });
});
