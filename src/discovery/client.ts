/**
 * The discovery client of one stream: subscribes to its types, applies every
 * response to a {@link ResourceSink}, and ACKs or NACKs it. A NACK carries
 * the last accepted version and the reason; the sink keeps what it had. A
 * response naming more than `maxResponseResources` entries (resources plus
 * removals in delta, resources in SotW) is NACKed before the sink is called,
 * so one response's store work is bounded; so is a response in the form
 * (SotW or delta) this client did not subscribe in.
 *
 * @module
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { KdsError } from "../errors.ts";
import {
  DeltaDiscoveryRequestSchema,
  DiscoveryRequestSchema,
  NodeSchema,
  type DeltaDiscoveryResponse,
  type DiscoveryResponse,
} from "../gen/kds/v1/discovery_pb.ts";
import { plainAck, type MuxRequest, type MuxResponse } from "../mux/frames.ts";
import type { ClientStreamView, ViewReceiver } from "../mux/views.ts";
import { RejectedSet } from "./resource-errors.ts";
import {
  assertMaxResponseResources,
  defaultDiscoveryOptions,
  type ClientObserver,
  type ReceivedResource,
  type ResourceSink,
  type SinkResult,
} from "./types.ts";

/** google.rpc.Code INVALID_ARGUMENT, the code of a NACK's error_detail. */
const INVALID_ARGUMENT = 3;

/** How a {@link DiscoveryClient} is created. */
export interface DiscoveryClientInit {
  /** The stream view it requests on. */
  readonly view: ClientStreamView;
  /** The type URLs to subscribe to. */
  readonly typeUrls: readonly string[];
  /** State of the world or incremental. Default "delta". */
  readonly mode?: "sotw" | "delta";
  /** Where received resources go. */
  readonly sink: ResourceSink;
  /** Who is asking (sent in each type's first request). */
  readonly node?: MessageInitShape<typeof NodeSchema>;
  /** Status callbacks. */
  readonly observer?: ClientObserver;
  /**
   * A response naming more entries than this (resources plus removals in
   * delta, resources in SotW) is NACKed before any of its resources is
   * looked at or the store is read (the frame itself was decoded by the
   * mux; see `DiscoveryOptions.maxResponseResources`). Default 10,000.
   */
  readonly maxResponseResources?: number;
}

/** Subscribes one stream's client view to a set of types. */
export class DiscoveryClient {
  readonly #init: DiscoveryClientInit;
  readonly #mode: "sotw" | "delta";
  /**
   * The last accepted version of each type, made at the first accepted
   * response (or when asked for): a global's client of an idle zone never
   * accepts one, its zone having nothing to send.
   */
  #accepted: Map<string, string> | undefined;
  /** Per type, the resources this client rejected and holds no copy of (reported in every ACK). */
  readonly #rejectedSet = new RejectedSet();
  readonly #maxEntries: number;

  /** @param init - view, types, sink */
  constructor(init: DiscoveryClientInit) {
    this.#init = init;
    this.#mode = init.mode ?? "delta";
    this.#maxEntries = init.maxResponseResources ?? defaultDiscoveryOptions.maxResponseResources;
    assertMaxResponseResources(this.#maxEntries);
  }

  /** The last accepted version of each type. */
  acceptedVersions(): ReadonlyMap<string, string> {
    return this.#acceptedMade(); // the map itself, as it was before it was made lazily: it shows later versions too
  }

  /** `#accepted`, made if it was not yet (for a version to go in). */
  #acceptedMade(): Map<string, string> {
    this.#accepted ??= new Map();
    return this.#accepted;
  }

  /** Subscribes, then applies responses until `signal` aborts or the stream ends; resolves then. */
  run(signal: AbortSignal): Promise<void> {
    // A promise chain once subscribed, not one async function: its suspended frame lived as long as the stream, in every
    // idle zone's.
    const view = this.#init.view;
    return this.#subscribe(signal)
      .then(() =>
        view.recvTo !== undefined
          ? this.#applyEach(view.recvTo.bind(view), signal)
          : this.#recvEach(signal),
      )
      .catch((error: unknown) => {
        if (KdsError.is(error, "session_closed") || KdsError.is(error, "aborted") || signal.aborted)
          return;
        throw error;
      });
  }

