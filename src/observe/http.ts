/**
 * The observation endpoints of an admin listener as one fetch-style handler:
 *
 * - `GET /metrics`: the Prometheus text format;
 * - `GET /`: the live status page (one HTML document, script inlined);
 * - `GET /status.json`: what the page shows, once;
 * - `GET /status/events`: the same as server-sent events, a fresh snapshot
 *   after every change (at most every {@link ObserveOptions.minIntervalMs})
 *   and at least every {@link ObserveOptions.refreshMs}.
 *
 * Web standards only; the node adapter mounts it with `fetchFallback`,
 * `Deno.serve` and `Bun.serve` through the fetch handler's `fallback`.
 *
 * @module
 */
import type { StatusFeed } from "./status-feed.ts";

/** Something that renders metrics in a text exposition format (a `PrometheusMetrics`). */
export interface MetricsText {
  /** The content type of {@link MetricsText.text}. */
  readonly contentType: string;
  /** The current figures. */
  text(): Promise<string>;
}

/** What the observation endpoints serve from. */
export interface ObserveOptions {
  /** Served at `GET /metrics`; without it `/metrics` is not found. */
  readonly metrics?: MetricsText;
  /** Served at `/status.json` and `/status/events`; without it they are not found. */
  readonly status?: StatusFeed;
  /** The status page's HTML, served at `GET /` (with `status`). */
  readonly page?: string;
  /** Longest time between two snapshots of the event stream. Default 2 s. */
  readonly refreshMs?: number;
  /** Shortest time between two snapshots of the event stream (bursts coalesce). Default 200 ms. */
  readonly minIntervalMs?: number;
}

const encoder = new TextEncoder();

/**
 * A handler for the observation endpoints. It answers the paths it owns and
 * resolves with undefined for any other, so it can sit in front of another
 * handler.
 */
export function observeHandler(
  options: ObserveOptions,
): (request: Request) => Promise<Response | undefined> {
  return async (request) => {
    const path = new URL(request.url).pathname;
    const { metrics, status, page } = options;
    const owned =
      (metrics !== undefined && path === "/metrics") ||
      (status !== undefined &&
        (path === "/status.json" ||
          path === "/status/events" ||
          (page !== undefined && path === "/")));
    if (!owned) return undefined;
    if (request.method !== "GET" && request.method !== "HEAD")
      return new Response("only GET and HEAD are served here\n", {
        status: 405,
        headers: { allow: "GET, HEAD" },
      });
    const head = request.method === "HEAD";
    if (path === "/metrics" && metrics !== undefined) {
      const body = await metrics.text();
      return new Response(head ? null : body, {
        headers: { "content-type": metrics.contentType, "cache-control": "no-store" },
      });
    }
    if (status === undefined) return undefined;
    if (path === "/" && page !== undefined)
      return new Response(head ? null : page, {
        headers: { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" },
      });
    if (path === "/status.json")
      return Response.json(await status.snapshot(), { headers: { "cache-control": "no-store" } });
    return new Response(
      head
        ? null
        : eventStream(
            status,
            request.signal,
            options.refreshMs ?? 2_000,
            options.minIntervalMs ?? 200,
          ),
      {
        headers: {
          "content-type": "text/event-stream; charset=utf-8",
          "cache-control": "no-store",
          "x-accel-buffering": "no",
        },
      },
    );
  };
}

/**
 * Server-sent events of `feed`: one `status` event per snapshot. Pulled: a
 * snapshot is taken only when the client has read the previous one, so a
 * slow client holds at most one event, never a queue.
 */
function eventStream(
  feed: StatusFeed,
  requestSignal: AbortSignal,
  refreshMs: number,
  minIntervalMs: number,
): ReadableStream<Uint8Array> {
  const stop = new AbortController();
  const onAbort = (): void => stop.abort();
  requestSignal.addEventListener("abort", onAbort, { once: true });
  let first = true;
  let sentVersion = -1;
  let sentAt = 0;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        if (first) {
          first = false;
          controller.enqueue(encoder.encode("retry: 1000\n\n"));
        } else {
          // Wait for a change (or the refresh period), then keep bursts apart.
          if (feed.version === sentVersion) await feed.changed(refreshMs, stop.signal);
          const wait = sentAt + minIntervalMs - Date.now();
          if (wait > 0) await sleep(wait, stop.signal);
        }
        if (stop.signal.aborted) return;
        sentVersion = feed.version;
        sentAt = Date.now();
        const snapshot = await feed.snapshot();
        controller.enqueue(encoder.encode(`event: status\ndata: ${JSON.stringify(snapshot)}\n\n`));
      },
      cancel() {
        requestSignal.removeEventListener("abort", onAbort);
        stop.abort();
      },
    },
    { highWaterMark: 0 },
  );
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}
