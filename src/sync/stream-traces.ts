/**
 * The spans of one stream, made only while a tracing SDK is registered
 * (docs/observability.md, "Tracing"):
 *
 * - serving: per change the stream hears of, `kds.queue` (from hearing of
 *   it to the response carrying it going to the mux), and per response
 *   carrying changes, `kds.send` (from the mux taking it to the peer's ACK
 *   or NACK), whose context the frame carries to the peer;
 * - receiving: per response whose frame carried a trace context,
 *   `kds.receive` (from the frame read off the stream to the discovery
 *   client taking it) and `kds.apply` (from then to its ACK or NACK), both
 *   children of the sender's `kds.send`.
 *
 * Each is a wrapper around what the engine hands the discovery server and
 * client (the source, the views) plus a server observer, so the discovery
 * layer knows nothing of tracing.
 *
 * @module
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Link,
  type Span,
  type Tracer,
} from "@opentelemetry/api";
import type { ServerObserver, SnapshotSource } from "../discovery/types.ts";
import type { MuxRequest, MuxResponse } from "../mux/frames.ts";
import { receivedTrace, traceOutgoing } from "../mux/trace-context.ts";
import type { ClientStreamView, ServerStreamView, ViewReceiver } from "../mux/views.ts";
import {
  SPAN_ATTRIBUTES,
  SPAN_NAMES,
  formatTraceparent,
  parseTraceparent,
} from "../observe/tracing.ts";
import type { ChangeTrace, ChangeTraces } from "./change-traces.ts";

/** Most changes a stream holds while they wait to be sent; beyond it the oldest is let go (bounds memory). */
const MAX_WAITING = 10_000;
/** Most responses whose `kds.send` (or `kds.apply`) spans are kept open at once. */
const MAX_OPEN = 256;
/** Most changes a `kds.send` span links to beyond its parent. */
const MAX_LINKS = 32;

/** A change the stream heard of and has not sent yet. */
interface Waiting {
  readonly change: ChangeTrace;
  readonly key: string;
  /** When the stream heard of it (`performance.now()`). */
  readonly since: number;
}

/** A response carrying changes, until its ACK or NACK. */
interface InFlight {
  readonly typeUrl: string;
  readonly span: Span;
  readonly carried: readonly Waiting[];
}

/** The serving spans of one stream. */
export class ServeTraces {
  readonly #changes: ChangeTraces;
  readonly #tracer: Tracer;
  readonly #zone: string;
  readonly #kindOf: (typeUrl: string) => string;
  /** Per type, the changes heard of and not yet sent, by key. */
  readonly #waiting = new Map<string, Map<string, Waiting[]>>();
  #waitingCount = 0;
  /** The responses carrying changes, by nonce (a server's nonces are unique on its stream). */
  readonly #flight = new Map<string, InFlight>();
  #ended = false;

  /**
   * @param changes - the side's change traces
   * @param zone - the zone at the other end (an attribute)
   * @param kindOf - a type URL's kind
   * @param signal - the session's signal: when it aborts, every open span ends
   */
  constructor(
    changes: ChangeTraces,
    zone: string,
    kindOf: (typeUrl: string) => string,
    signal: AbortSignal,
  ) {
    this.#changes = changes;
    this.#tracer = changes.tracer;
    this.#zone = zone;
    this.#kindOf = kindOf;
    signal.addEventListener("abort", () => this.#end(), { once: true });
  }

  /** `source`, telling this stream's traces of each change it reports. */
  source(source: SnapshotSource): SnapshotSource {
    return {
      typeUrls: source.typeUrls,
      snapshot: (typeUrl, signal) => source.snapshot(typeUrl, signal),
      ...(source.snapshotNow === undefined
        ? {}
        : { snapshotNow: (typeUrl: string) => source.snapshotNow?.(typeUrl) }),
      onChange: (listener, signal) =>
        source.onChange((typeUrl, key) => {
          if (key !== undefined) this.#heard(typeUrl, key);
          listener(typeUrl, key);
        }, signal),
    };
  }

  /** `view`, recording `kds.queue` and opening `kds.send` for each response that carries changes. */
  view(view: ServerStreamView): ServerStreamView {
    const wrapped: ServerStreamView = {
      recv: (signal) => view.recv(signal),
      send: (response, signal) => {
        this.#sending(response);
        return view.send(response, signal);
      },
    };
    const recvTo = view.recvTo;
    if (recvTo !== undefined)
      wrapped.recvTo = (receiver, signal) => recvTo.call(view, receiver, signal);
    const trySend = view.trySend;
    if (trySend !== undefined)
      wrapped.trySend = (response, signal) => {
        this.#sending(response);
        return trySend.call(view, response, signal);
      };
    return wrapped;
  }

  /** The server observer that ends `kds.send` spans and lets go of changes. */
  observer(): ServerObserver {
    return {
      acked: (_typeUrl, _version, nonce) => this.#answered(nonce, undefined),
      nacked: (_typeUrl, _version, error, nonce) => this.#answered(nonce, `NACK: ${error}`),
      stalled: (_typeUrl, nonce, waitedMs) =>
        this.#answered(nonce, `no ACK within ${Math.round(waitedMs)} ms; resent`),
      caughtUp: (typeUrl) => this.#caughtUp(typeUrl),
    };
  }

  #heard(typeUrl: string, key: string): void {
    if (this.#ended) return;
    const change = this.#changes.current(key);
    if (change === undefined) return;
    change.hold();
    this.#wait({ change, key, since: performance.now() }, typeUrl);
  }

  #wait(waiting: Waiting, typeUrl: string): void {
    let byKey = this.#waiting.get(typeUrl);
    if (byKey === undefined) {
      byKey = new Map();
      this.#waiting.set(typeUrl, byKey);
    }
    const list = byKey.get(waiting.key);
    if (list === undefined) byKey.set(waiting.key, [waiting]);
    else list.push(waiting);
    if (++this.#waitingCount > MAX_WAITING) this.#dropOldest(byKey);
  }

  /** Lets go of the oldest waiting change of a type (memory bound). */
  #dropOldest(byKey: Map<string, Waiting[]>): void {
    const first = byKey.entries().next();
    if (first.done === true) return;
    const [key, list] = first.value;
    const dropped = list.shift();
    if (list.length === 0) byKey.delete(key);
    if (dropped === undefined) return;
    this.#waitingCount--;
    dropped.change.release();
  }

