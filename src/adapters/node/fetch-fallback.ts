/**
 * Serving a fetch-style handler (web `Request` in, `Response` out) as the
 * fallback of connect-node's adapter, for the paths no Connect route owns:
 * the observation endpoints (`/metrics`, the status page). Response bodies
 * stream, so a long-lived event stream works; the handler's request signal
 * aborts when the client goes away.
 *
 * @module
 */
import type { connectNodeAdapter } from "@connectrpc/connect-node";
import type * as http from "node:http";
import type * as http2 from "node:http2";

/** What connect-node's adapter calls for paths no route owns. */
export type NodeFallback = NonNullable<Parameters<typeof connectNodeAdapter>[0]["fallback"]>;

/** A fetch-style handler that may decline a request (undefined: not found). */
export type OptionalFetchHandler = (request: Request) => Promise<Response | undefined>;

/** Turns `handler` into a node request listener; declined requests get 404. */
export function fetchFallback(handler: OptionalFetchHandler): NodeFallback {
  return (req, response) => {
    const res = response as http.ServerResponse | http2.Http2ServerResponse;
    const abort = new AbortController();
    res.once("close", () => abort.abort());
    void serve(handler, req, res, abort.signal).catch((error: unknown) => {
      // The client went away mid-body, or the handler failed: nothing more can reach the client.
      if (!res.headersSent) {
        res.writeHead(500, { "content-type": "text/plain" });
        res.end(`internal error: ${error instanceof Error ? error.message : String(error)}\n`);
      } else res.destroy(error instanceof Error ? error : undefined);
    });
  };
}

async function serve(
  handler: OptionalFetchHandler,
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
  signal: AbortSignal,
): Promise<void> {
  const host = req.headers[":authority"] ?? req.headers.host ?? "localhost";
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (name.startsWith(":") || value === undefined) continue;
    headers.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  // Only GET and HEAD are served by these endpoints; a body is never read.
  const request = new Request(`http://${String(host)}${req.url ?? "/"}`, {
    method: req.method ?? "GET",
    headers,
    signal,
  });
  const response =
    (await handler(request)) ??
    new Response("not found\n", { status: 404, headers: { "content-type": "text/plain" } });
  const head: Record<string, string> = {};
  response.headers.forEach((value, name) => {
    head[name] = value;
  });
  res.writeHead(response.status, head);
  if (response.body === null) {
    res.end();
    return;
  }
  const reader = response.body.getReader();
  const cancel = (): void => void reader.cancel().catch(() => undefined); // the client left; the stream's source stops
  signal.addEventListener("abort", cancel, { once: true });
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      // Respect the socket's backpressure: wait for it to drain (or the client to leave).
      if (!(res as http.ServerResponse).write(value)) await drained(res, signal);
    }
    res.end();
  } finally {
    signal.removeEventListener("abort", cancel);
  }
}

function drained(
  res: http.ServerResponse | http2.Http2ServerResponse,
  signal: AbortSignal,
): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = (): void => {
      res.off("drain", done);
      signal.removeEventListener("abort", done);
      resolve();
    };
    res.once("drain", done);
    signal.addEventListener("abort", done, { once: true });
  });
}
