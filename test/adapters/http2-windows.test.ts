// The zone's HTTP/2 windows: a real node:http2 server reports what the client
// announced (SETTINGS initialWindowSize for each stream, a WINDOW_UPDATE for
// the connection), so a sender may really be that far ahead.
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import {
  DEFAULT_HTTP2_WINDOW_BYTES,
  windowedSessionManager,
} from "../../src/adapters/node/http2-windows.ts";

let server: http2.Http2Server | undefined;

afterEach(async () => {
  for (const session of sessions) session.close();
  sessions.clear();
  const s = server;
  server = undefined;
  if (s !== undefined) await new Promise<void>((resolve) => s.close(() => resolve()));
});

/** A server that answers each request, once its body has ended, with the windows its client announced. */
async function windowReporter(): Promise<string> {
  server = http2.createServer();
  server.on("stream", (stream) => {
    stream.resume();
    stream.on("end", () => {
      const session = stream.session;
      stream.respond({ ":status": 200 });
      stream.end(
        JSON.stringify({
          stream: session?.remoteSettings.initialWindowSize,
          connection: session?.state.remoteWindowSize,
        }),
      );
    });
  });
  const s = server;
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

/** Client sessions to close after the test. */
const sessions = new Set<http2.ClientHttp2Session>();

/** Posts a body and returns the answer; the body follows the request, so the connection's WINDOW_UPDATE reaches the server first. */
async function ask(
  manager: ReturnType<typeof windowedSessionManager>,
): Promise<{ stream: number; connection: number }> {
  const stream = await manager.request("POST", "/", {}, {});
  sessions.add(stream.session as http2.ClientHttp2Session);
  stream.end("x");
  let text = "";
  stream.setEncoding("utf8");
  for await (const chunk of stream) text += chunk as string;
  return JSON.parse(text) as { stream: number; connection: number };
}

describe("windowedSessionManager", () => {
  it("announces its window for each stream and for the connection", async () => {
    const url = await windowReporter();
    const manager = windowedSessionManager(url);
    expect(await ask(manager)).toEqual({
      stream: DEFAULT_HTTP2_WINDOW_BYTES,
      connection: DEFAULT_HTTP2_WINDOW_BYTES,
    });
    // A second stream on the same connection has the same windows (less the few bytes of the first answer, not yet returned).
    const second = await ask(manager);
    expect(second.stream).toBe(DEFAULT_HTTP2_WINDOW_BYTES);
    expect(second.connection).toBeGreaterThan(DEFAULT_HTTP2_WINDOW_BYTES - 1024);
    expect(sessions.size).toBe(1);
  });

  it("takes another size and keeps the caller's other settings", async () => {
    const url = await windowReporter();
    const manager = windowedSessionManager(
      url,
      { settings: { maxConcurrentStreams: 7 } },
      1024 * 1024,
    );
    expect(await ask(manager)).toEqual({ stream: 1024 * 1024, connection: 1024 * 1024 });
    expect([...sessions][0]?.localSettings.maxConcurrentStreams).toBe(7);
  });
});
