// Scenarios for a listener serving HTTP/2 and HTTP/1.1 on one plaintext port
// (`serveRoutes` with httpVersion "both", as every admin listener is): h2c
// with prior knowledge (the CLI) and HTTP/1.1 (browsers, Prometheus) both
// answered, a request body larger than HTTP/2's first window included. Run by
// test/runtime/contract.ts on Deno and Bun, and by vitest on Node.
import * as http from "node:http";
import * as http2 from "node:http2";
import { serveRoutes } from "../../src/adapters/node/serve-global.ts";
import { check, equal } from "../contract/harness.ts";
import type { Scenario } from "../contract/scenarios.ts";

interface Answer {
  readonly status: number;
  readonly body: string;
}

function overHttp2(url: string, path: string, body: Uint8Array): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url);
    session.on("error", reject);
    const stream = session.request({ ":path": path, ":method": "POST" });
    let status = 0;
    let text = "";
    stream.setEncoding("utf8");
    stream.on("response", (headers) => (status = Number(headers[":status"])));
    stream.on("data", (chunk: string) => (text += chunk));
    stream.on("end", () => {
      session.close();
      resolve({ status, body: text });
    });
    stream.on("error", reject);
    stream.end(body);
  });
}

function overHttp1(url: string, path: string, body: Uint8Array): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      new URL(path, url),
      { method: "POST", agent: false },
      (response) => {
        let text = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => (text += chunk));
        response.on("end", () => resolve({ status: response.statusCode ?? 0, body: text }));
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}

/** The listener scenarios (every runtime). */
export const listenerScenarios: Scenario[] = [
  {
    name: "listener: one plaintext port answers h2c (prior knowledge) and HTTP/1.1",
    run: async () => {
      const served = await serveRoutes(() => undefined, {
        httpVersion: "both",
        fallback: (request, response) => {
          let bytes = 0;
          request.on("data", (chunk: Uint8Array) => (bytes += chunk.length));
          request.on("end", () => response.end(`${request.httpVersion} ${request.url} ${bytes}`));
        },
      });
      try {
        const big = new Uint8Array(200_000).map((_, i) => (i * 7919) % 251);
        const [h2, h1] = await Promise.all([
          overHttp2(served.url, "/status.json", big),
          overHttp1(served.url, "/metrics", new Uint8Array(5)),
        ]);
        equal(h2.status, 200, "the h2c answer's status");
        equal(h2.body, "2.0 /status.json 200000", "the h2c answer");
        equal(h1.status, 200, "the HTTP/1.1 answer's status");
        equal(h1.body, "1.1 /metrics 5", "the HTTP/1.1 answer");
        // A second h2c connection after an HTTP/1.1 one: each connection is told apart by its own first bytes.
        const again = await overHttp2(served.url, "/", new Uint8Array(1));
        check(again.body === "2.0 / 1", `a second h2c connection got "${again.body}"`);
      } finally {
        await served.close();
      }
    },
  },
];
