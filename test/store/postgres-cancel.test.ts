// An abort cancels the PostgreSQL statement in flight: postgres.js sends the
// cancel request on a connection of its own. When that connection fails (the
// server stopping under it, or unreachable), the failure must not escape as an
// unhandled rejection (which ends a kds-mux process with exit 1), and closing
// the store waits for the request to settle, so an embedded server is never
// stopped under it (issue 20: a SIGTERMed global exited 1 with ECONNRESET).
import { createServer, Socket, type Server } from "node:net";
import { afterAll, afterEach, beforeEach, expect, it } from "vitest";
import type { Logger } from "../../src/log.ts";
import { PostgresStore } from "../../src/store/postgres.ts";
import { freshDatabase, type TestDatabase } from "../support/postgres.ts";
import { mesh, types } from "./fixtures.ts";

/**
 * A TCP proxy in front of the test server. `hold()` stops passing on what the
 * clients send (their statements wait); `stallNew()` makes every new connection
 * (a cancel request) wait unanswered until `resetStalled()` resets it.
 */
class TcpProxy {
  readonly #server: Server;
  readonly #forwarded = new Set<Socket>();
  readonly #stalled = new Set<Socket>();
  #holding = false;
  #held: Array<() => void> = [];
  #stallNew = false;
  heldBytes = 0;
  stalledSeen = 0;

  constructor(target: { host: string; port: number }) {
    this.#server = createServer((client) => {
      if (this.#stallNew) {
        this.stalledSeen++;
        this.#stalled.add(client);
        client.on("error", () => undefined); // the test resets it: its error is the point
        client.resume(); // read the cancel request, answer nothing
        return;
      }
      const upstream = new Socket();
      upstream.connect(target.port, target.host);
      this.#forwarded.add(client);
      const drop = (): void => {
        this.#forwarded.delete(client);
        client.destroy();
        upstream.destroy();
      };
      client.on("error", drop).on("close", drop);
      upstream.on("error", drop).on("close", drop);
      upstream.on("data", (d: Buffer) => client.write(d));
      client.on("data", (d: Buffer) => {
        if (!this.#holding) upstream.write(d);
        else {
          this.heldBytes += d.length;
          this.#held.push(() => upstream.write(d));
        }
      });
    });
  }

  async listen(): Promise<number> {
    await new Promise<void>((r) => this.#server.listen(0, "127.0.0.1", r));
    return (this.#server.address() as { port: number }).port;
  }

  /** Connections passed on to the server and still open. */
  get forwarded(): number {
    return this.#forwarded.size;
  }

  hold(): void {
    this.#holding = true;
  }

  resume(): void {
    this.#holding = false;
    for (const send of this.#held.splice(0)) send();
  }

  stallNew(): void {
    this.#stallNew = true;
  }

  resetStalled(): void {
    for (const s of this.#stalled) s.resetAndDestroy();
    this.#stalled.clear();
  }

  async close(): Promise<void> {
    for (const s of [...this.#forwarded, ...this.#stalled]) s.destroy();
    await new Promise((r) => this.#server.close(r));
  }
}

/** Polls `ok` every 10 ms until it holds (a stuck condition fails the test by its timeout). */
async function until(ok: () => boolean): Promise<void> {
  while (!ok()) await new Promise((r) => setTimeout(r, 10));
}

const databases: TestDatabase[] = [];
afterAll(async () => {
  for (const db of databases) await db.drop();
});

const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
beforeEach(() => {
  unhandled.length = 0;
  process.on("unhandledRejection", onUnhandled);
});
afterEach(() => {
  process.off("unhandledRejection", onUnhandled);
});

it("a cancel request that fails is no unhandled rejection, and close() waits for it to settle", async () => {
  const db = await freshDatabase();
  databases.push(db);
  const target = new URL(db.url);
  const proxy = new TcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
  const port = await proxy.listen();
  const url = new URL(db.url);
  url.port = String(port);
  const debug: string[] = [];
  const logger: Logger = {
    debug: (message) => void debug.push(message),
    info: () => undefined,
    warn: () => undefined,
    error: () => undefined,
  };
  const events: string[] = [];
  try {
    const store = await PostgresStore.open(types, { url: url.toString(), logger });
    let closed = false;
    try {
      await store.put(mesh("a")); // the pool's connection is open
      proxy.hold();
      const controller = new AbortController();
      const reading = store.get("Mesh", "", "a", { signal: controller.signal }).then(
        () => "read",
        () => "refused",
      );
      await until(() => proxy.heldBytes > 0); // the statement is on its way and waits
      proxy.stallNew();
      controller.abort(new Error("stop"));
      await until(() => proxy.stalledSeen > 0); // the cancel request's own connection
      proxy.resume();
      await reading; // the statement ran (or was refused for the abort): nothing waits on the pool
      const closing = store.close().then(() => {
        closed = true;
        events.push("store closed");
      });
      await until(() => proxy.forwarded === 0); // the pool and the LISTEN connection have ended
      await new Promise((r) => setTimeout(r, 50)); // time for close() to resolve, were it not waiting
      events.push("cancel request reset");
      proxy.resetStalled(); // the server goes away under the cancel request
      await closing;
      await new Promise((r) => setTimeout(r, 50)); // time for an unhandled rejection to surface
    } finally {
      if (!closed) await store.close();
    }
  } finally {
    await proxy.close();
  }
  expect(unhandled).toEqual([]);
  expect(events).toEqual(["cancel request reset", "store closed"]);
  expect(debug.some((m) => m.includes("cancel"))).toBe(true);
}, 60_000);
