// A store call whose new pool connection does not become ready within the
// connect timeout runs again (its statement was never sent), and fails with
// store_unavailable only after three such attempts. The server sits behind a
// loopback proxy that can leave a new connection unanswered, as a busy
// process sees a connection whose handshake it could not finish in time.
import { createServer, connect, type Server, type Socket } from "node:net";
import postgres from "postgres";
import { afterAll, beforeAll, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import type { LogFields, Logger } from "../../src/log.ts";
import { PostgresStore } from "../../src/store/postgres.ts";
import { wasRolledBack } from "../../src/store/rolled-back.ts";
import { freshDatabase, type TestDatabase } from "../support/postgres.ts";
import { mesh, types } from "./fixtures.ts";

let database: TestDatabase;
beforeAll(async () => {
  database = await freshDatabase();
}, 120_000);
afterAll(async () => {
  await database?.drop();
});

/** A TCP proxy to the database that leaves the next `silent` new connections unanswered. */
class SilentProxy {
  silent = 0;
  /** Connections it left unanswered. */
  unanswered = 0;
  readonly #sockets = new Set<Socket>();
  private constructor(
    readonly server: Server,
    readonly url: string,
  ) {}

  static async start(target: URL): Promise<SilentProxy> {
    let proxy: SilentProxy | undefined;
    const server = createServer((client) => {
      const self = proxy as SilentProxy;
      self.#sockets.add(client);
      client.on("close", () => self.#sockets.delete(client));
      client.on("error", () => {
        // The store ends a timed-out connection with a reset: nothing to report on the proxy's side.
      });
      if (self.silent > 0) {
        self.silent -= 1;
        self.unanswered += 1;
        return; // reads nothing, answers nothing
      }
      const upstream = connect(Number(target.port || 5432), target.hostname);
      self.#sockets.add(upstream);
      upstream.on("close", () => self.#sockets.delete(upstream));
      upstream.on("error", () => client.destroy());
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
      client.pipe(upstream);
      upstream.pipe(client);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as { port: number }).port;
    const url = new URL(target.href);
    url.hostname = "127.0.0.1";
    url.port = String(port);
    proxy = new SilentProxy(server, url.href);
    return proxy;
  }

  /** Cuts every connection through it (the store's pool loses its open one). */
  cutAll(): void {
    for (const s of this.#sockets) s.destroy();
  }

  async stop(): Promise<void> {
    this.cutAll();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** A logger that keeps the store's warnings. */
function warnings(): { logger: Logger; seen: { message: string; fields: LogFields }[] } {
  const seen: { message: string; fields: LogFields }[] = [];
  const none = (): void => undefined;
  return {
    seen,
    logger: {
      debug: none,
      info: none,
      warn: (message, fields = {}) => seen.push({ message, fields }),
      error: none,
    },
  };
}

/**
 * Holds an exclusive lock on the store's resource table, so that a read of it
 * keeps the pool's open connection busy and the next call needs a new one.
 */
async function lockResources(url: string, schema: string): Promise<{ release(): Promise<void> }> {
  const admin = postgres(url, { max: 2, onnotice: () => undefined });
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let locked!: () => void;
  const isLocked = new Promise<void>((r) => (locked = r));
  const holding = admin.begin(async (tx) => {
    await tx.unsafe(`LOCK TABLE "${schema}".kds_resources IN ACCESS EXCLUSIVE MODE`);
    locked();
    await released;
  });
  try {
    await Promise.race([isLocked, holding]);
  } catch (error) {
    await admin.end();
    throw error;
  }
  let ended: Promise<void> | undefined;
  return {
    release: () => {
      release();
      ended ??= holding.then(() => admin.end());
      return ended;
    },
  };
}

/** Waits (at most 10 s) until a statement of this database waits for a lock. */
async function someoneWaits(url: string): Promise<void> {
  const admin = postgres(url, { max: 1, onnotice: () => undefined });
  try {
    for (let i = 0; i < 200; i++) {
      const [row] = await admin<{ n: number }[]>`
        SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock'`;
      if ((row?.n ?? 0) > 0) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error("no statement waited for the lock within 10 s");
  } finally {
    await admin.end();
  }
}

/** A store through `proxy` whose pool's open connection is busy with a read held by a lock. */
interface BusyStore {
  readonly store: PostgresStore;
  readonly held: Promise<unknown>;
  /** Lets the held read finish. */
  release(): Promise<void>;
  /** Releases the lock and closes the store and the proxy. */
  close(): Promise<void>;
}

async function busyStore(
  schema: string,
  logger: Logger,
): Promise<BusyStore & { proxy: SilentProxy }> {
  const proxy = await SilentProxy.start(new URL(database.url));
  let store: PostgresStore | undefined;
  let lock: { release(): Promise<void> } | undefined;
  const close = async (): Promise<void> => {
    await lock?.release();
    await store?.close();
    await proxy.stop();
  };
  try {
    store = await PostgresStore.open(types, {
      url: proxy.url,
      schema,
      // Long enough for a handshake through the proxy on a loaded machine; the silent ones time out regardless.
      connectTimeoutMs: 3_000,
      maxConnections: 2,
      logger,
    });
    await store.put(mesh("a"));
    lock = await lockResources(database.url, schema);
    const held = store.get("Mesh", "", "a");
    held.catch(() => {
      // Awaited by the test; this only keeps a failure before then from going unhandled.
    });
    await someoneWaits(database.url);
    const release = (lock as { release(): Promise<void> }).release;
    return { proxy, store, held, release, close };
  } catch (error) {
    await close();
    throw error;
  }
}

it("runs a call again when its new connection times out, and the call succeeds", async () => {
  const { logger, seen } = warnings();
  const busy = await busyStore(`connect_retry_${process.pid}`, logger);
  try {
    busy.proxy.silent = 1;
    expect(await busy.store.revision()).toBe(1);
    expect(busy.proxy.unanswered).toBe(1);
    expect(seen.map((w) => [w.message, w.fields.call, w.fields.attempt])).toEqual([
      ["PostgreSQL store: a new connection timed out; trying the call again", "revision", 1],
    ]);
    await busy.release();
    expect(((await busy.held) as { meta: { name: string } } | undefined)?.meta.name).toBe("a");
  } finally {
    await busy.close();
  }
}, 60_000);

it("fails a write with store_unavailable, written in none of its parts, after three new connections that time out", async () => {
  const { logger, seen } = warnings();
  const busy = await busyStore(`connect_fail_${process.pid}`, logger);
  try {
    busy.proxy.silent = 10;
    const failure = await busy.store.put(mesh("b")).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(KdsError.is(failure, "store_unavailable")).toBe(true);
    expect((failure as Error).message).toMatch(
      /^apply: cannot reach PostgreSQL at 127\.0\.0\.1:\d+\/.*CONNECT_TIMEOUT/,
    );
    expect(wasRolledBack(failure)).toBe(true);
    expect(busy.proxy.unanswered).toBe(3);
    expect(seen.map((w) => [w.fields.call, w.fields.attempt])).toEqual([
      ["apply", 1],
      ["apply", 2],
    ]);
    // Back: the same store writes again, and nothing of the failed write is there.
    busy.proxy.silent = 0;
    await busy.release();
    expect(((await busy.held) as { meta: { name: string } } | undefined)?.meta.name).toBe("a");
    expect(await busy.store.revision()).toBe(1);
    await busy.store.put(mesh("b"));
    expect(await busy.store.revision()).toBe(2);
  } finally {
    await busy.close();
  }
}, 90_000);
