/**
 * What a kds-mux receiver decides about one encoded frame, with the code's
 * own limits and checks: the published test vectors
 * (docs/protocol/vectors, docs/protocol.md "Test vectors") are this
 * function's answers, and a test checks every vector against it, so a vector
 * cannot drift from what the code does.
 *
 * The order is the receiver's: the frame's length against
 * `max_message_bytes`, then the scan of its bytes (well-formed, elements,
 * decoded size), the decoding, what the frame is (a kind, a batch's
 * members, a hello's bounds), then its credit on its lane (or, for a window
 * update, the credit it adds).
 *
 * @module
 */
import { fromBinary } from "@bufbuild/protobuf";
import { FrameSchema, type Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import { frameRefusal, MAX_FRAME_ELEMENTS } from "../mux/frame-limits.ts";
import { scanFrame } from "../mux/frame-scan.ts";
import { creditSize, weighFrame } from "../mux/frame-size.ts";
import { laneOf, type Lane } from "../mux/frames.ts";
import { helloWindowRefusal } from "../mux/hello-limits.ts";
import { Inbox } from "../mux/inbox.ts";
import {
  FEATURES,
  MIN_PROTOCOL_VERSION,
  PROTOCOL_VERSION,
  SOFTWARE_VERSION,
  negotiate,
} from "../mux/negotiation.ts";
import { defaultSessionOptions } from "../mux/options.ts";
import { Outbox } from "../mux/outbox.ts";

/** Why a receiver refuses a frame (stable names; docs/protocol.md, "Test vectors"). */
export type VectorReason =
  | "too-large"
  | "malformed"
  | "elements"
  | "expansion"
  | "unknown-kind"
  | "batch-member"
  | "hello"
  | "overrun.frame"
  | "overrun.byte"
  | "window-cap";

/** What the receiver knows besides the frame (absent: the frame judged alone, its credit assumed granted). */
export interface VectorContext {
  /** The receiver's `max_message_bytes` (its hello's). Default 4 MiB, kds-mux's. */
  readonly maxMessageBytes?: number;
  /** The credit the receiver granted on each lane (its hello's windows), in frames and bytes. */
  readonly window?: { readonly frames: number; readonly bytes: number };
  /** What already arrived on the frame's lane against that credit. */
  readonly used?: { readonly frames: number; readonly bytes: number };
  /** For a window update: the credit the receiver of the update already holds unused, per lane. */
  readonly outstanding?: { readonly frames: number; readonly bytes: number };
}

/** A receiver's answer to a frame. */
export interface Judgement {
  /** The frame's length as it arrived. */
  readonly wireBytes: number;
  /** Its credit size: what it costs the lane (0 for control frames; a batch: the sum of its members'); undefined when it does not decode. */
  readonly creditSize: number | undefined;
  /** Its elements (docs/protocol.md, Flow control), as the scan counted them (a scan stops once past the limit). */
  readonly elements: number | undefined;
  readonly verdict: "accept" | "refuse";
  readonly reason?: VectorReason;
}

/** The default of {@link VectorContext.maxMessageBytes}. */
export const VECTOR_MAX_MESSAGE_BYTES = defaultSessionOptions.maxMessageBytes;

const refuse = (reason: VectorReason, at: Omit<Judgement, "verdict" | "reason">): Judgement => ({
  ...at,
  verdict: "refuse",
  reason,
});

/** The credit `frame` costs its lane(s): data frames their encoded length, a batch its members', control frames nothing. */
export function frameCredit(frame: Frame): number {
  if (frame.value.case === "batch")
    return frame.value.value.frames.reduce((n, inner) => n + frameCredit(inner), 0);
  return laneOf(frame) === "control" ? 0 : creditSize(frame);
}

/** What a kds-mux receiver decides about the encoded frame `bytes` (see the module description). */
export function judgeFrame(bytes: Uint8Array, context: VectorContext = {}): Judgement {
  const wireBytes = bytes.length;
  const maxMessageBytes = context.maxMessageBytes ?? VECTOR_MAX_MESSAGE_BYTES;
  const scanned = scanFrame(bytes);
  const elements = typeof scanned === "string" ? undefined : scanned.elements;
  const at = { wireBytes, creditSize: undefined, elements };
  if (wireBytes > maxMessageBytes) return refuse("too-large", at);
  if (typeof scanned === "string") return refuse("malformed", at);
  const refused = frameRefusal(scanned);
  if (refused !== undefined)
    return refuse(scanned.elements > MAX_FRAME_ELEMENTS ? "elements" : "expansion", at);
  let frame: Frame;
  try {
    frame = fromBinary(FrameSchema, bytes);
  } catch {
    return refuse("malformed", at); // the decoder's reason is in the thrown error; the vector names the class
  }
  const judged = { ...at, creditSize: frameCredit(frame) };
  // The decoded frame weighs what its bytes did (the session weighs decoded frames where a transport decoded first).
  const weight = weighFrame(frame);
  if (frameRefusal(weight) !== undefined)
    return refuse(weight.elements > MAX_FRAME_ELEMENTS ? "elements" : "expansion", judged);
  const value = frame.value;
  if (value.case === undefined) return refuse("unknown-kind", judged);
  if (value.case === "batch") {
    for (const inner of value.value.frames) {
      const lane = laneOf(inner);
      if (lane === "control" || inner.value.case === "batch") return refuse("batch-member", judged);
    }
  }
  if (value.case === "hello") {
    const h = value.value;
    const negotiated = negotiate(
      {
        versions: { min: MIN_PROTOCOL_VERSION, max: PROTOCOL_VERSION },
        features: FEATURES,
        softwareVersion: SOFTWARE_VERSION,
      },
      h,
      { local: "global", peer: "zone" },
    );
    if ("refusal" in negotiated || helloWindowRefusal(h) !== undefined)
      return refuse("hello", judged);
  }
  if (value.case === "windowUpdate" && context.outstanding !== undefined) {
    const outbox = new Outbox(1, () => 0);
    const o = context.outstanding;
    const w = value.value;
    if (
      outbox.addCredit(o.frames, o.frames, o.bytes, o.bytes) !== undefined ||
      outbox.addCredit(w.requests, w.responses, w.requestBytes, w.responseBytes) !== undefined
    )
      return refuse("window-cap", judged);
  }
  if (context.window !== undefined) {
    const overrun = chargeLanes(frame, context.window, context.used);
    if (overrun !== undefined) return refuse(overrun, judged);
  }
  return { ...judged, verdict: "accept" };
}

/** Charges a data frame (or a batch's members) to receive buffers of `window` that already hold `used`; the overrun, if any. */
function chargeLanes(
  frame: Frame,
  window: { frames: number; bytes: number },
  used: { frames: number; bytes: number } = { frames: 0, bytes: 0 },
): "overrun.frame" | "overrun.byte" | undefined {
  const inboxes = new Map<Lane, Inbox<Frame>>();
  const inbox = (lane: Lane): Inbox<Frame> => {
    let held = inboxes.get(lane);
    if (held === undefined) {
      held = new Inbox<Frame>(lane, window.frames, window.bytes, () => undefined);
      for (let i = 0; i < used.frames; i++) held.deliver(frame, i === 0 ? used.bytes : 0);
      inboxes.set(lane, held);
    }
    return held;
  };
  const members = frame.value.case === "batch" ? frame.value.value.frames : [frame];
  for (const member of members) {
    const lane = laneOf(member);
    if (lane === "control") continue;
    const error = inbox(lane).deliver(member, creditSize(member));
    // The inbox checks frames first, then bytes: its message names the byte window only for the second.
    if (error !== undefined)
      return / byte window/.test(error.message) ? "overrun.byte" : "overrun.frame";
  }
  return undefined;
}
