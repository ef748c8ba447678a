/**
 * Reverse calls: Connect calls that travel inside a mux session, so the
 * global can call services a zone serves without dialing the zone.
 *
 * A call is an HTTP-like exchange carrying the Connect protocol (see the
 * `Call` frame in proto/kds/mux/v1/mux.proto): the caller sends one `open`
 * with the path, headers and whole request body; the callee answers with a
 * `head`, body chunks (`data`) and an `end` with the trailers. Connect's own
 * protocol code runs on both ends (a `UniversalClientFn` here, the
 * router's handlers there), so deadlines, errors, metadata and streaming
 * behave as over HTTP.
 *
 * Bounds: the caller grants the callee a window of data frames per call and
 * more as it reads them (a callee that sends beyond it is a protocol error);
 * a callee runs at most `maxCalls` at once and refuses more; a request body
 * is at most `maxRequestBytes`. Unary and server-streaming methods are
 * served; client-streaming and bidi methods are refused (a call has one
 * request body).
 *
 * One endpoint per session does both roles. A callee adds a `kds-caller`
 * header naming the session's peer (what it was admitted as, never what
 * the caller claims), and whoever has no services refuses every call.
 *
 * @module
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  createUniversalHandlerClient,
  type UniversalClientFn,
  type UniversalClientRequest,
  type UniversalClientResponse,
  type UniversalHandler,
} from "@connectrpc/connect/protocol";
import { KdsError } from "../errors.ts";
import { CallSchema, type Call, type CallEnd, type CallHead } from "../gen/kds/mux/v1/mux_pb.ts";
import type { Session } from "../mux/views.ts";
import { deferred, type Deferred } from "../util/deferred.ts";
import { Waker } from "../util/wake.ts";

/** Header a callee sets to the session's peer name; handlers may trust it. */
export const CALLER_HEADER = "kds-caller";

/** Tunables of a {@link CallEndpoint}. */
export interface CallEndpointOptions {
  /** Data frames a callee may send per call before the caller grants more. Default 8. */
  readonly window?: number;
  /** Calls this side serves at once; more are refused (resource_exhausted). Default 16. */
  readonly maxCalls?: number;
  /** Largest request body, in bytes. Default 1 MiB. */
  readonly maxRequestBytes?: number;
}

interface OutgoingCall {
  readonly head: Deferred<CallHead>;
  readonly chunks: Uint8Array[];
  readonly trailer: Headers;
  /** Data frames the callee may still send. */
  allowed: number;
  /** Data frames read since credit was last granted. */
  read: number;
  end: CallEnd | undefined;
  failure: Error | undefined;
  /** Wakes the body's reader: a chunk, the end or a failure arrived. */
  readonly wake: Waker;
}

interface IncomingCall {
  readonly abort: AbortController;
  credit: number;
  /** Wakes the serving loop: credit arrived. */
  readonly wake: Waker;
}

const endpoints = new WeakMap<Session, CallEndpoint>();

/** The handlers of an endpoint given none (the global's): one empty map for all of them. */
const NO_HANDLERS: ReadonlyMap<string, UniversalHandler> = new Map();

/**
 * The call endpoint of `session`, created on first use. Pass `handlers`
 * (for example `createConnectRouter(...).handlers`) once, before the peer
 * can call, to serve them; without them every call is refused.
 */
export function callEndpoint(
  session: Session,
  handlers?: readonly UniversalHandler[],
  options?: CallEndpointOptions,
): CallEndpoint {
  let endpoint = endpoints.get(session);
  if (endpoint === undefined) {
    endpoint = new CallEndpoint(session, handlers, options);
    endpoints.set(session, endpoint);
  } else if (handlers !== undefined)
    throw new KdsError(
      "busy",
      "this session already has a call endpoint; give it its handlers when it is first created",
    );
  return endpoint;
}

/** Both ends of reverse calls on one session. */
export class CallEndpoint {
  readonly #session: Session;
  readonly #window: number;
  readonly #maxCalls: number;
  readonly #maxRequestBytes: number;
  readonly #handlers: ReadonlyMap<string, UniversalHandler>;
  readonly #serve: UniversalClientFn | undefined;
  /** Calls this side made, made at the first (most sessions never call). */
  #outgoing: Map<bigint, OutgoingCall> | undefined;
  /** Calls the peer made, made at the first served. */
  #incoming: Map<bigint, IncomingCall> | undefined;
  /** Refusals accepted by the session but not yet on their way. */
  #refusing = 0;
  #nextId = 1n;

