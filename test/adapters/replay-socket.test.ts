// replaySocket: a connection whose first bytes were read (to tell HTTP/2 from
// HTTP/1.1) handed to a node:http2 server as a stream that replays them, the
// way the admin listener does on Bun, whose node:http2 ignores socket.unshift.
import * as http2 from "node:http2";
import * as net from "node:net";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { afterEach, describe, expect, it } from "vitest";
import { replaySocket } from "../../src/adapters/node/replay-socket.ts";

const closers: (() => void)[] = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

/** A listener that reads `headBytes` bytes itself, then hands the connection to an h2c server. */
async function replayingServer(headBytes: number): Promise<{ url: string; peers: string[] }> {
  const peers: string[] = [];
  const h2 = http2.createServer((request, response) => {
    let body = 0;
    request.on("data", (chunk: Buffer) => (body += chunk.length));
    request.on("end", () => {
      if (request.url === "/close") request.stream.session?.destroy();
      else response.end(`${request.url} ${body}`);
    });
  });
  const server = net.createServer((socket) => {
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      head = Buffer.concat([head, chunk]);
      if (head.length < headBytes) return;
      socket.off("data", onData);
      socket.pause();
      const stream = replaySocket(socket, head) as Duplex & Partial<net.Socket>;
      // What Bun's node:http2 shows handlers as request.socket (Node's wraps the stream and shows no address).
      peers.push(`${stream.remoteAddress}:${stream.remotePort}`);
      h2.emit("connection", stream);
    };
    socket.on("data", onData);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => server.close());
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, peers };
}

function request(
  session: http2.ClientHttp2Session,
  path: string,
  body: Uint8Array,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":path": path, ":method": "POST" });
    let text = "";
    stream.setEncoding("utf8");
    stream.on("data", (chunk: string) => (text += chunk));
    stream.on("end", () => resolve(text));
    stream.on("error", reject);
    stream.end(body);
  });
}

describe("replaySocket", () => {
  it("serves HTTP/2 over a connection whose preface was already read, a body larger than its window", async () => {
    const served = await replayingServer(14); // "PRI * HTTP/2.0", as the admin listener reads it
    const session = http2.connect(served.url);
    closers.push(() => session.destroy());
    const big = new Uint8Array(300_000).fill(7); // more than the 64 KiB initial window: flow control runs through the stream
    const answers = await Promise.all([
      request(session, "/a", big),
      request(session, "/b", new Uint8Array(3)),
    ]);
    expect(answers).toEqual(["/a 300000", "/b 3"]);
    // The stream shows the client's address, as the socket does.
    expect(served.peers).toEqual([
      `${session.socket.localAddress}:${String(session.socket.localPort)}`,
    ]);
    expect(served.peers[0]).toMatch(/^127\.0\.0\.1:\d+$/);
  });

  it("closes the client's connection when the server destroys the session", async () => {
    const served = await replayingServer(14);
    const session = http2.connect(served.url);
    closers.push(() => session.destroy());
    expect(await request(session, "/a", new Uint8Array(1))).toBe("/a 1");
    const closed = new Promise((resolve) => session.once("close", resolve));
    session.on("error", () => undefined); // the reset of the open stream is expected; the close is what is checked
    // The server destroys the session instead of answering: the request ends with no answer (an empty body or a
    // stream error, by timing), and the connection closes.
    const outcome = await request(session, "/close", new Uint8Array(1)).then(
      (text) => text,
      (error: unknown) => error,
    );
    expect(outcome).not.toBe("/close 1");
    await closed;
    expect(session.destroyed).toBe(true);
  });
});
