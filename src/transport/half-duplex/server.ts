/**
 * The global's side of the half-duplex mux (`kds.mux.v1.HalfDuplexService`):
 * a *link* stands for one zone stream. Its global -> zone frames are numbered
 * and kept until the zone acknowledges them, so a dropped Pull resumes where
 * it broke; its zone -> global frames arrive numbered through Push calls and
 * duplicates from retried calls are dropped. The session behind a link is an
 * ordinary mux session from the global's {@link MuxAcceptor} (its `GlobalServer`).
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type HandlerContext,
  type ServiceImpl,
} from "@connectrpc/connect";
import { KdsError } from "../../errors.ts";
import {
  HalfDuplexService,
  PullResponseSchema,
  type PullRequest,
  type PullResponse,
  type PushRequest,
} from "../../gen/kds/mux/v1/half_duplex_pb.ts";
import type { Frame } from "../../gen/kds/mux/v1/mux_pb.ts";
import { peerInfoKey } from "../../auth/peer.ts";
import { CLIENT_ID_HEADER } from "../../names.ts";
import { AsyncQueue } from "../../util/async-queue.ts";
import { Pulse } from "../../util/wake.ts";
import type { UniversalHandlerOptions } from "@connectrpc/connect/protocol";
import { toConnectError } from "../../connect-errors.ts";
import type { MuxAcceptor } from "../transport.ts";

/** Options of {@link HalfDuplexHub}. */
export interface HalfDuplexHubOptions {
  /** A link whose zone has no Pull open for this long ends (its session fails). Default 30 s. */
  resumeTimeoutMs?: number;
  /** Most frames kept per direction while unacknowledged. Default 1024. */
  maxUnacked?: number;
}

interface Link {
  readonly id: string;
  readonly zone: string;
  /** The `authorization` header the link was admitted with; every later call must carry the same. */
  readonly credential: string;
  readonly controller: AbortController;
  readonly inbound: AsyncQueue<Frame>;
  receivedSeq: bigint;
  readonly outbound: AsyncIterator<Frame>;
  /** Frames sent down, not yet acknowledged; seqs are consecutive. */
  readonly buffer: { seq: bigint; frame: Frame }[];
  nextSeq: bigint;
  outboundDone: boolean;
  /**
   * Why the session's frames stopped, when they stopped with an error (the
   * session ended for a failure or a revocation, or its writer failed): the
   * Pull then ends with it as its status, as a `StreamMessage` call would,
   * instead of the end marker.
   */
  failure: KdsError | undefined;
  pullGeneration: number;
  pullActive: boolean;
  resumeTimer: ReturnType<typeof setTimeout> | undefined;
  /** Wakes whoever waits for the link to change (its Pull stream, its pump). */
  readonly changed: Pulse;
}

/** Serves the half-duplex mux for a global (any {@link MuxAcceptor}). */
export class HalfDuplexHub {
  readonly #global: MuxAcceptor;
  readonly #links = new Map<string, Link>();
  /** How many live links each (zone, credential) pair opened, for {@link HalfDuplexHub.admits}. */
  readonly #credentials = new Map<string, number>();
  readonly #resumeTimeoutMs: number;
  readonly #maxUnacked: number;

  /** @param global - the global whose sessions the links carry */
  constructor(global: MuxAcceptor, options: HalfDuplexHubOptions = {}) {
    this.#global = global;
    this.#resumeTimeoutMs = options.resumeTimeoutMs ?? 30_000;
    this.#maxUnacked = options.maxUnacked ?? 1024;
  }

  /**
   * Whether a live link of zone `zone` was opened with the `authorization`
   * header `authorization` (not empty): a server adapter lets a Push or Pull
   * with such headers through before reading its body, without proving the
   * credential again (the call itself must still name that link).
   */
  admits(zone: string, authorization: string): boolean {
    return authorization !== "" && this.#credentials.has(credentialKey(zone, authorization));
  }

  /** Links alive now. */
  get links(): number {
    return this.#links.size;
  }