  /** Sends the first request of every type, in order. */
  async #subscribe(signal: AbortSignal): Promise<void> {
    const { view, sink } = this.#init;
    const node = create(NodeSchema, this.#init.node ?? {});
    for (const typeUrl of this.#init.typeUrls) {
      if (this.#mode === "sotw") {
        await view.send(create(DiscoveryRequestSchema, { typeUrl, node }), signal);
      } else {
        const known = await sink.versions(typeUrl, signal);
        await view.send(
          create(DeltaDiscoveryRequestSchema, {
            typeUrl,
            node,
            resourceNamesSubscribe: ["*"],
            initialResourceVersions: Object.fromEntries(known),
          }),
          signal,
        );
      }
    }
  }

  /** Applies the responses one at a time, taking each with `recv`; rejects with the first failure, never resolves. */
  async #recvEach(signal: AbortSignal): Promise<never> {
    const view = this.#init.view;
    for (;;) await this.#onResponse(await view.recv(signal), signal);
  }

  /**
   * Applies the responses one at a time as they arrive, taking each with
   * `recvTo`: between two changes (a long time for a zone) nothing waits on
   * a promise that young collections would copy and then promote. Rejects
   * with the first failure (the session's end included); never resolves.
   */
  #applyEach(
    recvTo: (receiver: ViewReceiver<MuxResponse>, signal: AbortSignal) => void,
    signal: AbortSignal,
  ): Promise<never> {
    return new Promise((_, reject) => {
      const next = (): void => recvTo(receiver, signal);
      const receiver: ViewReceiver<MuxResponse> = {
        take: (response) => {
          this.#onResponse(response, signal).then(next, reject);
        },
        fail: reject,
      };
      next();
    });
  }

  #onResponse(response: MuxResponse, signal: AbortSignal): Promise<void> {
    return response.$typeName === "kds.v1.DiscoveryResponse"
      ? this.#onSotw(response, signal)
      : this.#onDelta(response, signal);
  }

  async #onSotw(response: DiscoveryResponse, signal: AbortSignal): Promise<void> {
    const { typeUrl, nonce, versionInfo } = response;
    const error = await this.#apply(
      typeUrl,
      signal,
      () => {
        if (this.#mode !== "sotw") {
          throw new KdsError(
            "invalid_argument",
            `a state-of-the-world response for ${typeUrl}, but this client subscribed to it in delta form; nothing was applied. ` +
              `Answer a delta subscription (DeltaDiscoveryRequest) with DeltaDiscoveryResponse`,
          );
        }
        this.#checkEntries(response.resources.length, "state-of-the-world", "resources");
        return this.#init.sink.replace(typeUrl, response.resources, signal);
      },
      () => ({ replaced: true, received: [], removed: [] }),
    );
    if (error === undefined) {
      this.#acceptedMade().set(typeUrl, versionInfo);
      await this.#reply(
        create(DiscoveryRequestSchema, {
          typeUrl,
          versionInfo,
          responseNonce: nonce,
          errorDetail: this.#rejectedSet.detail(typeUrl),
        }),
        signal,
      );
      this.#init.observer?.accepted?.(typeUrl, {
        version: versionInfo,
        resources: response.resources.length,
        removed: 0,
      });
      return;
    }
    await this.#reply(
      create(DiscoveryRequestSchema, {
        typeUrl,
        // In delta mode no state-of-the-world version was ever accepted.
        versionInfo: this.#mode === "sotw" ? (this.#accepted?.get(typeUrl) ?? "") : "",
        responseNonce: nonce,
        errorDetail: { code: INVALID_ARGUMENT, message: error },
      }),
      signal,
    );
    this.#init.observer?.rejected?.(typeUrl, versionInfo, error);
  }

  async #onDelta(response: DeltaDiscoveryResponse, signal: AbortSignal): Promise<void> {
    const { typeUrl, nonce, systemVersionInfo } = response;
    const error = await this.#apply(
      typeUrl,
      signal,
      () => {
        const { resources, removedResources } = response;
        this.#checkEntries(
          resources.length + removedResources.length,
          "delta",
          `resources and removals (${resources.length} + ${removedResources.length})`,
        );
        const received = resources.map((r) => ({
          key: r.name,
          version: r.version,
          any: r.resource,
        }));
        const missing = received.find((r) => r.any === undefined);
        if (missing !== undefined)
          throw new KdsError("invalid_resource", `resource "${missing.key}" carries no payload`);
        return this.#init.sink.apply(
          typeUrl,
          received as ReceivedResource[],
          response.removedResources,
          signal,
        );
      },
      () => ({
        replaced: false,
        received: response.resources.map((r) => r.name),
        removed: response.removedResources,
      }),
    );
    if (error === undefined) {
      this.#acceptedMade().set(typeUrl, systemVersionInfo);
      const errorDetail = this.#rejectedSet.detail(typeUrl);
      const replying = this.#reply(
        errorDetail === undefined
          ? plainAck(typeUrl, nonce)
          : create(DeltaDiscoveryRequestSchema, { typeUrl, responseNonce: nonce, errorDetail }),
        signal,
      );
      if (replying !== undefined) await replying; // nearly every ACK left at once: no turn to wait
      this.#init.observer?.accepted?.(typeUrl, {
        version: systemVersionInfo,
        resources: response.resources.length,
        removed: response.removedResources.length,
      });
      return;
    }
    await this.#reply(
      create(DeltaDiscoveryRequestSchema, {
        typeUrl,
        responseNonce: nonce,
        errorDetail: { code: INVALID_ARGUMENT, message: error },
      }),
      signal,
    );
    this.#init.observer?.rejected?.(typeUrl, systemVersionInfo, error);
  }

  /**
   * Sends `request` (an ACK or a NACK). Where the view takes it at once
   * (nearly every ACK: the request window has room), it leaves in this call
   * and undefined is returned (the delta ACK then awaits nothing);
   * otherwise the returned promise waits as `send` does.
   */
  #reply(request: MuxRequest, signal: AbortSignal): Promise<void> | undefined {
    const view = this.#init.view;
    return view.trySend?.(request, signal) === true ? undefined : view.send(request, signal);
  }

  /** Throws `invalid_argument` when a response names more than `maxResponseResources` entries (`what` says which, for the message). */
  #checkEntries(entries: number, form: "delta" | "state-of-the-world", what: string): void {
    if (entries <= this.#maxEntries) return;
    const advice =
      form === "delta"
        ? `Send at most ${this.#maxEntries} per response (a kds-mux server splits at its maxResponseResources; give both sides the same value), or raise maxResponseResources on this side`
        : `A state-of-the-world set cannot be split: use delta for a kind this large, or raise maxResponseResources on this side (a kds-mux server does not send a set over its own maxResponseResources; give both sides the same value)`;
    throw new KdsError(
      "invalid_argument",
      `the response names ${entries} ${what}, more than the ${this.#maxEntries} this side accepts in one ${form} response; nothing was applied. ${advice}`,
    );
  }

  /**
   * Runs `apply`; returns the rejection reason, or undefined when it
   * succeeded (then the resources it left out join the rejected set, and
   * those of `keys` it took leave it; read only then, so nothing of a
   * response is looked at before `apply` checked it).
   */
  async #apply(
    typeUrl: string,
    signal: AbortSignal,
    apply: () => Promise<SinkResult>,
    keys: () => { replaced: boolean; received: readonly string[]; removed: readonly string[] },
  ): Promise<string | undefined> {
    // The types subscribed are a few: searched in the init's list rather than copied into a set per stream.
    if (!this.#init.typeUrls.includes(typeUrl))
      return `this client did not subscribe to ${typeUrl}`;
    try {
      const { rejected } = await apply();
      // Nearly always nothing was or is rejected: then the set has nothing to record, and the keys are not listed.
      if (rejected.length > 0 || this.#rejectedSet.holds(typeUrl))
        this.#rejectedSet.applied(typeUrl, { ...keys(), rejected });
      for (const r of rejected) this.#init.observer?.resourceRejected?.(typeUrl, r.key, r.reason);
      return undefined;
    } catch (error) {
      if (signal.aborted || KdsError.is(error, "aborted") || KdsError.is(error, "session_closed"))
        throw error;
      return error instanceof Error ? error.message : String(error);
    }
  }
}
