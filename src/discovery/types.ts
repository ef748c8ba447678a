/**
 * The seams of the discovery layer: where a server gets its resources, where
 * a client puts what it receives, and how both report what happens. The
 * discovery state machines know nothing about stores or the mux; they work
 * on a stream view.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import type { Any } from "@bufbuild/protobuf/wkt";
import type { Resource } from "../gen/kds/v1/discovery_pb.ts";

/** One resource ready to send, with its encoded sizes computed once. */
export interface WireResource {
  /** Discovery name: "mesh/name" or "name". */
  readonly key: string;
  /** The resource's version in the sender's store. */
  readonly version: string;
  /** The resource as it travels (an Any holding a kds.v1.KdsResource). */
  readonly any: Any;
  /** The same, wrapped as a delta `Resource` (name, version, resource). */
  readonly resource: Resource;
  /** Encoded size of the Any, in bytes (a SotW response entry). */
  readonly anyBytes: number;
  /** Encoded size of a delta `Resource` holding it, in bytes. */
  readonly resourceBytes: number;
}

/** A read-only view of a set of resources, by key. */
export interface ResourceSet extends Iterable<WireResource> {
  /** The resource under `key`, if it is in the set. */
  get(key: string): WireResource | undefined;
}

/**
 * What a server offers one client for one type, at one moment. Valid until
 * the server's next `await`: sources may update it in place.
 */
export interface Snapshot {
  /** Changes whenever any resource in the set changes (a digest of keys and versions). */
  readonly version: string;
  /** The resources. */
  readonly resources: ResourceSet;
}

/** Where a discovery server gets its resources. */
export interface SnapshotSource {
  /** Type URLs this source serves. */
  readonly typeUrls: readonly string[];
  /**
   * The current set of `typeUrl` for this client, or undefined while the
   * source cannot tell it yet (not loaded, or its store failed): the server
   * then sends nothing for that type — never an empty set — and waits for the
   * source's next change notification.
   */
  snapshot(typeUrl: string, signal: AbortSignal): Promise<Snapshot | undefined>;
  /**
   * Optional: what `snapshot` would resolve to, given at once. A source that
   * holds its sets in memory offers it, and the server then reads a set
   * without waiting a turn (it reads one per client and change). A source
   * built on other sources offers it only when each of them does.
   */
  snapshotNow?(typeUrl: string): Snapshot | undefined;
  /**
   * Calls `listener` whenever the set of `typeUrl` may have changed, with the
   * key that changed, or without one when anything may have, until `signal`
   * aborts.
   */
  onChange(listener: (typeUrl: string, key?: string) => void, signal: AbortSignal): void;
}

/** A resource received in a delta response. */
export interface ReceivedResource {
  /** Discovery name. */
  readonly key: string;
  /** The version the sender gave it. */
  readonly version: string;
  /** The payload. */
  readonly any: Any;
}

/** A resource the sink could not take, while it took the rest of the response. */
export interface ResourceRejection {
  /** Its discovery key. */
  readonly key: string;
  /** Why, for logs and status. */
  readonly reason: string;
}

/** What a sink did with a response it accepted. */
export interface SinkResult {
  /** Resources left out, each for its own reason (the response is still ACKed). */
  readonly rejected: readonly ResourceRejection[];
}

/**
 * Where a discovery client puts what it receives. A method that throws
 * rejects the whole response (the client NACKs it), and must then have
 * changed nothing: implementations write a response atomically. A resource
 * that only this side cannot take (its local name is invalid, say) is
 * reported in the result instead, and does not block the rest.
 */
export interface ResourceSink {
  /** What the client holds of `typeUrl` now, key -> version (sent on reconnect to resume). */
  versions(typeUrl: string, signal: AbortSignal): Promise<Map<string, string>>;
  /** SotW: the set of `typeUrl` becomes exactly `resources`. */
  replace(typeUrl: string, resources: readonly Any[], signal: AbortSignal): Promise<SinkResult>;
  /** Delta: add or update `resources`, remove `removed` keys. */
  apply(
    typeUrl: string,
    resources: readonly ReceivedResource[],
    removed: readonly string[],
    signal: AbortSignal,
  ): Promise<SinkResult>;
}

