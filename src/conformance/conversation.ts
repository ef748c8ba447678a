/**
 * One scripted session of the kit over a {@link MuxLink}: reads frames with
 * deadlines, and keeps the accounting every check needs (the peer's hello,
 * the credit it granted, what the kit sent, how it ended).
 *
 * @module
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { GoAwayReason, FrameSchema, type Hello, type Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import { laneOf as muxLaneOf, type Lane } from "../mux/frames.ts";
import { anySignal } from "../util/abort.ts";
import type { LinkEnd, MuxLink } from "./link.ts";

/** The lane of a request or response frame, or undefined for any other (control frames, and calls, which the kit does not script). */
export function laneOf(frame: Frame): Lane | undefined {
  const lane = frame.value.case === "call" ? "control" : muxLaneOf(frame);
  return lane === "control" ? undefined : lane;
}

/**
 * A frame's credit size: its encoded length as a `kds.mux.v1.Frame`
 * (docs/protocol.md, Flow control), by encoding it: the kit computes the
 * rule as an outside implementation would, not with the mux's own sizer.
 */
export function encodedLength(frame: Frame): number {
  return toBinary(FrameSchema, frame).length;
}

/** Credit per lane, in frames and bytes. */
export interface Credit {
  frames: number;
  bytes: number;
}

/** How long the kit waits for an answer the protocol says comes at once (a pong, a goaway after a violation). */
export const ANSWER_MS = 5_000;

/** One session with the peer under test. */
export class Conversation {
  readonly link: MuxLink;
  readonly #signal: AbortSignal;
  /** Every frame the peer sent, in order. */
  readonly received: Frame[] = [];
  /** The peer's hello, once it arrived. */
  peerHello: Hello | undefined;
  /** What the peer granted the kit per lane (its hello plus every window update read). */
  readonly granted: Record<Lane, Credit> = {
    requests: { frames: 0, bytes: 0 },
    responses: { frames: 0, bytes: 0 },
  };
  /** What the kit sent per lane. */
  readonly sent: Record<Lane, Credit> = {
    requests: { frames: 0, bytes: 0 },
    responses: { frames: 0, bytes: 0 },
  };
  /** True once the peer's direction ended. */
  peerEnded = false;
  /** Frames a wait has taken. */
  readonly #taken = new Set<Frame>();
  /** True once the kit wrote its hello (zone mode's window accounting starts there). */
  sentHello = false;
  /** Sees every frame as it is read (zone mode: accounting, pongs). */
  onFrame: ((frame: Frame) => void) | undefined;

  constructor(link: MuxLink, signal: AbortSignal) {
    this.link = link;
    this.#signal = signal;
  }

  /** Writes `frames` in one write, counting data frames against the lanes. */
  write(...frames: Frame[]): void {
    for (const frame of frames) {
      const lane = laneOf(frame);
      if (lane === undefined) continue;
      this.sent[lane].frames++;
      this.sent[lane].bytes += encodedLength(frame);
    }
    this.link.write(frames);
  }

  /** What the kit may still send on `lane` by the grants it has read. */
  credit(lane: Lane): Credit {
    return {
      frames: this.granted[lane].frames - this.sent[lane].frames,
      bytes: this.granted[lane].bytes - this.sent[lane].bytes,
    };
  }

  /** The next frame within `ms`; undefined when none came in time or the peer's direction ended. */
  async next(ms: number): Promise<Frame | undefined> {
    if (this.peerEnded) return undefined;
    const timeout = AbortSignal.timeout(ms);
    let frame: Frame | undefined;
    try {
      frame = await this.link.read(anySignal([this.#signal, timeout]));
    } catch (error) {
      if (timeout.aborted && !this.#signal.aborted) return undefined;
      throw error;
    }
    if (frame === undefined) {
      this.peerEnded = true;
      return undefined;
    }
    this.received.push(frame);
    this.onFrame?.(frame);
    const v = frame.value;
    if (v.case === "hello" && this.peerHello === undefined) {
      this.peerHello = v.value;
      this.granted.requests.frames += v.value.requestWindow;
      this.granted.responses.frames += v.value.responseWindow;
      this.granted.requests.bytes += v.value.requestWindowBytes;
      this.granted.responses.bytes += v.value.responseWindowBytes;
    } else if (v.case === "windowUpdate") {
      this.granted.requests.frames += v.value.requests;
      this.granted.responses.frames += v.value.responses;
      this.granted.requests.bytes += v.value.requestBytes;
      this.granted.responses.bytes += v.value.responseBytes;
    }
    return frame;
  }

  /**
   * The first frame satisfying `match` that no earlier wait took, read
   * already or arriving within `ms`; undefined when none did in time or the
   * peer's direction ended. Frames a wait passes over stay for later waits.
   */
  async waitFor(match: (frame: Frame) => boolean, ms: number): Promise<Frame | undefined> {
    for (const frame of this.received) {
      if (!this.#taken.has(frame) && match(frame)) {
        this.#taken.add(frame);
        return frame;
      }
    }
    const deadline = Date.now() + ms;
    for (let i = 0; i < 100_000; i++) {
      const left = deadline - Date.now();
      if (left <= 0) return undefined;
      const frame = await this.next(left);
      if (frame === undefined) return undefined;
      if (match(frame)) {
        this.#taken.add(frame);
        return frame;
      }
    }
    return undefined;
  }

  /** Reads whatever comes for `ms` (or until the peer's direction ends); returns the frames read. */
  async drain(ms: number): Promise<Frame[]> {
    const from = this.received.length;
    await this.waitFor(() => false, ms);
    return this.received.slice(from);
  }

  /** The goaway the peer sent, if any. */
  goaway(): { reason: string; message: string } | undefined {
    for (const f of this.received) {
      if (f.value.case === "goaway")
        return {
          reason: GoAwayReason[f.value.value.reason] ?? String(f.value.value.reason),
          message: f.value.value.message,
        };
    }
    return undefined;
  }

  /** Waits up to `ms` for the peer's goaway (answering nothing meanwhile). */
  async awaitGoaway(ms: number): Promise<{ reason: string; message: string } | undefined> {
    if (this.goaway() === undefined) await this.waitFor((f) => f.value.case === "goaway", ms);
    return this.goaway();
  }

  /**
   * How the call ended, waiting at most `ms`; undefined when it had not
   * ended by then. Reads (and keeps) the peer's frames meanwhile: a call
   * whose frames nobody reads never ends on the transport.
   */
  async end(ms: number): Promise<LinkEnd | undefined> {
    let ended: LinkEnd | undefined;
    void this.link.ended.then((e) => (ended = e));
    const deadline = Date.now() + ms;
    for (let i = 0; i < 100_000 && ended === undefined; i++) {
      const left = deadline - Date.now();
      if (left <= 0) break;
      if (this.peerEnded) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([
          this.link.ended,
          new Promise<void>((resolve) => (timer = setTimeout(resolve, left))),
        ]);
        clearTimeout(timer);
        break;
      }
      await Promise.race([this.link.ended, this.next(Math.min(left, 250))]);
    }
    // An end that settled on the last turn is found here (its callback above may not have run yet).
    return ended ?? (await Promise.race([this.link.ended, Promise.resolve(undefined)]));
  }

  /** Sends goaway SHUTDOWN and ends the kit's direction. */
  shutdown(message: string): void {
    this.write(
      create(FrameSchema, {
        value: { case: "goaway", value: { reason: GoAwayReason.SHUTDOWN, message } },
      }),
    );
    this.link.close();
  }
}