  /** The service implementation; mount it with {@link registerHalfDuplex}. */
  service(): ServiceImpl<typeof HalfDuplexService> {
    return {
      pull: (request, context) => this.#pull(request, context),
      push: async (request, context) => {
        try {
          return { ackedSeq: this.#push(request, context) };
        } catch (error) {
          throw toConnectError(error);
        }
      },
    };
  }

  async *#pull(request: PullRequest, context: HandlerContext): AsyncGenerator<PullResponse> {
    let link: Link;
    try {
      link =
        request.linkId === "" ? await this.#open(context) : this.#find(request.linkId, context);
      this.#ack(link, request.ackedSeq);
    } catch (error) {
      throw toConnectError(error);
    }
    const first = link.buffer[0];
    if (first !== undefined && request.ackedSeq + 1n < first.seq) {
      throw new ConnectError(
        `frames after ${request.ackedSeq} are no longer kept; reconnect`,
        Code.DataLoss,
      );
    }
    const generation = ++link.pullGeneration;
    link.pullActive = true;
    if (link.resumeTimer !== undefined) clearTimeout(link.resumeTimer);
    link.resumeTimer = undefined;
    link.changed.notify();
    const response = (init: { seq?: bigint; frame?: Frame; end?: boolean }): PullResponse =>
      create(PullResponseSchema, { linkId: link.id, pushAckedSeq: link.receivedSeq, ...init });
    try {
      yield response({});
      let next = request.ackedSeq + 1n;
      for (;;) {
        if (generation !== link.pullGeneration || context.signal.aborted) return;
        const head = link.buffer[0];
        const item = head === undefined ? undefined : link.buffer[Number(next - head.seq)];
        if (item !== undefined && item.seq === next) {
          yield response({ seq: item.seq, frame: item.frame });
          next++;
          continue;
        }
        if (link.outboundDone) {
          if (link.failure !== undefined) {
            this.#drop(link);
            throw toConnectError(link.failure);
          }
          yield response({ end: true });
          // Everything before the end marker has been written: the link is done.
          this.#drop(link);
          return;
        }
        await link.changed.next(context.signal);
      }
    } finally {
      if (generation === link.pullGeneration) {
        link.pullActive = false;
        this.#armResumeTimer(link);
      }
    }
  }

