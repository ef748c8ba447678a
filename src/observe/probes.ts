/**
 * Health probes of an admin listener: `/livez` (the process runs and
 * answers) and `/readyz` (this instance should get traffic now), for a load
 * balancer or an orchestrator. Both answer without credentials, so their
 * bodies say only which condition is unmet, never a host, a path or an
 * error's details (those go to the log).
 *
 * @module
 */
import type { ResourceStore } from "../store/contract.ts";

/** The paths {@link probeHandler} serves; an admin listener lets them through without credentials. */
export const PROBE_PATHS: ReadonlySet<string> = new Set(["/livez", "/readyz"]);

/** Whether an instance is ready, and if not, why. */
export interface Readiness {
  /** True when every condition holds. */
  readonly ready: boolean;
  /** One short reason per unmet condition (empty when ready), such as "draining: ...". */
  readonly reasons: readonly string[];
}

/** How long a readiness check waits for the store before it reads as unreachable. */
export const STORE_PROBE_TIMEOUT_MS = 2_000;

/**
 * Whether `store` answers (reads its revision) within
 * {@link STORE_PROBE_TIMEOUT_MS}: undefined when it does, else the reason
 * (the error itself goes to `onError`, not into the reason).
 */
export async function storeReason(store: ResourceStore, signal: AbortSignal, onError: (error: unknown) => void): Promise<string | undefined> {
  try {
    await store.revision({ signal: AbortSignal.any([signal, AbortSignal.timeout(STORE_PROBE_TIMEOUT_MS)]) });
    return undefined;
  } catch (error) {
    if (signal.aborted) return "aborted: the probe went away";
    onError(error);
    return `store unreachable: it did not answer within ${STORE_PROBE_TIMEOUT_MS} ms`;
  }
}

/** A {@link Readiness} from the reasons found (ready when there are none). */
export function readinessOf(reasons: readonly (string | undefined)[]): Readiness {
  const unmet = reasons.filter((r): r is string => r !== undefined);
  return { ready: unmet.length === 0, reasons: unmet };
}

/**
 * Serves GET (and HEAD) `/livez` with 200 "ok", and `/readyz` with 200
 * "ready" or 503 "not ready: <reasons>" as `readiness` says; undefined for
 * any other request (so a fallback chain goes on).
 */
export function probeHandler(readiness: (signal: AbortSignal) => Promise<Readiness>): (request: Request) => Promise<Response | undefined> {
  return async (request) => {
    const path = new URL(request.url).pathname;
    if (!PROBE_PATHS.has(path) || (request.method !== "GET" && request.method !== "HEAD")) return undefined;
    const headers = { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" };
    if (path === "/livez") return new Response("ok\n", { status: 200, headers });
    const state = await readiness(request.signal);
    return state.ready
      ? new Response("ready\n", { status: 200, headers })
      : new Response(`not ready: ${state.reasons.join("; ")}\n`, { status: 503, headers });
  };
}
