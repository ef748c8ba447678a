/**
 * A session's two stream views, as objects with their methods on their
 * prototype: every idle zone's session on the global holds both, and a view
 * of closures cost four closures and their contexts each.
 *
 * @module
 */
import type { Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import type { MuxRequest, MuxResponse } from "./frames.ts";
import { requestFrame, responseFrame } from "./frames.ts";
import type { Inbox } from "./inbox.ts";
import type { Outbox } from "./outbox.ts";
import type { ClientStreamView, ServerStreamView, ViewReceiver } from "./views.ts";

/** A message's frame as the session sends it (with its trace context when the peers agreed on tracing). */
export type TraceFrame = (message: object, frame: Frame) => Frame;

/** The server view: requests in from the session's server inbox, responses out on the outbox's response lane. */
export class SessionServerView implements ServerStreamView {
  readonly #inbox: Inbox<MuxRequest>;
  readonly #outbox: Outbox;
  readonly #traced: TraceFrame;

  /**
   * @param inbox - the session's inbox of requests
   * @param outbox - the session's outbox
   * @param traced - how a frame gets its trace context
   */
  constructor(inbox: Inbox<MuxRequest>, outbox: Outbox, traced: TraceFrame) {
    this.#inbox = inbox;
    this.#outbox = outbox;
    this.#traced = traced;
  }

  /** See {@link ServerStreamView.recv}. */
  recv(signal?: AbortSignal): Promise<MuxRequest> {
    return this.#inbox.recv(signal);
  }

  /** See {@link ServerStreamView.recvTo}. */
  recvTo(receiver: ViewReceiver<MuxRequest>, signal?: AbortSignal): void {
    this.#inbox.recvTo(receiver, signal);
  }

  /** See {@link ServerStreamView.send}. */
  send(response: MuxResponse, signal?: AbortSignal): Promise<void> {
    return this.#outbox.send("responses", this.#traced(response, responseFrame(response)), signal);
  }

  /** See {@link ServerStreamView.trySend}. */
  trySend(response: MuxResponse, signal?: AbortSignal): boolean {
    return this.#outbox.offer("responses", this.#traced(response, responseFrame(response)), signal);
  }
}

/** The client view: requests out on the outbox's request lane, responses in from the session's client inbox. */
export class SessionClientView implements ClientStreamView {
  readonly #inbox: Inbox<MuxResponse>;
  readonly #outbox: Outbox;
  readonly #traced: TraceFrame;

  /**
   * @param inbox - the session's inbox of responses
   * @param outbox - the session's outbox
   * @param traced - how a frame gets its trace context
   */
  constructor(inbox: Inbox<MuxResponse>, outbox: Outbox, traced: TraceFrame) {
    this.#inbox = inbox;
    this.#outbox = outbox;
    this.#traced = traced;
  }

  /** See {@link ClientStreamView.send}. */
  send(request: MuxRequest, signal?: AbortSignal): Promise<void> {
    return this.#outbox.send("requests", this.#traced(request, requestFrame(request)), signal);
  }

  /** See {@link ClientStreamView.trySend}. */
  trySend(request: MuxRequest, signal?: AbortSignal): boolean {
    return this.#outbox.offer("requests", this.#traced(request, requestFrame(request)), signal);
  }

  /** See {@link ClientStreamView.recv}. */
  recv(signal?: AbortSignal): Promise<MuxResponse> {
    return this.#inbox.recv(signal);
  }

  /** See {@link ClientStreamView.recvTo}. */
  recvTo(receiver: ViewReceiver<MuxResponse>, signal?: AbortSignal): void {
    this.#inbox.recvTo(receiver, signal);
  }
}