  #push(request: PushRequest, context: HandlerContext): bigint {
    const link = this.#find(request.linkId, context);
    this.#ack(link, request.pullAckedSeq);
    request.frames.forEach((frame, i) => {
      const seq = request.firstSeq + BigInt(i);
      if (seq <= link.receivedSeq) return; // a retried call: already delivered
      if (seq !== link.receivedSeq + 1n) {
        throw new KdsError(
          "protocol_error",
          `push of frame ${seq} after frame ${link.receivedSeq}: frames must arrive in order`,
        );
      }
      if (!link.inbound.push(frame)) {
        throw new KdsError(
          "protocol_error",
          `more than ${this.#maxUnacked} zone frames wait to be read on link ${link.id}`,
        );
      }
      link.receivedSeq = seq;
    });
    return link.receivedSeq;
  }

  async #open(context: HandlerContext): Promise<Link> {
    const controller = new AbortController();
    const inbound = new AsyncQueue<Frame>(this.#maxUnacked);
    const outbound = await this.#global.accept(
      context.requestHeader,
      inbound,
      controller.signal,
      context.values.get(peerInfoKey),
    );
    const zone = context.requestHeader.get(CLIENT_ID_HEADER)?.trim() ?? "";
    const link: Link = {
      id: crypto.randomUUID(),
      zone,
      credential: context.requestHeader.get("authorization") ?? "",
      controller,
      inbound,
      receivedSeq: 0n,
      outbound: outbound[Symbol.asyncIterator](),
      buffer: [],
      nextSeq: 1n,
      outboundDone: false,
      failure: undefined,
      pullGeneration: 0,
      pullActive: false,
      resumeTimer: undefined,
      changed: new Pulse(),
    };
    this.#links.set(link.id, link);
    const key = credentialKey(link.zone, link.credential);
    this.#credentials.set(key, (this.#credentials.get(key) ?? 0) + 1);
    controller.signal.addEventListener("abort", () => this.#drop(link), { once: true });
    void this.#pump(link);
    return link;
  }

  #find(id: string, context: HandlerContext): Link {
    const link = this.#links.get(id);
    if (link === undefined)
      throw new KdsError("session_closed", `link ${id} has ended (or expired); open a new one`);
    const zone = context.requestHeader.get(CLIENT_ID_HEADER)?.trim() ?? "";
    if (zone !== link.zone)
      throw new KdsError(
        "invalid_argument",
        `link ${id} belongs to zone "${link.zone}", not "${zone}"`,
      );
    if ((context.requestHeader.get("authorization") ?? "") !== link.credential) {
      throw new KdsError(
        "unauthenticated",
        `link ${id} was opened with other credentials; every Push and Pull of a link carries the token that opened it`,
      );
    }
    return link;
  }

  /** Moves the session's outbound frames into the link's buffer, at most `maxUnacked` at a time. */
  async #pump(link: Link): Promise<void> {
    try {
      for (;;) {
        while (link.buffer.length >= this.#maxUnacked) {
          await link.changed.next();
          if (link.controller.signal.aborted) return;
        }
        const r = await link.outbound.next();
        if (r.done === true) break;
        link.buffer.push({ seq: link.nextSeq++, frame: r.value });
        link.changed.notify();
      }
    } catch (error) {
      // The session ended for a failure (its goaway, already in the buffer,
      // tells the zone why) or its writer failed: the Pull ends with it.
      link.failure =
        error instanceof KdsError
          ? error
          : new KdsError(
              "transport",
              `the global's frames for zone "${link.zone}" stopped: ${error instanceof Error ? error.message : String(error)}`,
              { cause: error },
            );
    }
    link.outboundDone = true;
    link.changed.notify();
    // With no Pull open and nothing left to send, the zone already has the goaway (when there was one):
    // the link ends now rather than staying admitted for a Pull that may never come.
    if (link.buffer.length === 0 && !link.pullActive) this.#drop(link);
  }

  #ack(link: Link, seq: bigint): void {
    if (seq >= link.nextSeq) {
      throw new KdsError(
        "protocol_error",
        `link ${link.id} acknowledges frame ${seq}, but only ${link.nextSeq - 1n} were sent`,
      );
    }
    while (link.buffer.length > 0 && (link.buffer[0]?.seq ?? 0n) <= seq) link.buffer.shift();
    link.changed.notify();
  }

  #armResumeTimer(link: Link): void {
    if (link.resumeTimer !== undefined || !this.#links.has(link.id)) return;
    if (link.outboundDone && link.buffer.length === 0) {
      this.#drop(link);
      return;
    }
    link.resumeTimer = setTimeout(() => {
      link.controller.abort(
        new KdsError(
          "transport",
          `zone "${link.zone}" did not resume its half-duplex link within ${this.#resumeTimeoutMs} ms`,
        ),
      );
    }, this.#resumeTimeoutMs);
  }

  #drop(link: Link): void {
    if (!this.#links.delete(link.id)) return;
    const key = credentialKey(link.zone, link.credential);
    const left = (this.#credentials.get(key) ?? 1) - 1;
    if (left > 0) this.#credentials.set(key, left);
    else this.#credentials.delete(key);
    if (link.resumeTimer !== undefined) clearTimeout(link.resumeTimer);
    link.inbound.close();
    link.controller.abort();
    void link.outbound.return?.(undefined);
    link.changed.notify();
  }
}

/** The key of a (zone, authorization header) pair. */
function credentialKey(zone: string, authorization: string): string {
  return `${zone}\n${authorization}`;
}

/** Registers the half-duplex service of `hub` on `router` (with `options`, such as the JSON codec's type registry). */
export function registerHalfDuplex(
  router: ConnectRouter,
  hub: HalfDuplexHub,
  options?: Partial<UniversalHandlerOptions>,
): ConnectRouter {
  return router.service(HalfDuplexService, hub.service(), options);
}
