/**
 * The `kds.change` span of each change a side serves: it starts when the
 * change reaches the side from its store (at the resource's modification
 * time when that is recent) and ends when the last peer the change was
 * handed to has ACKed it, or has shown it will not be sent the change (its
 * set did not change with it), or its session ended.
 *
 * The snapshot cache opens a change ({@link ChangeTraces.fanOut}) around
 * telling every stream of it: each stream that hears of it takes a hold
 * on it while it does ({@link ChangeTraces.current}), so a peer that ACKs
 * before another one has even been told cannot end the span. Made only
 * while a tracing SDK is registered (`activeTracer`).
 *
 * @module
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  trace,
  type Context,
  type Span,
  type Tracer,
} from "@opentelemetry/api";
import type { StoreChange } from "../store/contract.ts";
import { SPAN_ATTRIBUTES, SPAN_NAMES } from "../observe/tracing.ts";

/** A resource's modification time older than this is not taken as the change's start (an old resource re-sent). */
const MAX_START_AGE_MS = 60_000;

/** One change being traced. */
export class ChangeTrace {
  /** The `kds.change` span. */
  readonly span: Span;
  /** A context holding {@link ChangeTrace.span}, the parent of the per-peer spans. */
  readonly context: Context;
  /** The resource's kind and key. */
  readonly kind: string;
  readonly key: string;
  #holds = 0;
  #peers = 0;
  #fanning = true;
  #ended = false;

  /** @internal */
  constructor(span: Span, kind: string, key: string) {
    this.span = span;
    this.context = trace.setSpan(ROOT_CONTEXT, span);
    this.kind = kind;
    this.key = key;
  }

  /** A stream heard of the change and holds it until it has an answer for it. */
  hold(): void {
    this.#holds++;
    this.#peers++;
  }

  /** A stream's hold ends (its peer ACKed the change, will not be sent it, or its session ended). */
  release(): void {
    this.#holds--;
    this.#endIfDone();
  }

  /** @internal Every stream has been told. */
  fannedOut(): void {
    this.#fanning = false;
    this.#endIfDone();
  }

  #endIfDone(): void {
    if (this.#fanning || this.#holds > 0 || this.#ended) return;
    this.#ended = true;
    this.span.setAttribute(SPAN_ATTRIBUTES.peers, this.#peers);
    this.span.end();
  }
}

/** Opens the `kds.change` span of every change a side serves. */
export class ChangeTraces {
  readonly #tracer: Tracer;
  readonly #role: "global" | "zone";
  #current: ChangeTrace | undefined;

  /**
   * @param tracer - the registered SDK's tracer
   * @param role - this side's role, an attribute of every span
   */
  constructor(tracer: Tracer, role: "global" | "zone") {
    this.#tracer = tracer;
    this.#role = role;
  }

  /** The tracer the per-peer spans are recorded with. */
  get tracer(): Tracer {
    return this.#tracer;
  }

  /** This side's role. */
  get role(): "global" | "zone" {
    return this.#role;
  }

  /**
   * Runs `tell` (which tells every stream of `change` to `key` of `kind`)
   * with the change's trace current, then ends the span if no stream took
   * a hold on it.
   */
  readonly fanOut = (change: StoreChange, kind: string, key: string, tell: () => void): void => {
    const now = Date.now();
    const modified = change.op === "put" ? change.resource.meta.modificationTime.getTime() : now;
    const start = modified <= now && now - modified <= MAX_START_AGE_MS ? modified : now;
    const span = this.#tracer.startSpan(
      SPAN_NAMES.change,
      {
        kind: SpanKind.PRODUCER,
        startTime: start,
        root: true,
        attributes: {
          [SPAN_ATTRIBUTES.kind]: kind,
          [SPAN_ATTRIBUTES.key]: key,
          [SPAN_ATTRIBUTES.role]: this.#role,
          [SPAN_ATTRIBUTES.revision]: change.revision,
          [SPAN_ATTRIBUTES.op]: change.op,
        },
      },
      ROOT_CONTEXT,
    );
    const traced = new ChangeTrace(span, kind, key);
    const before = this.#current;
    this.#current = traced;
    try {
      tell();
    } finally {
      this.#current = before;
      traced.fannedOut();
    }
  };

  /** The change being told to the streams right now, if it is `key` (a stream calls it as it hears of a change). */
  current(key: string): ChangeTrace | undefined {
    const current = this.#current;
    return current !== undefined && current.key === key ? current : undefined;
  }
}