  #sending(response: MuxResponse): void {
    if (this.#ended || this.#flight.has(response.nonce)) return; // a trySend that did nothing, then send
    const byKey = this.#waiting.get(response.typeUrl);
    if (byKey === undefined || byKey.size === 0) return;
    const carried: Waiting[] = [];
    const take = (key: string): void => {
      const list = byKey.get(key);
      if (list === undefined) return;
      byKey.delete(key);
      for (const w of list) carried.push(w);
    };
    if (response.$typeName === "kds.v1.DeltaDiscoveryResponse") {
      for (const r of response.resources) take(r.name);
      for (const key of response.removedResources) take(key);
    } else for (const key of [...byKey.keys()]) take(key); // a state-of-the-world response carries the whole set
    if (carried.length === 0) return;
    this.#waitingCount -= carried.length;
    const now = performance.now();
    const kind = this.#kindOf(response.typeUrl);
    for (const w of carried) {
      this.#tracer
        .startSpan(
          SPAN_NAMES.queue,
          {
            startTime: w.since,
            attributes: {
              [SPAN_ATTRIBUTES.zone]: this.#zone,
              [SPAN_ATTRIBUTES.kind]: kind,
              [SPAN_ATTRIBUTES.key]: w.key,
            },
          },
          w.change.context,
        )
        .end(now);
    }
    const first = carried[0] as Waiting;
    const links: Link[] = [];
    for (let i = 1; i < carried.length && links.length < MAX_LINKS; i++) {
      const change = (carried[i] as Waiting).change;
      if (change !== first.change) links.push({ context: change.span.spanContext() });
    }
    const span = this.#tracer.startSpan(
      SPAN_NAMES.send,
      {
        kind: SpanKind.PRODUCER,
        startTime: now,
        links,
        attributes: {
          [SPAN_ATTRIBUTES.zone]: this.#zone,
          [SPAN_ATTRIBUTES.kind]: kind,
          [SPAN_ATTRIBUTES.role]: this.#changes.role,
          [SPAN_ATTRIBUTES.nonce]: response.nonce,
          [SPAN_ATTRIBUTES.resources]:
            response.$typeName === "kds.v1.DeltaDiscoveryResponse"
              ? response.resources.length + response.removedResources.length
              : response.resources.length,
        },
      },
      first.change.context,
    );
    const context = span.spanContext();
    traceOutgoing(response, {
      traceparent: formatTraceparent(context),
      tracestate: context.traceState?.serialize() ?? "",
    });
    this.#flight.set(response.nonce, { typeUrl: response.typeUrl, span, carried });
    if (this.#flight.size > MAX_OPEN) {
      const oldest = this.#flight.keys().next().value as string;
      this.#answered(oldest, "no answer while more responses went out; no longer followed");
    }
  }

  /** An ACK (`error` undefined) or NACK of the response sent with `nonce`. */
  #answered(nonce: string, error: string | undefined): void {
    const flight = this.#flight.get(nonce);
    if (flight === undefined) return;
    this.#flight.delete(nonce);
    if (error === undefined) {
      flight.span.end();
      for (const w of flight.carried) w.change.release();
      return;
    }
    flight.span.setStatus({ code: SpanStatusCode.ERROR, message: error });
    flight.span.end();
    // The changes wait again: the server sends them once more.
    for (const w of flight.carried) this.#wait(w, flight.typeUrl);
  }

  /** The server sent all it knew of as changed for `typeUrl`: what still waits will not be sent to this peer. */
  #caughtUp(typeUrl: string): void {
    const byKey = this.#waiting.get(typeUrl);
    if (byKey === undefined || byKey.size === 0) return;
    for (const list of byKey.values()) {
      for (const w of list) w.change.release();
      this.#waitingCount -= list.length;
    }
    byKey.clear();
  }

  /** The session ended: every open span ends, every change is let go. */
  #end(): void {
    if (this.#ended) return;
    this.#ended = true;
    for (const flight of this.#flight.values()) {
      flight.span.setStatus({ code: SpanStatusCode.ERROR, message: "the session ended first" });
      flight.span.end();
      for (const w of flight.carried) w.change.release();
    }
    this.#flight.clear();
    for (const byKey of this.#waiting.values())
      for (const list of byKey.values()) for (const w of list) w.change.release();
    this.#waiting.clear();
    this.#waitingCount = 0;
  }
}

