/**
 * When the global may request the zone's kinds: only once the zone has
 * settled the kind catalog (docs/protocol.md, "When each side may send
 * requests"). A zone starts a session by fetching the catalog, and until it
 * has squared the catalog with its own kinds it may not serve a kind it is
 * about to learn; a request for a type a zone does not serve ends the
 * session, so the global must not ask before then.
 *
 * @module
 */
import type { ServerObserver } from "../discovery/types.ts";
import type { MuxRequest } from "../mux/frames.ts";
import type { ServerStreamView } from "../mux/views.ts";
import { deferred, type Deferred } from "../util/deferred.ts";
import { KIND_CATALOG_TYPE_URL } from "./kind-catalog.ts";

/**
 * Watches the global's server view of one session and tells when the zone
 * has settled the catalog: it ACKed it, or it requested another type (a
 * zone that knows the kinds may skip the catalog).
 * A NACK of the catalog settles nothing: the session ends for it.
 */
export class CatalogGate {
  readonly #settled: Deferred<void> = deferred<void>();
  /** Whether `#settled` has resolved: from then on the view's requests pass straight through. */
  #done = false;

  /** `view`, telling this gate about every request the zone sends (until it has settled). */
  watch(view: ServerStreamView): ServerStreamView {
    const look = (request: MuxRequest): MuxRequest => {
      if (request.typeUrl !== KIND_CATALOG_TYPE_URL) this.#settle();
      return request;
    };
    const recvTo = view.recvTo?.bind(view);
    const trySend = view.trySend?.bind(view);
    return {
      // Once settled, every ACK of every change reads through here: no extra step for it.
      recv: (signal) => (this.#done ? view.recv(signal) : view.recv(signal).then(look)),
      ...(recvTo === undefined
        ? {}
        : {
            recvTo: (receiver, signal) => {
              if (this.#done) recvTo(receiver, signal);
              else
                recvTo(
                  {
                    take: (request) => receiver.take(look(request)),
                    fail: (error) => receiver.fail(error),
                  },
                  signal,
                );
            },
          }),
      send: (response, signal) => view.send(response, signal),
      ...(trySend === undefined ? {} : { trySend }),
    };
  }

  #settle(): void {
    this.#done = true;
    this.#settled.resolve();
  }

  /** `observer`, telling this gate when the zone ACKs the catalog. */
  observe(observer: ServerObserver): ServerObserver {
    return {
      ...observer,
      acked: (typeUrl, version, nonce) => {
        observer.acked?.(typeUrl, version, nonce);
        if (typeUrl === KIND_CATALOG_TYPE_URL) this.#settle();
      },
    };
  }

  /**
   * Resolves true once the zone has settled the catalog, or false when
   * `signal` aborts first (the session ended).
   */
  settled(signal: AbortSignal): Promise<boolean> {
    if (signal.aborted) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const onAbort = (): void => resolve(false);
      signal.addEventListener("abort", onAbort, { once: true });
      void this.#settled.promise.then(() => {
        signal.removeEventListener("abort", onAbort);
        resolve(true);
      });
    });
  }
}
