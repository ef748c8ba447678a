/**
 * The observation endpoints of an admin listener as one fetch-style handler:
 * `GET /metrics` (the Prometheus text format). Web standards only; the node
 * adapter mounts it with `fetchFallback`, `Deno.serve` and `Bun.serve`
 * through the fetch handler's `fallback`.
 *
 * @module
 */

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
}

/**
 * A handler for the observation endpoints. It answers the paths it owns and
 * resolves with undefined for any other, so it can sit in front of another
 * handler.
 */
export function observeHandler(options: ObserveOptions): (request: Request) => Promise<Response | undefined> {
  return async (request) => {
    const path = new URL(request.url).pathname;
    if (path === "/metrics" && options.metrics !== undefined) {
      if (request.method !== "GET" && request.method !== "HEAD") return methodNotAllowed();
      const body = await options.metrics.text();
      return new Response(request.method === "HEAD" ? null : body, { headers: { "content-type": options.metrics.contentType, "cache-control": "no-store" } });
    }
    return undefined;
  };
}

function methodNotAllowed(): Response {
  return new Response("only GET and HEAD are served here\n", { status: 405, headers: { allow: "GET, HEAD" } });
}
