/**
 * The receive side of one view: a buffer bounded by the window this side
 * advertised (in frames and in bytes), and the credit it returns to the peer
 * as the view's consumer takes frames. The session's reader only ever calls
 * {@link Inbox.deliver}, which never waits and checks every frame against the
 * credit the peer holds at the moment it arrives: a frame beyond it is a
 * protocol error, never a reason to block or to grow a buffer.
 *
 * Credit goes back in batches: once a quarter of the window (in frames or in
 * bytes) was consumed, or when the buffer empties while the peer's credit
 * might not hold its next frame (less than one frame, or fewer bytes than
 * the largest frame it may send). An emptied buffer alone is not a reason:
 * in steady traffic that would cost a window update for every frame. What
 * stays pending is granted at the latest by {@link Inbox.grantPending},
 * which the session calls on every tick, so a peer whose next frame does
 * not fit its credit (only a frame whose credit size exceeds the largest
 * frame, one of many tiny messages: see `creditSize`) waits at most one
 * tick.
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
}

interface Buffered<T> {
  readonly item: T;
  readonly bytes: number;
}

/** Where an inbox reserves the bytes it buffers (the process's memory budget, seen from one session). */
export interface InboxMemory {
  /** Reserves `bytes`; returns why not when they cannot be had. */
  reserve(bytes: number): string | undefined;
  /** Gives back `bytes`. */
  release(bytes: number): void;
}

/** Returns credit to the peer: `frames` frames and `bytes` bytes on `lane`. */
export type GrantCredit = (lane: Lane, frames: number, bytes: number) => void;

