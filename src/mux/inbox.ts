/**
 * The receive side of one view: a buffer bounded by the window this side
 * advertised, and the credit it returns to the peer as the view's consumer
 * takes frames. The session's reader only ever calls {@link Inbox.deliver},
 * which never waits: a full buffer means the peer sent beyond its window, a
 * protocol error, never a reason to block.
 *
 * @module
 */
import { KdsError, abortError } from "../errors.ts";
import { Ring } from "../util/ring.ts";
import type { Lane } from "./frames.ts";

interface Waiter<T> {
  resolve(value: T): void;
  reject(reason: unknown): void;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

/** Bounded receive buffer of one view, with credit accounting. */
export class Inbox<T> {
  readonly #lane: Lane;
  readonly #ring: Ring<T>;
  readonly #grantThreshold: number;
  readonly #grant: (lane: Lane, credit: number) => void;
  #pendingGrant = 0;
  #waiter: Waiter<T> | undefined;
  #closedWith: KdsError | undefined;

  /**
   * @param lane - which lane this inbox receives
   * @param window - how many frames the peer may have outstanding; also the buffer bound
   * @param grant - called to return credit to the peer
   */
  constructor(lane: Lane, window: number, grant: (lane: Lane, credit: number) => void) {
    this.#lane = lane;
    this.#ring = new Ring<T>(window);
    this.#grantThreshold = Math.max(1, Math.ceil(window / 4));
    this.#grant = grant;
  }

  /** Frames received and not yet taken by the view's consumer. */
  get buffered(): number {
    return this.#ring.size;
  }

  /**
   * Hands a received frame to the view. Never waits. Returns a protocol error
   * when the peer overran its window; the caller ends the session with it.
   */
  deliver(item: T): KdsError | undefined {
    if (this.#closedWith !== undefined) return undefined;
    const waiter = this.#waiter;
    if (waiter !== undefined) {
      this.#waiter = undefined;
      if (waiter.onAbort !== undefined) waiter.signal?.removeEventListener("abort", waiter.onAbort);
      this.#consumed();
      waiter.resolve(item);
      return undefined;
    }
    if (!this.#ring.push(item)) {
      return new KdsError(
        "protocol_error",
        `peer sent more ${this.#lane} than the window of ${this.#ring.capacity} it was granted; ` +
          "a conforming peer waits for window updates (upgrade or fix the peer's kds-mux implementation)",
      );
    }
    return undefined;
  }

  /** Takes the next frame, waiting for one. One receive may be pending at a time. */
  recv(signal?: AbortSignal): Promise<T> {
    if (this.#ring.size > 0) {
      const item = this.#ring.shift() as T;
      this.#consumed();
      return Promise.resolve(item);
    }
    if (this.#closedWith !== undefined) return Promise.reject(this.#closedWith);
    if (signal?.aborted) return Promise.reject(abortError(signal, `recv on the ${this.#lane} lane`));
    if (this.#waiter !== undefined) {
      return Promise.reject(
        new KdsError("busy", `a recv is already pending on the ${this.#lane} lane; a view has one reader, so await the previous recv first`),
      );
    }
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter<T> = { resolve, reject, signal, onAbort: undefined };
      if (signal !== undefined) {
        waiter.onAbort = () => {
          if (this.#waiter === waiter) this.#waiter = undefined;
          reject(abortError(signal, `recv on the ${this.#lane} lane`));
        };
        signal.addEventListener("abort", waiter.onAbort, { once: true });
      }
      this.#waiter = waiter;
    });
  }

  /**
   * Ends the inbox: frames already buffered are still handed out, then every
   * receive rejects with `error`. No more credit is granted.
   */
  close(error: KdsError): void {
    if (this.#closedWith !== undefined) return;
    this.#closedWith = error;
    const waiter = this.#waiter;
    this.#waiter = undefined;
    if (waiter !== undefined) {
      if (waiter.onAbort !== undefined) waiter.signal?.removeEventListener("abort", waiter.onAbort);
      waiter.reject(error);
    }
  }

  #consumed(): void {
    if (this.#closedWith !== undefined) return;
    this.#pendingGrant++;
    if (this.#pendingGrant >= this.#grantThreshold || this.#ring.size === 0) {
      const credit = this.#pendingGrant;
      this.#pendingGrant = 0;
      this.#grant(this.#lane, credit);
    }
  }
}