  /** Use {@link callEndpoint}. */
  constructor(
    session: Session,
    handlers: readonly UniversalHandler[] | undefined,
    options: CallEndpointOptions = {},
  ) {
    this.#session = session;
    this.#window = options.window ?? 8;
    this.#maxCalls = options.maxCalls ?? 16;
    this.#maxRequestBytes = options.maxRequestBytes ?? 1024 * 1024;
    this.#handlers =
      handlers === undefined ? NO_HANDLERS : new Map(handlers.map((h) => [h.requestPath, h]));
    this.#serve = handlers === undefined ? undefined : createUniversalHandlerClient([...handlers]);
    session.calls.listen((call) => this.#onFrame(call));
    session.signal.addEventListener("abort", () => this.#sessionEnded(), { once: true });
  }

  /**
   * An HTTP client whose requests travel to the peer as reverse calls; give
   * it to a Connect protocol transport (see `reverseCallTransport`).
   */
  readonly httpClient: UniversalClientFn = (request) => this.#call(request);

  async #call(request: UniversalClientRequest): Promise<UniversalClientResponse> {
    const session = this.#session;
    if (session.end !== undefined) throw sessionGone(session);
    if (!session.calls.peerAcceptsCalls()) {
      throw new ConnectError(
        `${session.role === "global" ? `zone "${session.peerId}"` : "the global"} runs a kds-mux version without reverse calls; upgrade it`,
        Code.Unimplemented,
      );
    }
    const body = await collect(request.body, this.#maxRequestBytes);
    const id = this.#nextId++;
    const call: OutgoingCall = {
      head: deferred<CallHead>(),
      chunks: [],
      trailer: new Headers(),
      allowed: this.#window,
      read: 0,
      end: undefined,
      failure: undefined,
      wake: new Waker(),
    };
    // Marks the rejection handled for a caller that stopped waiting; a caller that waits gets it.
    call.head.promise.catch(() => undefined);
    this.#outgoing ??= new Map();
    this.#outgoing.set(id, call);
    const signal = request.signal;
    const onAbort = (): void => {
      if (this.#outgoing?.has(id) !== true) return;
      this.#fail(id, call, abortReason(signal));
      this.#send({ id, kind: { case: "cancel", value: {} } });
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    const finished = (): void => {
      signal?.removeEventListener("abort", onAbort);
      this.#outgoing?.delete(id);
    };
    try {
      if (signal?.aborted) throw abortReason(signal);
      await session.calls.send(
        create(CallSchema, {
          id,
          kind: {
            case: "open",
            value: {
              path: new URL(request.url).pathname,
              headers: toRecord(request.header),
              body,
              window: this.#window,
            },
          },
        }),
        signal,
      );
      const head = await call.head.promise;
      return {
        status: head.status,
        header: new Headers(head.headers),
        trailer: call.trailer,
        body: this.#body(id, call, finished),
      };
    } catch (error) {
      finished();
      throw error instanceof KdsError && KdsError.is(error, "session_closed")
        ? sessionGone(session)
        : error;
    }
  }

  /**
   * The response body of call `id`, granting credit as it is read. A plain
   * iterator rather than a generator: its `return` (the reader stopped
   * early) must act at once, even while a `next` waits for data.
   */
  #body(id: bigint, call: OutgoingCall, finished: () => void): AsyncIterable<Uint8Array> {
    let closed = false;
    const close = (): void => {
      if (closed) return;
      closed = true;
      if (call.end === undefined && call.failure === undefined) {
        // The reader stopped before the end: tell the callee to stop.
        call.failure = new ConnectError("the caller stopped reading", Code.Canceled);
        this.#send({ id, kind: { case: "cancel", value: {} } });
        call.wake.wake();
      }
      finished();
    };
    const next = async (): Promise<IteratorResult<Uint8Array>> => {
      for (;;) {
        const chunk = call.chunks.shift();
        if (chunk !== undefined) {
          call.read++;
          if (call.read >= Math.ceil(this.#window / 2) && call.end === undefined) {
            const credit = call.read;
            call.read = 0;
            call.allowed += credit;
            this.#send({ id, kind: { case: "credit", value: credit } });
          }
          return { done: false, value: chunk };
        }
        if (call.failure !== undefined) {
          close();
          throw call.failure;
        }
        if (call.end !== undefined || closed) {
          close();
          return { done: true, value: undefined };
        }
        await call.wake.wait();
      }
    };
    return {
      [Symbol.asyncIterator]: () => ({
        next,
        return: (): Promise<IteratorResult<Uint8Array>> => {
          close();
          return Promise.resolve({ done: true, value: undefined });
        },
        throw: (error: unknown): Promise<IteratorResult<Uint8Array>> => {
          close();
          return Promise.reject(error);
        },
      }),
    };
  }

  #onFrame(call: Call): KdsError | undefined {
    const kind = call.kind;
    switch (kind.case) {
      case "open":
        return this.#open(
          call.id,
          kind.value.path,
          kind.value.headers,
          kind.value.body,
          kind.value.window,
        );
      case "credit": {
        const incoming = this.#incoming?.get(call.id);
        if (incoming !== undefined) {
          incoming.credit += kind.value;
          incoming.wake.wake();
        }
        return undefined;
      }
      case "cancel":
        this.#incoming
          ?.get(call.id)
          ?.abort.abort(new ConnectError("the caller cancelled the call", Code.Canceled));
        return undefined;
      case "head": {
        this.#outgoing?.get(call.id)?.head.resolve(kind.value);
        return undefined;
      }
      case "data": {
        const outgoing = this.#outgoing?.get(call.id);
        if (outgoing === undefined) return undefined; // cancelled: frames already on their way
        if (outgoing.allowed <= 0) {
          return new KdsError(
            "protocol_error",
            `the peer sent more of call ${call.id} than the ${this.#window} frames of window it was granted`,
          );
        }
        outgoing.allowed--;
        outgoing.chunks.push(kind.value);
        outgoing.wake.wake();
        return undefined;
      }
      case "end": {
        const outgoing = this.#outgoing?.get(call.id);
        if (outgoing === undefined) return undefined;
        const end = kind.value;
        for (const [name, value] of Object.entries(end.trailers)) outgoing.trailer.set(name, value);
        if (end.error !== "")
          this.#fail(call.id, outgoing, new ConnectError(end.error, codeOf(end.code)));
        else {
          outgoing.end = end;
          outgoing.head.reject(
            new ConnectError("the callee ended the call without a response head", Code.Internal),
          );
          outgoing.wake.wake();
        }
        return undefined;
      }
      case undefined:
        return new KdsError(
          "protocol_error",
          "the peer sent a call frame of a kind this version does not know; run compatible kds-mux versions",
        );
    }
  }

  #open(
    id: bigint,
    path: string,
    headers: Record<string, string>,
    body: Uint8Array,
    window: number,
  ): KdsError | undefined {
    if (this.#refusing >= this.#maxCalls * 4) {
      return new KdsError(
        "protocol_error",
        `the peer opened calls faster than ${this.#maxCalls * 4} refusals could be sent; a caller waits for each call's end`,
      );
    }
    const refuse = (error: string, code: string): undefined => {
      this.#refusing++;
      this.#session.calls
        .send(create(CallSchema, { id, kind: { case: "end", value: { error, code } } }))
        .catch(() => undefined) // fails only when the session ended (every call ends with it) or its send queue is full (bounded by the check above)
        .finally(() => this.#refusing--);
      return undefined;
    };
    if (this.#incoming?.has(id) === true) {
      return refuse(`call ${id} is already open`, "invalid_argument");
    }
    if (this.#serve === undefined) {
      const who =
        this.#session.role === "global"
          ? `global "${this.#session.localId}"`
          : `zone "${this.#session.localId}"`;
      return refuse(
        `${who} serves no calls over the mux: reverse calls go from the global to a zone, and a zone reaches only its own services`,
        "permission_denied",
      );
    }
    const handler = this.#handlers.get(path);
    if (handler === undefined) {
      return refuse(
        `${this.#session.role} "${this.#session.localId}" serves no ${path} over reverse calls (a zone run by \`kds-mux zone\` serves its admin API; a library zone serves what its reverseCalls option registers)`,
        "unimplemented",
      );
    }
    if (handler.method.methodKind !== "unary" && handler.method.methodKind !== "server_streaming") {
      return refuse(
        `${path} is a ${handler.method.methodKind.replace("_", "-")} method; reverse calls carry unary and server-streaming calls only`,
        "unimplemented",
      );
    }
    if ((this.#incoming?.size ?? 0) >= this.#maxCalls) {
      return refuse(
        `${this.#maxCalls} calls already run on this session; retry when one has ended`,
        "resource_exhausted",
      );
    }
    const abort = new AbortController();
    const incoming: IncomingCall = { abort, credit: window, wake: new Waker() };
    this.#incoming ??= new Map();
    this.#incoming.set(id, incoming);
    void this.#serveCall(id, incoming, this.#serve, path, headers, body).finally(() =>
      this.#incoming?.delete(id),
    );
    return undefined;
  }

  async #serveCall(
    id: bigint,
    incoming: IncomingCall,
    serve: UniversalClientFn,
    path: string,
    headers: Record<string, string>,
    body: Uint8Array,
  ): Promise<void> {
    const signal = incoming.abort.signal;
    const header = new Headers(headers);
    header.set(CALLER_HEADER, this.#session.peerId);
    try {
      const response = await serve({
        url: `http://kds-mux.invalid${path}`,
        method: "POST",
        header,
        body: once(body),
        signal,
      });
      await this.#session.calls.send(
        create(CallSchema, {
          id,
          kind: {
            case: "head",
            value: { status: response.status, headers: toRecord(response.header) },
          },
        }),
        signal,
      );
      for await (const chunk of response.body) {
        while (incoming.credit <= 0 && !signal.aborted) await incoming.wake.wait(signal); // a cancel frees a wait for credit
        if (signal.aborted) return;
        incoming.credit--;
        await this.#session.calls.send(
          create(CallSchema, { id, kind: { case: "data", value: chunk } }),
          signal,
        );
      }
      await this.#session.calls.send(
        create(CallSchema, {
          id,
          kind: { case: "end", value: { trailers: toRecord(response.trailer) } },
        }),
        signal,
      );
    } catch (error) {
      if (signal.aborted || this.#session.end !== undefined) return; // cancelled or the session ended: the caller stopped waiting
      const e = ConnectError.from(error);
      this.#send({
        id,
        kind: { case: "end", value: { error: e.rawMessage, code: codeName(e.code) } },
      });
    }
  }

  /** Sends a call frame whose failure needs no handling: it fails only once the session ended, and every call fails with it then. */
  #send(call: MessageInitShape<typeof CallSchema>): void {
    this.#session.calls.send(create(CallSchema, call)).catch(() => undefined);
  }

  #fail(id: bigint, call: OutgoingCall, error: Error): void {
    call.failure ??= error;
    call.head.reject(error);
    call.wake.wake();
    this.#outgoing?.delete(id);
  }

  #sessionEnded(): void {
    // Most sessions end with no call open: no error to build then (one per session end adds up when thousands end at once).
    if ((this.#outgoing?.size ?? 0) === 0 && (this.#incoming?.size ?? 0) === 0) return;
    const error = sessionGone(this.#session);
    for (const [id, call] of [...(this.#outgoing ?? [])]) this.#fail(id, call, error);
    for (const incoming of this.#incoming?.values() ?? []) incoming.abort.abort(error);
  }
}

function sessionGone(session: Session): ConnectError {
  const peer = session.role === "global" ? `zone "${session.peerId}"` : "the global";
  return new ConnectError(
    `the session with ${peer} ended (${session.end?.code ?? "closed"}) before the call finished; retry once it is connected again`,
    Code.Unavailable,
  );
}

function abortReason(signal: AbortSignal | undefined): Error {
  const reason: unknown = signal?.reason;
  return reason instanceof Error
    ? reason
    : new ConnectError("the call was cancelled", Code.Canceled);
}

/** The snake_case name of a Connect code ("permission_denied"). */
function codeName(code: Code): string {
  return (Code[code] ?? "Unknown").replace(
    /[A-Z]/g,
    (c, i: number) => `${i === 0 ? "" : "_"}${c.toLowerCase()}`,
  );
}

/** Connect code from its snake_case name ("permission_denied"); unknown names are `unknown`. */
function codeOf(name: string): Code {
  const camel = name.replace(/(^|_)([a-z])/g, (_, __, c: string) => c.toUpperCase());
  const code = (Code as unknown as Record<string, Code | undefined>)[camel];
  return code ?? Code.Unknown;
}

function toRecord(headers: Headers): Record<string, string> {
  const out: Record<string, string> = {};
  headers.forEach((value, name) => {
    out[name] = value;
  });
  return out;
}

async function collect(
  body: AsyncIterable<Uint8Array> | undefined,
  max: number,
): Promise<Uint8Array> {
  if (body === undefined) return new Uint8Array(0);
  const parts: Uint8Array[] = [];
  let size = 0;
  for await (const part of body) {
    size += part.byteLength;
    if (size > max)
      throw new ConnectError(
        `a reverse call's request is larger than ${max} bytes`,
        Code.ResourceExhausted,
      );
    parts.push(part);
  }
  const out = new Uint8Array(size);
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.byteLength;
  }
  return out;
}

async function* once(body: Uint8Array): AsyncGenerator<Uint8Array> {
  yield body;
}