/** The receiving spans of one stream. */
export class ReceiveTraces {
  readonly #tracer: Tracer;
  readonly #zone: string;
  readonly #role: "global" | "zone";
  readonly #kindOf: (typeUrl: string) => string;
  /** The open `kds.apply` spans, by the nonce of the response they apply. */
  readonly #applying = new Map<string, Span>();
  #ended = false;

  /**
   * @param tracer - the registered SDK's tracer
   * @param zone - the zone this stream syncs (an attribute)
   * @param role - this side's role (an attribute)
   * @param kindOf - a type URL's kind
   * @param signal - the session's signal: when it aborts, every open span ends
   */
  constructor(
    tracer: Tracer,
    zone: string,
    role: "global" | "zone",
    kindOf: (typeUrl: string) => string,
    signal: AbortSignal,
  ) {
    this.#tracer = tracer;
    this.#zone = zone;
    this.#role = role;
    this.#kindOf = kindOf;
    signal.addEventListener("abort", () => this.#end(), { once: true });
  }

  /** `view`, recording `kds.receive` and `kds.apply` for each response whose frame carried a trace context. */
  view(view: ClientStreamView): ClientStreamView {
    const wrapped: ClientStreamView = {
      recv: (signal) =>
        view.recv(signal).then((response) => {
          this.#received(response);
          return response;
        }),
      send: (request, signal) => {
        this.#answering(request);
        return view.send(request, signal);
      },
    };
    const recvTo = view.recvTo;
    if (recvTo !== undefined) {
      let last:
        | {
            readonly receiver: ViewReceiver<MuxResponse>;
            readonly wrapper: ViewReceiver<MuxResponse>;
          }
        | undefined;
      wrapped.recvTo = (receiver, signal) => {
        if (last?.receiver !== receiver) {
          const wrapper: ViewReceiver<MuxResponse> = {
            take: (response) => {
              this.#received(response);
              receiver.take(response);
            },
            fail: (error) => receiver.fail(error),
          };
          last = { receiver, wrapper };
        }
        recvTo.call(view, last.wrapper, signal);
      };
    }
    const trySend = view.trySend;
    if (trySend !== undefined)
      wrapped.trySend = (request, signal) => {
        this.#answering(request);
        return trySend.call(view, request, signal);
      };
    return wrapped;
  }

  #received(response: MuxResponse): void {
    if (this.#ended) return;
    const wire = receivedTrace(response);
    if (wire === undefined) return;
    const remote = parseTraceparent(wire.traceparent, wire.tracestate);
    if (remote === undefined) return;
    const parent = trace.setSpanContext(ROOT_CONTEXT, remote);
    const now = performance.now();
    const attributes = {
      [SPAN_ATTRIBUTES.zone]: this.#zone,
      [SPAN_ATTRIBUTES.role]: this.#role,
      [SPAN_ATTRIBUTES.kind]: this.#kindOf(response.typeUrl),
      [SPAN_ATTRIBUTES.nonce]: response.nonce,
      [SPAN_ATTRIBUTES.resources]:
        response.$typeName === "kds.v1.DeltaDiscoveryResponse"
          ? response.resources.length + response.removedResources.length
          : response.resources.length,
    };
    this.#tracer
      .startSpan(
        SPAN_NAMES.receive,
        { kind: SpanKind.CONSUMER, startTime: wire.receivedAt, attributes },
        parent,
      )
      .end(now);
    const apply = this.#tracer.startSpan(SPAN_NAMES.apply, { startTime: now, attributes }, parent);
    this.#applying.get(response.nonce)?.end();
    this.#applying.set(response.nonce, apply);
    if (this.#applying.size > MAX_OPEN) {
      const oldest = this.#applying.keys().next().value as string;
      this.#applying.get(oldest)?.end();
      this.#applying.delete(oldest);
    }
  }

  #answering(request: MuxRequest): void {
    const nonce = request.responseNonce;
    if (nonce === "") return;
    const span = this.#applying.get(nonce);
    if (span === undefined) return;
    this.#applying.delete(nonce);
    const detail = request.errorDetail;
    if (detail !== undefined && detail.code !== 0)
      span.setStatus({ code: SpanStatusCode.ERROR, message: `NACK: ${detail.message}` });
    span.end();
  }

  #end(): void {
    if (this.#ended) return;
    this.#ended = true;
    for (const span of this.#applying.values()) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: "the session ended first" });
      span.end();
    }
    this.#applying.clear();
  }
}
