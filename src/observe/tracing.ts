/**
 * Tracing through the OpenTelemetry API (`@opentelemetry/api`): the tracer
 * kds-mux records with, the names of its spans and attributes, and the W3C
 * `traceparent` / `tracestate` values that carry a span's context across the
 * mux stream (docs/protocol.md, "Trace context"; docs/observability.md,
 * "Tracing").
 *
 * Nothing here registers an SDK: an application does (the CLI does with
 * `--otlp-endpoint`). Without one, {@link activeTracer} is undefined and
 * the layers that would record spans do no tracing work at all, not even
 * the API's no-op spans.
 *
 * @module
 */
import {
  ProxyTracerProvider,
  createTraceState,
  trace,
  type SpanContext,
  type Tracer,
} from "@opentelemetry/api";
import { KDS_MUX_VERSION } from "../version.ts";

/** The instrumentation scope kds-mux's spans are recorded under. */
export const TRACER_NAME = "kds-mux";

/** The names of the spans kds-mux records (docs/observability.md, "Tracing"). */
export const SPAN_NAMES = Object.freeze({
  /** On the side serving a change: from the change reaching it from its store to the last peer's ACK of it. */
  change: "kds.change",
  /** Per peer: from the change reaching that peer's stream to the response carrying it going to the mux. */
  queue: "kds.queue",
  /** Per peer: the frame carrying the change encoded for the wire (transports that encode in kds-mux). */
  encode: "kds.encode",
  /** Per peer: from the response going to the mux to the peer's ACK (or NACK). Its context crosses the stream. */
  send: "kds.send",
  /** On the receiving side: from the frame read off the stream to the discovery client taking it. */
  receive: "kds.receive",
  /** On the receiving side: the response applied to the store, until its ACK (or NACK) goes. */
  apply: "kds.apply",
});

/** The attribute names on kds-mux's spans. */
export const SPAN_ATTRIBUTES = Object.freeze({
  /** The resource kind. */
  kind: "kds.kind",
  /** The resource's key ("mesh/name" or "name"). */
  key: "kds.key",
  /** The zone at the other end of the stream. */
  zone: "kds.zone",
  /** This side's role: "global" or "zone". */
  role: "kds.role",
  /** The discovery nonce of the response. */
  nonce: "kds.nonce",
  /** Resources (and removals) a response carried. */
  resources: "kds.resources",
  /** Peers a change was sent to ({@link SPAN_NAMES}.change). */
  peers: "kds.peers",
  /** Bytes of an encoded frame. */
  bytes: "kds.bytes",
  /** The store revision of the change. */
  revision: "kds.revision",
  /** What the change did: "put" or "delete". */
  op: "kds.op",
  /** Frames an encoded frame holds (a batch holds several). */
  frames: "kds.frames",
});

/**
 * The tracer of the SDK the application registered
 * (`trace.setGlobalTracerProvider`), or undefined when none is: then
 * kds-mux records nothing and spends nothing on tracing. Read when a
 * component starts (an engine, a session), not per event.
 */
export function activeTracer(): Tracer | undefined {
  const provider = trace.getTracerProvider();
  if (provider instanceof ProxyTracerProvider)
    return provider.getDelegateTracer(TRACER_NAME, KDS_MUX_VERSION);
  return provider.getTracer(TRACER_NAME, KDS_MUX_VERSION);
}

/** The longest `tracestate` carried; a longer one is dropped (W3C allows 32 entries, about 512 characters). */
export const MAX_TRACESTATE = 512;

/** `00-<trace id>-<span id>-<flags>`: the `traceparent` value of `context`. */
export function formatTraceparent(context: SpanContext): string {
  const flags = (context.traceFlags & 0xff).toString(16).padStart(2, "0");
  return `00-${context.traceId}-${context.spanId}-${flags}`;
}

const HEX = /^[0-9a-f]+$/;

/**
 * The remote span context a `traceparent` (and `tracestate`) value names,
 * or undefined when the value is not a valid W3C `traceparent` (a receiver
 * then records its spans without a parent, as if none was sent). Version
 * `00` must be exactly 55 characters; a later version is read by its first
 * 55 (the W3C rule for versions it does not know); `ff` is invalid.
 */
export function parseTraceparent(traceparent: string, tracestate = ""): SpanContext | undefined {
  if (traceparent.length < 55) return undefined;
  const version = traceparent.slice(0, 2);
  if (!HEX.test(version) || version === "ff") return undefined;
  if (version === "00" && traceparent.length !== 55) return undefined;
  if (traceparent.length > 55 && traceparent[55] !== "-") return undefined;
  if (traceparent[2] !== "-" || traceparent[35] !== "-" || traceparent[52] !== "-")
    return undefined;
  const traceId = traceparent.slice(3, 35);
  const spanId = traceparent.slice(36, 52);
  const flags = traceparent.slice(53, 55);
  if (!HEX.test(traceId) || !HEX.test(spanId) || !HEX.test(flags)) return undefined;
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  const context: SpanContext = {
    traceId,
    spanId,
    traceFlags: Number.parseInt(flags, 16) & 0x01,
    isRemote: true,
  };
  if (tracestate !== "" && tracestate.length <= MAX_TRACESTATE)
    context.traceState = createTraceState(tracestate);
  return context;
}
