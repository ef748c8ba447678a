// The CLI's words for an admin call that got no answer: "could not connect"
// (refused, no such host, timed out) told apart from "connected, then the
// server broke the session" (GOAWAY or RST_STREAM with an error code, a TLS
// alert, an answer in another protocol), which names what the server did and
// what to check. Each case against a real loopback server doing it.
import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import type { AddressInfo } from "node:net";
import * as tls from "node:tls";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminClient, adminError, call } from "../../src/cli/admin-client.ts";
import { connectionFailure } from "../../src/cli/connection-failure.ts";
import { KdsError } from "../../src/errors.ts";
import { createCa, type Pem, type TestCa } from "../support/certs.ts";

const servers: net.Server[] = [];
let ca: TestCa;
let serverPem: Pem;

beforeAll(async () => {
  ca = await createCa("connection-failure-ca");
  serverPem = await ca.issue({ commonName: "localhost" });
});
afterAll(() => {
  for (const server of servers) server.close();
});

async function listen(server: net.Server): Promise<number> {
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as AddressInfo).port;
}

/** The message the CLI prints for `get Mesh` against `url`. */
async function failure(url: string, caCert?: string): Promise<string> {
  const error = await call({ url, caCert }, () =>
    adminClient({ url, caCert }).get({ type: "Mesh" }),
  ).then(
    () => new Error("the call succeeded"),
    (e: unknown) => e,
  );
  expect(KdsError.is(error) && error.code === "transport").toBe(true);
  return (error as Error).message;
}

describe("could not connect", () => {
  it("says so for a refused connection, and names the address to check", async () => {
    const message = await failure("http://127.0.0.1:1");
    expect(message).toMatch(
      /^could not connect to the admin API at http:\/\/127\.0\.0\.1:1 \(connect ECONNREFUSED 127\.0\.0\.1:1\); check that a kds-mux global or zone runs there and that --server is right/,
    );
  });

  it("classes unresolvable names and timeouts with refusals (the errors Node raises for them)", () => {
    for (const code of ["ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "EHOSTUNREACH"]) {
      const cause = Object.assign(new Error(`${code} example`), { code });
      expect(connectionFailure(new Error("wrapped", { cause }))).toEqual({
        kind: "not_connected",
        reason: `${code} example`,
      });
    }
    expect(connectionFailure(new Error("no code"))).toBeUndefined();
  });
});

describe("connected, then the server broke the session", () => {
  it("names a GOAWAY's error code and asks about the runtime and proxies", async () => {
    const server = http2.createServer();
    server.on("session", (session) => session.goaway(http2.constants.NGHTTP2_PROTOCOL_ERROR));
    const port = await listen(server);
    const message = await failure(`http://127.0.0.1:${port}`);
    expect(message).toContain(
      `connected to http://127.0.0.1:${port}, but the server ended the HTTP/2 session with GOAWAY PROTOCOL_ERROR (0x1) before answering`,
    );
    expect(message).toMatch(/its runtime .* proxy or load balancer in between/);
    expect(message).not.toMatch(/could not connect|cannot reach/);
  });

  it("names an RST_STREAM's error code", async () => {
    const server = http2.createServer();
    server.on("stream", (stream) => {
      stream.on("error", () => undefined); // the reset below is the test's doing
      stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
    });
    const port = await listen(server);
    expect(await failure(`http://127.0.0.1:${port}`)).toContain(
      "but the server reset the HTTP/2 stream with RST_STREAM REFUSED_STREAM (0x7) before answering",
    );
  });

  it("tells an HTTP/1.1-only server (or proxy) that answers the HTTP/2 preface", async () => {
    const port = await listen(http.createServer((_request, response) => response.end("hi")));
    const message = await failure(`http://127.0.0.1:${port}`);
    expect(message).toContain("but the server answered in a protocol other than HTTP/2");
    expect(message).toContain("a proxy or load balancer in between that speaks only HTTP/1.1");
  });

  it("names a TLS alert: a TLS server offering only HTTP/1.1 (ALPN)", async () => {
    const port = await listen(
      tls.createServer({ ...serverPem, ALPNProtocols: ["http/1.1"] }, (socket) => socket.end()),
    );
    const message = await failure(`https://127.0.0.1:${port}`, ca.cert);
    expect(message).toContain('but the server sent the TLS alert "no application protocol"');
    expect(message).toContain("speaks only HTTP/1.1");
  });

  it("says when the server closed the connection without a word, and suggests https:// for a plaintext URL", async () => {
    const port = await listen(net.createServer((socket) => socket.destroy()));
    const message = await failure(`http://127.0.0.1:${port}`);
    expect(message).toContain("but the server closed the connection before answering");
    expect(message).toContain("try https://");
  });

  it("says https:// met a plaintext server", async () => {
    const port = await listen(http.createServer((_request, response) => response.end("hi")));
    expect(await failure(`https://127.0.0.1:${port}`, ca.cert)).toContain(
      "but the server answered in a protocol other than TLS; it does not speak TLS there: use an http:// --server",
    );
  });

  it("tells a certificate it cannot verify from a broken session", async () => {
    const port = await listen(http2.createSecureServer({ ...serverPem }));
    expect(await failure(`https://127.0.0.1:${port}`)).toMatch(
      /^connected to https:\/\/127\.0\.0\.1:\d+, but could not verify its TLS certificate \(.+\); pass --ca-cert/,
    );
  });

  it("leaves answers alone: a refusal the server sent keeps its code and words", () => {
    const cause = Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" });
    const answered = new ConnectError(
      "no admin token",
      Code.Unauthenticated,
      { "kds-error-code": "unauthenticated" },
      undefined,
      cause,
    );
    const error = adminError(answered, "http://127.0.0.1:1");
    expect(error.code).toBe("unauthenticated");
    expect(error.message).toBe("no admin token");
  });
});
