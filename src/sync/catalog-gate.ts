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
import type { MuxRequest, MuxResponse } from "../mux/frames.ts";
import type { ServerStreamView, ViewReceiver } from "../mux/views.ts";
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
    return new GatedView(view, this);
  }

  /** Whether the zone has settled the catalog (from then on the view's requests pass straight through). */
  get done(): boolean {
    return this.#done;
  }

  /** The zone requested `typeUrl`: any type but the catalog settles it. */
  requested(typeUrl: string): void {
    if (typeUrl !== KIND_CATALOG_TYPE_URL) this.#settle();
  }

  /**
   * The zone ACKed `typeUrl`: the catalog's ACK settles it. A method, not a
   * wrapped observer: the session's observer calls it (stream-observer.ts).
   */
  acked(typeUrl: string): void {
    if (typeUrl === KIND_CATALOG_TYPE_URL) this.#settle();
  }

  #settle(): void {
    if (this.#done) return;
    this.#done = true;
    this.#settled.resolve();
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

/**
 * A server view telling its gate about each request until the gate has
 * settled. An object with its methods on its prototype, not closures: every
 * idle zone's session holds one. It offers `recvTo` and `trySend` only where
 * the view does (as own fields, set once), since the server asks whether
 * they are there.
 */
class GatedView implements ServerStreamView {
  /** `recvTo` of each view over one that has it: one function for every view, its `this` the view. */
  static readonly #recvTo = function (
    this: GatedView,
    receiver: ViewReceiver<MuxRequest>,
    signal?: AbortSignal,
  ): void {
    const view = this.#view;
    const gate = this.#open();
    if (gate === undefined) {
      view.recvTo?.(receiver, signal);
      return;
    }
    view.recvTo?.(
      {
        take: (request) => {
          gate.requested(request.typeUrl);
          receiver.take(request);
        },
        fail: (error) => receiver.fail(error),
      },
      signal,
    );
  };

  /** `trySend` of each view over one that has it (as `#recvTo`). */
  static readonly #trySend = function (
    this: GatedView,
    response: MuxResponse,
    signal?: AbortSignal,
  ): boolean {
    return this.#view.trySend?.(response, signal) ?? false;
  };

  readonly #view: ServerStreamView;
  /** Dropped once settled: from then on requests pass straight through, and the gate can be collected. */
  #gate: CatalogGate | undefined;
  /** Set only where the view has it. */
  readonly recvTo?: (receiver: ViewReceiver<MuxRequest>, signal?: AbortSignal) => void;
  /** Set only where the view has it. */
  readonly trySend?: (response: MuxResponse, signal?: AbortSignal) => boolean;

  /**
   * @param view - the session's server view
   * @param gate - told of each request until it settles
   */
  constructor(view: ServerStreamView, gate: CatalogGate) {
    this.#view = view;
    this.#gate = gate;
    if (view.recvTo !== undefined) this.recvTo = GatedView.#recvTo;
    if (view.trySend !== undefined) this.trySend = GatedView.#trySend;
  }

  /** The next request, told to the gate until it settles. */
  recv(signal?: AbortSignal): Promise<MuxRequest> {
    // Once settled, every ACK of every change reads through here: no extra step for it.
    const gate = this.#open();
    if (gate === undefined) return this.#view.recv(signal);
    return this.#view.recv(signal).then((request) => {
      gate.requested(request.typeUrl);
      return request;
    });
  }

  /** The gate while it has not settled; undefined (and dropped) once it has. */
  #open(): CatalogGate | undefined {
    const gate = this.#gate;
    if (gate === undefined || !gate.done) return gate;
    this.#gate = undefined;
    return undefined;
  }

  /** Sends `response` through the view. */
  send(response: MuxResponse, signal?: AbortSignal): Promise<void> {
    return this.#view.send(response, signal);
  }
}
