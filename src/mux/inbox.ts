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
 * stays pending waits for one of those two: a peer that still holds credit
 * for its largest frame is not waiting for it, and a peer whose next frame
 * it would not hold gets it as soon as the buffer empties. (Granting it on
 * every session tick as well cost a window update each way per zone and
 * change in a fan-out whose changes come a tick or more apart.)
 *
 * A frame has two sizes here: its credit size (its encoded length, what the
 * peer's window counts) and the memory its decoded form holds (see
 * `weighFrame`), which the process's budget is charged and which a lane may
 * hold at most {@link MEMORY_PER_WINDOW_BYTE} times its byte window of. A
 * frame is held from its arrival until the consumer asks for the next one
 * (until then it is still being worked on): frames in flight count, not
 * only those waiting in the buffer.
 *
 * @module
 */
import { KdsError, abortError } from "../errors.ts";
import { Ring } from "../util/ring.ts";
import type { Lane } from "./frames.ts";
import type { ViewReceiver } from "./views.ts";
import { isAborted } from "../util/abort.ts";

interface Buffered<T> {
  readonly item: T;
  /** Credit size (encoded length). */
  readonly bytes: number;
  /** Estimated memory of the decoded frame. */
  readonly memory: number;
}

/**
 * How many times its byte window a lane may hold in decoded memory. Decoded
 * frames of real resources hold 1.5 to 4 times their encoded length; a lane
 * whose buffered frames hold more came from a peer sending frames of many
 * tiny elements, and is ended with `resource_exhausted`.
 */
