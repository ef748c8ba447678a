// Attackers that hold connections and streams open against a real global, re-opening whatever the
// global closes for as long as they flood: hello-less mux streams under one zone token, tokenless
// connections (idle TCP, a half-duplex Push whose body never ends, a mux stream without a token), and
// the admin slowloris (HTTP/2 requests never finished, HTTP/1.1 heads at one byte per 15 s).
import { readdirSync, readFileSync } from "node:fs";
import * as http2 from "node:http2";
import * as net from "node:net";

/** A running flood: what it did so far, and how to stop it. */
export interface Flood {
  /** Connections opened (first ones and re-opens). */
  connections: number;
  /** Streams or requests opened (first ones and re-opens). */
  streams: number;
  /** Connections the global closed. */
  closedByGlobal: number;
  /** Connections open now. */
  readonly open: () => number;
  /** Stops re-opening and closes everything it holds. */
  stop(): void;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Resident set size of process `pid` in MiB. */
export function rssMiB(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Math.round(Number(m?.[1] ?? 0) / 1024);
}

/** File descriptors process `pid` holds. */
export const descriptors = (pid: number): number => readdirSync(`/proc/${pid}/fd`).length;

/**
 * Keeps `slots` connections up: `open(slot)` opens one and returns its closer and a promise that
 * settles when it is gone; a gone slot is re-opened after `reopenMs` while the flood runs. Opening is
 * spread in batches of 100 so the event loop breathes.
 */
function keep(
  slots: number,
  reopenMs: number,
  open: (flood: Flood) => { closed: Promise<boolean>; close: () => void },
): Flood {
  let running = true;
  const closers = new Set<() => void>();
  const flood: Flood = {
    connections: 0,
    streams: 0,
    closedByGlobal: 0,
    open: () => closers.size,
    stop: () => {
      running = false;
      for (const close of closers) close();
      closers.clear();
    },
  };
  const slot = async (): Promise<void> => {
    // Bounded by the flood: it stops when stop() is called.
    while (running) {
      flood.connections++;
      const c = open(flood);
      closers.add(c.close);
      const byGlobal = await c.closed;
      closers.delete(c.close);
      if (byGlobal && running) flood.closedByGlobal++;
      if (running) await sleep(reopenMs);
    }
  };
  void (async () => {
    for (let i = 0; i < slots && running; i++) {
      void slot();
      if (i % 100 === 99) await sleep(20);
    }
  })();
  return flood;
}

/** An HTTP/2 connection for a flood; `closed` resolves true when the global closed it. */
function h2Connection(url: string): {
  session: http2.ClientHttp2Session;
  closed: Promise<boolean>;
  close: () => void;
} {
  const session = http2.connect(url);
  let byUs = false;
  session.on("error", () => undefined); // the global closing or resetting it is what the flood provokes
  const closed = new Promise<boolean>((resolve) => session.once("close", () => resolve(!byUs)));
  return {
    session,
    closed,
    close: () => {
      byUs = true;
      session.destroy();
    },
  };
}

/** Opens a request on `session` that never ends its body, re-opened (after `reopenMs`) whenever it closes while `alive()`. */
function endlessRequest(
  session: http2.ClientHttp2Session,
  headers: http2.OutgoingHttpHeaders,
  body: Uint8Array,
  flood: Flood,
  alive: () => boolean,
  reopenMs: number,
): void {
  if (!alive() || session.closed || session.destroyed) return;
  let stream: http2.ClientHttp2Stream;
  try {
    stream = session.request(headers, { endStream: false });
  } catch {
    // The session is closing (GOAWAY or destroyed): its close re-opens the whole connection.
    return;
  }
  flood.streams++;
  stream.on("error", () => undefined); // refusals and resets are what the flood provokes
  stream.on("data", () => undefined); // read what the global answers, so its end is seen
  if (body.byteLength > 0) stream.write(body);
  stream.once("close", () =>
    setTimeout(() => endlessRequest(session, headers, body, flood, alive, reopenMs), reopenMs),
  );
}

/** gRPC headers of a mux stream as zone `zone` (with `token`, if any). */
export function muxHeaders(zone: string, token?: string): http2.OutgoingHttpHeaders {
  return {
    ":method": "POST",
    ":path": "/kds.mux.v1.MultiplexService/StreamMessage",
    "content-type": "application/grpc",
    te: "trailers",
    "client-id": zone,
    ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
  };
}

/**
 * One zone token holding `streams` mux streams that never say hello, over connections of `perConnection`
 * streams; each stream is re-opened `reopenMs` after it ends, each connection when the global closes it.
 */
export function helloLessStreams(
  url: string,
  zone: string,
  token: string,
  streams: number,
  perConnection = 100,
  reopenMs = 20,
): Flood {
  let running = true;
  const flood = keep(Math.ceil(streams / perConnection), 50, (f) => {
    const c = h2Connection(url);
    const alive = (): boolean => running && !c.session.closed && !c.session.destroyed;
    for (let i = 0; i < perConnection; i++)
      endlessRequest(c.session, muxHeaders(zone, token), new Uint8Array(0), f, alive, reopenMs);
    return c;
  });
  const stop = flood.stop;
  flood.stop = () => {
    running = false;
    stop();
  };
  return flood;
}

/** The kinds of tokenless connections {@link tokenlessConnections} holds. */
export type TokenlessKind = "tcp" | "push" | "mux";

/**
 * `count` connections without any credentials, a third of each kind: raw TCP that sends nothing; HTTP/2
 * with a half-duplex Push whose body never ends (Connect protocol); HTTP/2 with a mux stream without a
 * token whose body never ends. Requests are re-opened as they end, connections as the global closes them.
 */
export function tokenlessConnections(
  port: number,
  count: number,
  reopenMs = 10,
): Flood & { readonly byKind: Record<TokenlessKind, number> } {
  const kinds: TokenlessKind[] = ["tcp", "push", "mux"];
  const byKind: Record<TokenlessKind, number> = { tcp: 0, push: 0, mux: 0 };
  let running = true;
  let next = 0;
  const flood = keep(count, reopenMs, (f) => {
    const kind = kinds[next++ % kinds.length] as TokenlessKind;
    byKind[kind]++;
    if (kind === "tcp") {
      const socket = net.connect({ host: "127.0.0.1", port });
      let byUs = false;
      socket.on("error", () => undefined); // a reset by the global is what this flood provokes
      socket.resume();
      return {
        closed: new Promise<boolean>((resolve) => socket.once("close", () => resolve(!byUs))),
        close: () => {
          byUs = true;
          socket.destroy();
        },
      };
    }
    const c = h2Connection(`http://127.0.0.1:${port}`);
    const alive = (): boolean => running && !c.session.closed && !c.session.destroyed;
    const headers: http2.OutgoingHttpHeaders =
      kind === "push"
        ? {
            ":method": "POST",
            ":path": "/kds.mux.v1.HalfDuplexService/Push",
            "content-type": "application/proto",
            "connect-protocol-version": "1",
            "client-id": "zone-1",
          }
        : muxHeaders("zone-1");
    // A few bytes of body, never the end.
    endlessRequest(c.session, headers, new Uint8Array([0x0a, 0x24]), f, alive, reopenMs * 10);
    return c;
  });
  const stop = flood.stop;
  return Object.assign(flood, {
    byKind,
    stop: () => {
      running = false;
      stop();
    },
  });
}

/** The kinds of slow admin connections {@link adminSlowloris} holds. */
export type SlowKind = "h2" | "h1-line" | "h1-head";

/**
 * `count` tokenless connections to an admin listener: a third HTTP/2 with an admin Get call whose body
 * never ends (re-opened as it ends); a third HTTP/1.1 sending a request one byte per `byteEveryMs`
 * from the start; a third HTTP/1.1 sending its request line at once, then its headers one byte per
 * `byteEveryMs`. Connections the global closes are opened again.
 */
export function adminSlowloris(
  port: number,
  count: number,
  byteEveryMs = 15_000,
): Flood & { readonly byKind: Record<SlowKind, number> } {
  const kinds: SlowKind[] = ["h2", "h1-line", "h1-head"];
  const byKind: Record<SlowKind, number> = { h2: 0, "h1-line": 0, "h1-head": 0 };
  let running = true;
  let next = 0;
  const flood = keep(count, 10, (f) => {
    const kind = kinds[next++ % kinds.length] as SlowKind;
    byKind[kind]++;
    if (kind === "h2") {
      const c = h2Connection(`http://127.0.0.1:${port}`);
      const alive = (): boolean => running && !c.session.closed && !c.session.destroyed;
      endlessRequest(
        c.session,
        {
          ":method": "POST",
          ":path": "/kds.admin.v1.AdminService/Get",
          "content-type": "application/proto",
          "connect-protocol-version": "1",
        },
        new Uint8Array([0x0a]),
        f,
        alive,
        100,
      );
      return c;
    }
    const socket = net.connect({ host: "127.0.0.1", port });
    let byUs = false;
    socket.on("error", () => undefined); // a reset by the global is what this flood provokes
    socket.resume();
    f.streams++;
    const request =
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slowloris\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let at = 0;
    if (kind === "h1-head") {
      at = request.indexOf("\r\n") + 2;
      socket.write(request.slice(0, at));
    }
    const drip = setInterval(() => {
      if (at < request.length && !socket.destroyed) socket.write(request[at++] as string);
    }, byteEveryMs);
    socket.write(request[at++] as string);
    return {
      closed: new Promise<boolean>((resolve) =>
        socket.once("close", () => {
          clearInterval(drip);
          resolve(!byUs);
        }),
      ),
      close: () => {
        byUs = true;
        clearInterval(drip);
        socket.destroy();
      },
    };
  });
  const stop = flood.stop;
  return Object.assign(flood, {
    byKind,
    stop: () => {
      running = false;
      stop();
    },
  });
}