/** Bounded receive buffer of one view, with credit accounting in frames and bytes. */
export class Inbox<T> {
  readonly #lane: Lane;
  readonly #window: number;
  readonly #windowBytes: number;
  readonly #ring: Ring<Buffered<T>>;
  readonly #grantThreshold: number;
  readonly #grantThresholdBytes: number;
  readonly #grant: GrantCredit;
  readonly #memory: InboxMemory | undefined;
  readonly #largestFrameBytes: number;
  /** Whether the peer counts byte credit (its hello announced byte windows); a peer that does not gets credit whenever the buffer empties, as before byte credit. */
  #peerCountsBytes = true;
  /** What the peer may still send: the window granted minus what arrived since. */
  #creditFrames: number;
  #creditBytes: number;
  #pendingGrant = 0;
  #pendingGrantBytes = 0;
  #bufferedBytes = 0;
  #waiter: Waiter<T> | undefined;
  /**
   * The signal {@link Inbox.recv} listens to. The listener stays between
   * receives given the same signal (a consumer passes its one signal to
   * every recv): adding and removing it for each frame cost more than the
   * frame. It goes when another signal comes, or at close.
   */
  #listened: AbortSignal | undefined;
  readonly #onAbort = (): void => {
    const signal = this.#listened;
    this.#listened = undefined; // a once listener: it is gone now
    const waiter = this.#waiter;
    if (signal === undefined || waiter === undefined || waiter.signal !== signal) return;
    this.#waiter = undefined;
    waiter.reject(abortError(signal, `recv on the ${this.#lane} lane`));
  };
  #closedWith: KdsError | undefined;

  /**
   * @param lane - which lane this inbox receives
   * @param window - how many frames the peer may have outstanding; also the buffer bound
   * @param windowBytes - how many bytes (by credit size) the peer may have outstanding
   * @param grant - called to return credit to the peer
   * @param memory - where buffered bytes are reserved (the process's budget); none by default
   * @param largestFrameBytes - the largest frame the peer may send (this side's `maxMessageBytes`): with less byte credit left, an emptied buffer grants at once; at most, and by default, `windowBytes`
   */
  constructor(lane: Lane, window: number, windowBytes: number, grant: GrantCredit, memory?: InboxMemory, largestFrameBytes: number = windowBytes) {
    this.#lane = lane;
    this.#window = window;
    this.#windowBytes = windowBytes;
    this.#ring = new Ring<Buffered<T>>(window);
    this.#grantThreshold = Math.max(1, Math.ceil(window / 4));
    this.#grantThresholdBytes = Math.max(1, Math.ceil(windowBytes / 4));
    this.#creditFrames = window;
    this.#creditBytes = windowBytes;
    this.#grant = grant;
    this.#memory = memory;
    this.#largestFrameBytes = Math.min(largestFrameBytes, windowBytes);
  }

  /** Frames received and not yet taken by the view's consumer. */
  get buffered(): number {
    return this.#ring.size;
  }

  /** Bytes (by credit size) received and not yet taken by the view's consumer. */
  get bufferedBytes(): number {
    return this.#bufferedBytes;
  }

  /**
   * Hands a received frame of credit size `bytes` to the view. Never waits.
   * Returns the error to end the session with when the frame is beyond the
   * credit the peer holds (`protocol_error`; `resource_exhausted` for a peer
   * that announced no byte window, so cannot know the byte limit), or when
   * the process's memory budget cannot hold it (`resource_exhausted`).
   */
  deliver(item: T, bytes: number, peerCountsBytes = true): KdsError | undefined {
    if (this.#closedWith !== undefined) return undefined;
    const overrun = this.#charge(bytes, peerCountsBytes);
    if (overrun !== undefined) return overrun;
    const waiter = this.#waiter;
    if (waiter !== undefined) {
      this.#waiter = undefined;
      this.#consumed(bytes);
      waiter.resolve(item);
      return undefined;
    }
    const refused = this.#memory?.reserve(bytes);
    if (refused !== undefined) return new KdsError("resource_exhausted", refused);
    // Cannot fail: the ring holds the frame window, and the check above keeps the frames outstanding within it.
    this.#ring.push({ item, bytes });
    this.#bufferedBytes += bytes;
    return undefined;
  }

  /**
   * Accounts for a frame of `bytes` on this lane that is not buffered here
   * (a call frame, handed on at once): it is checked against the peer's credit
   * like any other and its credit is returned as if consumed at once.
   */
  pass(bytes: number, peerCountsBytes = true): KdsError | undefined {
    if (this.#closedWith !== undefined) return undefined;
    const overrun = this.#charge(bytes, peerCountsBytes);
    if (overrun !== undefined) return overrun;
    this.#consumed(bytes);
    return undefined;
  }

  /** Takes the next frame, waiting for one. One receive may be pending at a time. */
  recv(signal?: AbortSignal): Promise<T> {
    if (this.#ring.size > 0) {
      const { item, bytes } = this.#ring.shift() as Buffered<T>;
      this.#bufferedBytes -= bytes;
      if (this.#closedWith === undefined) this.#memory?.release(bytes); // close gave back the rest
      this.#consumed(bytes);
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
      this.#waiter = { resolve, reject, signal };
      if (signal !== undefined && signal !== this.#listened) {
        this.#unlisten();
        signal.addEventListener("abort", this.#onAbort, { once: true });
        this.#listened = signal;
      }
    });
  }

  #unlisten(): void {
    this.#listened?.removeEventListener("abort", this.#onAbort);
    this.#listened = undefined;
  }

  /**
   * Ends the inbox: every receive rejects with `error` once the buffer is
   * empty. With `keep`, frames already buffered are still handed out first
   * (a deliberate end); without it they are dropped at once, so a session
   * ended for misbehaving frees its buffers. No more credit is granted.
   */
  close(error: KdsError, keep = true): void {
    if (this.#closedWith !== undefined) return;
    this.#closedWith = error;
    if (!keep) this.#ring.drain();
    // The budget is for live sessions: what a closed one still holds is the consumer's to take or drop.
    this.#memory?.release(this.#bufferedBytes);
    if (!keep) this.#bufferedBytes = 0;
    const waiter = this.#waiter;
    this.#waiter = undefined;
    this.#unlisten();
    waiter?.reject(error);
  }

  /**
   * Returns to the peer the credit of every frame consumed and not yet
   * granted, if any. The session calls it on every tick: it bounds how long
   * credit stays pending, whatever the peer's next frame.
   */
  grantPending(): void {
    if (this.#closedWith !== undefined || (this.#pendingGrant === 0 && this.#pendingGrantBytes === 0)) return;
    const frames = this.#pendingGrant;
    const granted = this.#pendingGrantBytes;
    this.#pendingGrant = 0;
    this.#pendingGrantBytes = 0;
    this.#creditFrames += frames;
    this.#creditBytes += granted;
    this.#grant(this.#lane, frames, granted);
  }

  /** Takes a frame of `bytes` from the peer's credit, or says how the frame overran it. */
  #charge(bytes: number, peerCountsBytes: boolean): KdsError | undefined {
    this.#peerCountsBytes = peerCountsBytes;
    if (this.#creditFrames < 1) {
      return new KdsError(
        "protocol_error",
        `the peer sent more ${this.#lane} than the window of ${this.#window} frames it was granted; ` +
          "a conforming peer waits for window updates (upgrade or fix the peer's kds-mux implementation)",
      );
    }
    if (bytes > this.#creditBytes) {
      const outstanding = this.#windowBytes - this.#creditBytes;
      return peerCountsBytes
        ? new KdsError(
            "protocol_error",
            `the peer sent ${this.#lane} of ${bytes} bytes with ${outstanding} bytes already outstanding, beyond the window of ${this.#windowBytes} bytes it was granted; ` +
              "a conforming peer waits for window updates (upgrade or fix the peer's kds-mux implementation)",
          )
        : new KdsError(
            "resource_exhausted",
            `the peer sent ${this.#lane} of ${bytes} bytes with ${outstanding} bytes not yet consumed, more than the ${this.#windowBytes} bytes this side buffers per lane; ` +
              "the peer announced no byte window, so it predates byte credit: upgrade it to a kds-mux that counts bytes",
          );
    }
    this.#creditFrames--;
    this.#creditBytes -= bytes;
    return undefined;
  }

  #consumed(bytes: number): void {
    if (this.#closedWith !== undefined) return;
    this.#pendingGrant++;
    this.#pendingGrantBytes += bytes;
    if (this.#pendingGrant >= this.#grantThreshold || this.#pendingGrantBytes >= this.#grantThresholdBytes || (this.#ring.size === 0 && this.#peerMayBeBlocked())) {
      this.grantPending();
    }
  }

  /**
   * Whether the peer's credit (once every grant sent has arrived) might not
   * hold its next frame: less than one frame, or fewer bytes than the
   * largest frame it may send. Nothing buffered is left for the consumer to
   * take, so no later consumption would return credit.
   */
  #peerMayBeBlocked(): boolean {
    return this.#creditFrames < 1 || !this.#peerCountsBytes || this.#creditBytes < this.#largestFrameBytes;
  }
}
