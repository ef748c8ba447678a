/**
 * The W3C trace context of data frames (the feature `trace-context`,
 * docs/protocol.md "Trace context"), kept beside the messages the views
 * carry rather than in them: the layer above marks a request or response
 * it sends with {@link traceOutgoing}, a session that agreed on the feature
 * puts the mark into the frame's `trace_context`, and on the other side
 * the session notes a received frame's context for {@link receivedTrace}.
 *
 * Until anything is marked (nothing is without a registered tracing SDK),
 * {@link outgoingTrace} answers without a lookup, so an untraced process
 * pays one boolean test per frame sent and nothing per frame received
 * (a session reads `trace_context` only where it agreed on the feature).
 *
 * @module
 */
import type { Frame } from "../gen/kds/mux/v1/mux_pb.ts";

/** A trace context as the wire carries it: the W3C header values. */
export interface WireTraceContext {
  /** The `traceparent` value. */
  readonly traceparent: string;
  /** The `tracestate` value, or empty. */
  readonly tracestate: string;
}

/** A trace context read off the stream, with when its frame was read. */
export interface ReceivedTraceContext extends WireTraceContext {
  /** When the session read the frame, in `performance.now()` milliseconds. */
  readonly receivedAt: number;
}

const outgoing = new WeakMap<object, WireTraceContext>();
const incoming = new WeakMap<object, ReceivedTraceContext>();
/** Whether anything was ever marked: until then nothing is looked up. */
let marked = false;

/** Marks `message` (a request or response about to be sent) with the context its frame carries. */
export function traceOutgoing(message: object, context: WireTraceContext): void {
  marked = true;
  outgoing.set(message, context);
}

/** The context `message` was marked with, if any. */
export function outgoingTrace(message: object): WireTraceContext | undefined {
  return marked ? outgoing.get(message) : undefined;
}

/** Notes the context of a received frame's message (called by the session). */
export function noteReceivedTrace(
  message: object,
  context: WireTraceContext,
  receivedAt: number,
): void {
  incoming.set(message, {
    traceparent: context.traceparent,
    tracestate: context.tracestate,
    receivedAt,
  });
}

/** The context the frame of a received `message` carried, and when it was read; undefined when it carried none. */
export function receivedTrace(message: object): ReceivedTraceContext | undefined {
  return incoming.get(message);
}

/** `frame` with the `trace_context` of `context` (a new frame object: the frame is the one the session built). */
export function withTraceContext(frame: Frame, context: WireTraceContext): Frame {
  return {
    $typeName: "kds.mux.v1.Frame",
    value: frame.value,
    traceContext: {
      $typeName: "kds.mux.v1.TraceContext",
      traceparent: context.traceparent,
      tracestate: context.tracestate,
    },
  };
}

/** The trace contexts a frame to be written carries (a batch's, each of its frames'), for a transport's encode span. */
export function traceContextsOf(frame: Frame): WireTraceContext[] {
  if (!marked) return [];
  const found: WireTraceContext[] = [];
  if (frame.traceContext !== undefined) found.push(frame.traceContext);
  if (frame.value.case === "batch")
    for (const inner of frame.value.value.frames)
      if (inner.traceContext !== undefined) found.push(inner.traceContext);
  return found;
}

/** Whether any message was ever marked in this process (a transport skips looking for contexts until then). */
export function tracesMarked(): boolean {
  return marked;
}
