/**
 * The per-type state of a discovery server, as a tagged union with one
 * transition function. At most one response per type is in flight: the next
 * leaves only after the client ACKed or NACKed the last one.
 *
 *     idle --sent--> inflight --ack--> idle
 *                       |  \--nack--> backoff --expired--> idle
 *                       \--timeout--> idle (resend; the old nonce is stale)
 *
 * @module
 */

/** What a delta response in flight carried, applied to the client's known versions on ACK. */
export interface DeltaPending {
  /** Keys and versions sent. */
  readonly upserts: ReadonlyArray<readonly [key: string, version: string]>;
  /** Keys removed. */
  readonly removed: readonly string[];
}

/** Phases of one type on one stream. */
export type TypePhase =
  | { readonly kind: "idle" }
  | { readonly kind: "inflight"; readonly nonce: string; readonly version: string; readonly sentAt: number; readonly delta: DeltaPending | undefined }
  | { readonly kind: "backoff"; readonly until: number };

/** Events of one type. */
export type TypeEvent =
  | { readonly type: "sent"; readonly nonce: string; readonly version: string; readonly at: number; readonly delta: DeltaPending | undefined }
  | { readonly type: "ack"; readonly nonce: string }
  | { readonly type: "nack"; readonly nonce: string; readonly until: number }
  | { readonly type: "expired"; readonly now: number }
  | { readonly type: "timeout" };

/**
 * The one transition function. An ACK or NACK whose nonce is not the one in
 * flight is stale and changes nothing.
 */
export function nextPhase(phase: TypePhase, event: TypeEvent): TypePhase {
  switch (event.type) {
    case "sent":
      return phase.kind === "idle" ? { kind: "inflight", nonce: event.nonce, version: event.version, sentAt: event.at, delta: event.delta } : phase;
    case "ack":
      return phase.kind === "inflight" && phase.nonce === event.nonce ? { kind: "idle" } : phase;
    case "nack":
      return phase.kind === "inflight" && phase.nonce === event.nonce ? { kind: "backoff", until: event.until } : phase;
    case "expired":
      return phase.kind === "backoff" && event.now >= phase.until ? { kind: "idle" } : phase;
    case "timeout":
      return phase.kind === "inflight" ? { kind: "idle" } : phase;
  }
}