export const MEMORY_PER_WINDOW_BYTE = 4;

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
  readonly #maxMemory: number;
  /** What the peer may still send: the window granted minus what arrived since. */
  #creditFrames: number;
  #creditBytes: number;
  /** Totals since the session began, for the overrun message: granted (the hello's window and every update sent) and received. */
  #granted: number;
  #grantedBytes: number;
  #received = 0;
  #receivedBytes = 0;
  #pendingGrant = 0;
  #pendingGrantBytes = 0;
  #bufferedBytes = 0;
  #bufferedMemory = 0;
  /** Memory of the frame last handed to the consumer, held until it asks for the next one. */
  #handedOutMemory = 0;
  /** The pending receive: a `recv` promise's resolve and reject, or a `recvTo` receiver. */
  #waiter: ViewReceiver<T> | undefined;
  /** The pending receive's signal. */
  #waiterSignal: AbortSignal | undefined;
  /** The pending receive is a `recvTo` receiver: it is handed its frame from a later microtask, as a promise would be. */
  #waiterDefers = false;
  /**
   * The signal {@link Inbox.recv} listens to. The listener stays between
   * receives given the same signal (a consumer passes its one signal to
   * every recv): adding and removing it for each frame cost more than the
   * frame. It goes when another signal comes, or at close.
   */
  #listened: AbortSignal | undefined;
  #closedWith: KdsError | undefined;

  /**
   * @param lane - which lane this inbox receives
   * @param window - how many frames the peer may have outstanding; also the buffer bound
   * @param windowBytes - how many bytes (by credit size) the peer may have outstanding
   * @param grant - called to return credit to the peer
   * @param memory - where buffered bytes are reserved (the process's budget); none by default
   * @param largestFrameBytes - the largest frame the peer may send (this side's `maxMessageBytes`): with less byte credit left, an emptied buffer grants at once; at most, and by default, `windowBytes`
   */
  constructor(
    lane: Lane,
    window: number,
    windowBytes: number,
    grant: GrantCredit,
    memory?: InboxMemory,
    largestFrameBytes: number = windowBytes,
  ) {
    this.#lane = lane;
    this.#window = window;
    this.#windowBytes = windowBytes;
    this.#ring = new Ring<Buffered<T>>(window);
    this.#grantThreshold = Math.max(1, Math.ceil(window / 4));
    this.#grantThresholdBytes = Math.max(1, Math.ceil(windowBytes / 4));
    this.#creditFrames = window;
    this.#creditBytes = windowBytes;
    this.#granted = window;
    this.#grantedBytes = windowBytes;
    this.#grant = grant;
    this.#memory = memory;
    this.#largestFrameBytes = Math.min(largestFrameBytes, windowBytes);
    this.#maxMemory = MEMORY_PER_WINDOW_BYTE * windowBytes;
  }

  /**
   * The abort of the signal listened to ({@link Inbox.recv}'s): fails the
   * pending receive given that signal. The inbox itself is the listener (an
   * object with `handleEvent`), not a closure made with each inbox: every
   * idle session holds two inboxes, most never listening at all.
   */
  handleEvent(): void {
    const signal = this.#listened;
    this.#listened = undefined; // a once listener: it is gone now
    if (signal === undefined || this.#waiter === undefined || this.#waiterSignal !== signal) return;
    this.#failWaiter(abortError(signal, `recv on the ${this.#lane} lane`));
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
   * Hands a received frame of credit size `bytes` (its encoded length) whose
   * decoded form holds an estimated `memory` bytes to the view. Never waits.
   * Returns the error to end the session with when the frame is beyond the
   * credit the peer holds (`protocol_error`), or when this lane's share or
   * the process's memory budget cannot hold it (`resource_exhausted`).
   */
  deliver(item: T, bytes: number, memory: number = bytes): KdsError | undefined {
    if (this.#closedWith !== undefined) return undefined;
    const overrun = this.#charge(bytes);
    if (overrun !== undefined) return overrun;
    const held = this.#bufferedMemory + this.#handedOutMemory + memory;
    if (held > this.#maxMemory) {
      return new KdsError(
        "resource_exhausted",
        `the peer's unconsumed ${this.#lane} would hold an estimated ${held} bytes decoded, more than the ${this.#maxMemory} this side holds per lane ` +
          `(${MEMORY_PER_WINDOW_BYTE} times its byte window of ${this.#windowBytes}); frames of many empty or tiny elements decode to far more than they weigh on the wire: send real resources, and consume what you are sent`,
      );
    }
    const refused = this.#memory?.reserve(memory);
    if (refused !== undefined) return new KdsError("resource_exhausted", refused);
    const waiter = this.#waiter;
    if (waiter !== undefined) {
      const defers = this.#waiterDefers;
      this.#waiter = undefined;
      this.#waiterSignal = undefined;
      this.#handedOutMemory = memory;
      this.#consumed(bytes);
      if (defers) queueMicrotask(() => waiter.take(item));
      else waiter.take(item);
      return undefined;
    }
    // Cannot fail: the ring holds the frame window, and the check above keeps the frames outstanding within it.
    this.#ring.push({ item, bytes, memory });
    this.#bufferedBytes += bytes;
    this.#bufferedMemory += memory;
    return undefined;
  }

  /**
   * Accounts for a frame of `bytes` on this lane that is not buffered here
   * (a call frame, handed on at once): it is checked against the peer's credit
   * like any other and its credit is returned as if consumed at once.
   */
  pass(bytes: number): KdsError | undefined {
    if (this.#closedWith !== undefined) return undefined;
    const overrun = this.#charge(bytes);
    if (overrun !== undefined) return overrun;
    this.#consumed(bytes);
    return undefined;
  }

  /**
   * Takes the next frame, waiting for one. One receive may be pending at a
   * time. Asking for the next frame gives back the memory of the last one.
   */
  recv(signal?: AbortSignal): Promise<T> {
    this.#releaseHandedOut();
    if (this.#ring.size > 0) return Promise.resolve(this.#shift());
    const refused = this.#refusal(signal);
    if (refused !== undefined) return Promise.reject(refused);
    return new Promise<T>((resolve, reject) => {
      this.#wait({ take: resolve, fail: reject }, false, signal);
    });
  }

  /**
   * {@link Inbox.recv} without a promise: the frame, or why there is none,
   * goes to `receiver` from a later microtask (as a promise would settle).
   * A reader that waits from one frame to the next for a long time (the
   * global's discovery server waits so for each zone's next ACK) holds no
   * promise, reaction and waiter per wait that young collections would copy
   * and then promote; it hands the same receiver to every call.
   */
  recvTo(receiver: ViewReceiver<T>, signal?: AbortSignal): void {
    this.#releaseHandedOut();
    if (this.#ring.size > 0) {
      const item = this.#shift();
      queueMicrotask(() => receiver.take(item));
      return;
    }
    const refused = this.#refusal(signal);
    if (refused !== undefined) queueMicrotask(() => receiver.fail(refused));
    else this.#wait(receiver, true, signal);
  }

  /** Gives back the memory of the frame last handed out: the consumer asked for the next one. */
  #releaseHandedOut(): void {
    if (this.#closedWith === undefined) this.#memory?.release(this.#handedOutMemory); // close gave back the rest
    this.#handedOutMemory = 0;
  }

  /** Takes the oldest buffered frame (there is one) and accounts for it as handed out. */
  #shift(): T {
    const { item, bytes, memory } = this.#ring.shift() as Buffered<T>;
    this.#bufferedBytes -= bytes;
    this.#bufferedMemory -= memory;
    if (this.#closedWith === undefined) this.#handedOutMemory = memory; // still reserved, now in the consumer's hands
    this.#consumed(bytes);
    return item;
  }

  /** Why a receive with nothing buffered cannot wait: the inbox closed, `signal` aborted, or another receive is pending. */
  #refusal(signal: AbortSignal | undefined): KdsError | undefined {
    if (this.#closedWith !== undefined) return this.#closedWith;
    // The signal this inbox listens to has not aborted (the abort's listener clears #listened first): it is not read.
    if (signal !== this.#listened && isAborted(signal))
      return abortError(signal as AbortSignal, `recv on the ${this.#lane} lane`);
    if (this.#waiter !== undefined)
      return new KdsError(
        "busy",
        `a recv is already pending on the ${this.#lane} lane; a view has one reader, so await the previous recv first`,
      );
    return undefined;
  }

  /** Makes `waiter` the pending receive, and listens to `signal` for its abort. */
  #wait(waiter: ViewReceiver<T>, defers: boolean, signal: AbortSignal | undefined): void {
    this.#waiter = waiter;
    this.#waiterSignal = signal;
    this.#waiterDefers = defers;
    if (signal !== undefined && signal !== this.#listened) {
      this.#unlisten();
      signal.addEventListener("abort", this, { once: true });
      this.#listened = signal;
    }
  }

  /** Fails the pending receive (there is one) with `error`: a receiver from a later microtask. */
  #failWaiter(error: unknown): void {
    const waiter = this.#waiter as ViewReceiver<T>;
    const defers = this.#waiterDefers;
    this.#waiter = undefined;
    this.#waiterSignal = undefined;
    if (defers) queueMicrotask(() => waiter.fail(error));
    else waiter.fail(error);
  }

  #unlisten(): void {
    this.#listened?.removeEventListener("abort", this);
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
    this.#memory?.release(this.#bufferedMemory + this.#handedOutMemory);
    this.#handedOutMemory = 0;
    if (!keep) {
      this.#bufferedBytes = 0;
      this.#bufferedMemory = 0;
    }
    this.#unlisten();
    if (this.#waiter !== undefined) this.#failWaiter(error);
  }

  /** Returns to the peer the credit of every frame consumed and not yet granted, if any. */
  #grantPending(): void {
    if (
      this.#closedWith !== undefined ||
      (this.#pendingGrant === 0 && this.#pendingGrantBytes === 0)
    )
      return;
    const frames = this.#pendingGrant;
    const granted = this.#pendingGrantBytes;
    this.#pendingGrant = 0;
    this.#pendingGrantBytes = 0;
    this.#creditFrames += frames;
    this.#creditBytes += granted;
    this.#granted += frames;
    this.#grantedBytes += granted;
    this.#grant(this.#lane, frames, granted);
  }

  /**
   * Takes a frame of `bytes` from the peer's credit (granted minus received,
   * whatever the consumer has taken since), or says how the frame overran it.
   */
  #charge(bytes: number): KdsError | undefined {
    if (this.#creditFrames < 1) {
      const sent = this.#received + 1;
      return new KdsError(
        "protocol_error",
        `the peer overran the ${this.#lane} window: frame ${sent} of this lane arrived with ${this.#granted} frames granted in all ` +
          `(window ${this.#window} frames); a conforming peer sends only within the credit its peer's hello and window updates granted`,
      );
    }
    if (bytes > this.#creditBytes) {
      return new KdsError(
        "protocol_error",
        `the peer overran the ${this.#lane} byte window: a frame of ${bytes} bytes arrived with ${this.#creditBytes} bytes of credit left ` +
          `(${this.#grantedBytes} granted in all, ${this.#receivedBytes} received; window ${this.#windowBytes} bytes); ` +
          "a conforming peer counts each frame's encoded length and sends only within the credit granted",
      );
    }
    this.#received++;
    this.#receivedBytes += bytes;
    this.#creditFrames--;
    this.#creditBytes -= bytes;
    return undefined;
  }

  #consumed(bytes: number): void {
    if (this.#closedWith !== undefined) return;
    this.#pendingGrant++;
    this.#pendingGrantBytes += bytes;
    if (
      this.#pendingGrant >= this.#grantThreshold ||
      this.#pendingGrantBytes >= this.#grantThresholdBytes ||
      (this.#ring.size === 0 && this.#peerMayBeBlocked())
    ) {
      this.#grantPending();
    }
  }

  /**
   * Whether the peer's credit (once every grant sent has arrived) might not
   * hold its next frame: less than one frame, or fewer bytes than the
   * largest frame it may send. Nothing buffered is left for the consumer to
   * take, so no later consumption would return credit.
   */
  #peerMayBeBlocked(): boolean {
    return this.#creditFrames < 1 || this.#creditBytes < this.#largestFrameBytes;
  }
}
