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
  /** A zone replica's role, said in the body ("ready (standby)"); absent without replicas. */
  readonly role?: "leader" | "standby";
}

/** How often {@link StoreHealth} reads the store's revision. */
export const STORE_PROBE_INTERVAL_MS = 2_000;
/** How long {@link StoreHealth} waits for an answer before the store reads as unreachable. */
export const STORE_PROBE_TIMEOUT_MS = 5_000;

/**
 * Whether the store answers, checked in the background (a read of its
 * revision every {@link STORE_PROBE_INTERVAL_MS}), so that a probe answers
 * at once from the last result: a probe that waited for the store would
 * time out at the prober (a kubelet waits 1 s by default) on a busy instance.
 */
export class StoreHealth {
  readonly #store: ResourceStore;
  readonly #onError: (error: unknown) => void;
  #ok = false;
  #pendingSince: number | undefined;
  #checked = false;

  /** @param store - the store; `onError` gets each failure (the reason never carries it) */
  constructor(store: ResourceStore, onError: (error: unknown) => void) {
    this.#store = store;
    this.#onError = onError;
  }

  /** Checks now and every interval until `signal` aborts. */
  start(signal: AbortSignal): void {
    const check = (): void => {
      if (this.#pendingSince !== undefined || signal.aborted) return;
      this.#pendingSince = performance.now();
      this.#store
        .revision({
          signal: AbortSignal.any([signal, AbortSignal.timeout(STORE_PROBE_TIMEOUT_MS)]),
        })
        .then(
          () => {
            this.#ok = true;
          },
          (error: unknown) => {
            this.#ok = false;
            if (!signal.aborted) this.#onError(error);
          },
        )
        .finally(() => {
          this.#pendingSince = undefined;
          this.#checked = true;
        });
    };
    check();
    const timer = setInterval(check, STORE_PROBE_INTERVAL_MS);
    signal.addEventListener("abort", () => clearInterval(timer), { once: true });
  }

  /** Undefined when the last check succeeded and none has been waiting too long; else why not. */
  reason(): string | undefined {
    if (!this.#checked && this.#pendingSince === undefined)
      return "starting: the store was not checked yet";
    if (
      this.#pendingSince !== undefined &&
      performance.now() - this.#pendingSince > STORE_PROBE_TIMEOUT_MS
    )
      return `store unreachable: it did not answer within ${STORE_PROBE_TIMEOUT_MS} ms`;
    if (!this.#checked) return "starting: the store was not checked yet";
    return this.#ok ? undefined : "store unreachable: its last check failed";
  }
}

/** A {@link Readiness} from the reasons found (ready when there are none). */
export function readinessOf(reasons: readonly (string | undefined)[]): Readiness {
  const unmet = reasons.filter((r): r is string => r !== undefined);
  return { ready: unmet.length === 0, reasons: unmet };
}

/**
 * Serves GET (and HEAD) `/livez` with 200 "ok", and `/readyz` with 200
 * "ready" or 503 "not ready: <reasons>" as `readiness` says (it should
 * answer from state at hand, see {@link StoreHealth}); undefined for any
 * other request (so a fallback chain goes on).
 */
export function probeHandler(
  readiness: () => Readiness,
): (request: Request) => Promise<Response | undefined> {
  return async (request) => {
    const path = new URL(request.url).pathname;
    if (!PROBE_PATHS.has(path) || (request.method !== "GET" && request.method !== "HEAD"))
      return undefined;
    const headers = { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" };
    if (path === "/livez") return new Response("ok\n", { status: 200, headers });
    const state = readiness();
    const role = state.role === undefined ? "" : ` (${state.role})`;
    return state.ready
      ? new Response(`ready${role}\n`, { status: 200, headers })
      : new Response(`not ready${role}: ${state.reasons.join("; ")}\n`, { status: 503, headers });
  };
}