/** Server-side events, for status and metrics. */
export interface ServerObserver {
  /**
   * A response left. `keys` names what a delta response carried (updated and
   * removed); it is undefined for a state-of-the-world response, which
   * carries the whole set.
   */
  sent?(
    typeUrl: string,
    info: {
      version: string;
      nonce: string;
      resources: number;
      removed: number;
      bytes: number;
      keys?: readonly string[];
    },
  ): void;
  /** The client accepted the response sent with `nonce`. */
  acked?(typeUrl: string, version: string, nonce: string): void;
  /** The client rejected the response sent with `nonce`. */
  nacked?(typeUrl: string, version: string, error: string, nonce: string): void;
  /**
   * With every ACK: the resources of the type the peer currently rejects
   * (an ACK that names none clears them), and how many more it left
   * unnamed (see resource-errors.ts).
   */
  resourceErrors?(typeUrl: string, errors: readonly ResourceRejection[], omitted: number): void;
  /** A response has waited longer than the ACK timeout (reported once per response; the server keeps waiting for its answer). */
  stalled?(typeUrl: string, nonce: string, waitedMs: number): void;
  /** A resource is larger than a whole message may be; it is left out until it changes. */
  oversized?(typeUrl: string, key: string, bytes: number, limit: number): void;
  /**
   * The server has sent everything of the type it had been told changed
   * (nothing is left to diff or send for it now): a change it was told of
   * that no response carried will not be sent (the client's set did not
   * change with it, or it is oversized). For tracing (a change's span
   * waits for every peer to answer it or to show it will not be sent it).
   */
  caughtUp?(typeUrl: string): void;
  /**
   * The client asked for a type this server does not serve. The server
   * answers nothing (xDS has no answer for it); the sync layer ends the
   * session here (`endOnUnknownType`), so the request is never silent.
   */
  unknownType?(typeUrl: string): void;
}

/** Client-side events, for status and metrics. */
export interface ClientObserver {
  /** A response arrived and was applied. */
  accepted?(typeUrl: string, info: { version: string; resources: number; removed: number }): void;
  /** A response was rejected (NACKed); the previous state is kept. */
  rejected?(typeUrl: string, version: string, error: string): void;
  /** One resource of an accepted response was left out (see {@link SinkResult}). */
  resourceRejected?(typeUrl: string, key: string, reason: string): void;
}

/** Tunables of the discovery layer. */
export interface DiscoveryOptions {
  /** No response is larger than this many bytes. Default 4 MiB minus 16 KiB of headroom. */
  maxMessageBytes?: number;
  /** First backoff before resending after a NACK; doubles per consecutive NACK. Default 5 s. */
  nackBackoffMs?: number;
  /** Cap of the NACK backoff. Default 60 s. */
  nackBackoffCapMs?: number;
  /** A response not ACKed for this long is reported stalled (and still waited for, not resent). Default 30 s. */
  ackTimeoutMs?: number;
  /**
   * A delta response is closed once it holds about this many bytes, so a
   * large change leaves in parts the client applies while the server
   * prepares the next ones, instead of in a few maximal messages each side
   * waits for. A resource larger than this still goes, alone, in a response
   * of up to `maxMessageBytes` (the hard limit). Default 512 KiB.
   */
  deltaResponseBytes?: number;
  /**
   * Delta responses of one type that may wait for their ACK at once, so a
   * large change split over several responses streams instead of waiting a
   * round trip per part. SotW always keeps one. Default 8 (with the default
   * `deltaResponseBytes`, 4 MiB of responses: half the mux's default byte
   * window).
   */
  maxDeltaInFlight?: number;
  /**
   * Entries one response may name: resources plus removals in delta,
   * resources in SotW. A server closes each delta response at this many,
   * and does not send a SotW set larger than this (it cannot be split; it
   * is reported as oversized, `*`). A client refuses (NACKs, changing
   * nothing) a response naming more before it looks at any resource or
   * reads its store, so the store work one response can cause is bounded
   * whatever the sender chose. Give both sides the same value: a client
   * with a lower one than its peer's server refuses that server's largest
   * responses. Default 10,000.
   */
  maxResponseResources?: number;
}

/** {@link DiscoveryOptions} with defaults. */
export const defaultDiscoveryOptions: Required<DiscoveryOptions> = Object.freeze({
  maxMessageBytes: 4 * 1024 * 1024 - 16 * 1024,
  nackBackoffMs: 5_000,
  nackBackoffCapMs: 60_000,
  ackTimeoutMs: 30_000,
  deltaResponseBytes: 512 * 1024,
  maxDeltaInFlight: 8,
  maxResponseResources: 10_000,
});

/** Throws `invalid_argument` unless `value` is a usable {@link DiscoveryOptions.maxResponseResources}. */
export function assertMaxResponseResources(value: number): void {
  if (!Number.isInteger(value) || value < 1) {
    throw new KdsError(
      "invalid_argument",
      `maxResponseResources must be a positive integer (entries per response: resources plus removals in delta, resources in SotW), got ${value}`,
    );
  }
}
