/**
 * The per-type state of a discovery server, as a tagged union with one
 * transition function. A bounded number of responses per type is in flight
 * (one for SotW, the server's `maxDeltaInFlight` for delta): beyond it, the
 * next leaves only after the client ACKed or NACKed an earlier one.
 *
 *     idle --sent--> inflight --ack--> idle
 *                       |  \--nack--> backoff --expired--> idle
 *                       \--timeout--> idle (a type fetched once: given up on; the old nonce is stale)
 *
 * @module
 */

/** What a delta response in flight carried: its keys are in doubt if it is NACKed or times out. */
export interface DeltaPending {
  /** Keys and versions sent. */
  readonly upserts: ReadonlyArray<{ readonly key: string; readonly version: string }>;
  /** Keys removed. */
  readonly removed: readonly string[];
}

/** A response waiting for its ACK or NACK. */
export interface InFlight {
  /** Its nonce. */
  readonly nonce: string;
  /** The set version it carried. */
  readonly version: string;
  /** When it left. */
  readonly sentAt: number;
  /** Delta: what it carried. */
  readonly delta: DeltaPending | undefined;
}

/** Phases of one type on one stream. */
export type TypePhase =
  | { readonly kind: "idle" }
  | { readonly kind: "inflight"; readonly sent: readonly InFlight[] }
  | { readonly kind: "backoff"; readonly until: number };

/** Events of one type. */
export type TypeEvent =
  | { readonly type: "sent"; readonly response: InFlight; readonly maxInFlight: number }
  | { readonly type: "ack"; readonly nonce: string }
  | { readonly type: "nack"; readonly nonce: string; readonly until: number }
  | { readonly type: "expired"; readonly now: number }
  | { readonly type: "timeout" };

/** The idle phase: one object shared by every type of every stream (a phase is never changed, only replaced). */
export const IDLE: TypePhase = Object.freeze({ kind: "idle" });

/** True when `phase` has room for one more response (at most `maxInFlight` unanswered). */
export function canSend(phase: TypePhase, maxInFlight: number): boolean {
  return phase.kind === "idle" || (phase.kind === "inflight" && phase.sent.length < maxInFlight);
}

/** The response in flight with `nonce`, if any (an ACK or NACK of any other nonce is stale). */
export function inFlightWith(phase: TypePhase, nonce: string): InFlight | undefined {
  if (phase.kind !== "inflight") return undefined;
  // A loop, not find(): every zone's ACK of every change comes here, and a closure per call is garbage.
  for (const response of phase.sent) if (response.nonce === nonce) return response;
  return undefined;
}

/**
 * The one transition function. An ACK or NACK whose nonce is not one in
 * flight is stale and changes nothing. A NACK drops every response in
 * flight: the client kept what it had, and the server starts over after the
 * backoff.
 */
export function nextPhase(phase: TypePhase, event: TypeEvent): TypePhase {
  switch (event.type) {
    case "sent":
      if (!canSend(phase, event.maxInFlight)) return phase;
      return {
        kind: "inflight",
        sent: phase.kind === "inflight" ? [...phase.sent, event.response] : [event.response],
      };
    case "ack": {
      if (phase.kind !== "inflight") return phase;
      const answered = inFlightWith(phase, event.nonce);
      if (answered === undefined) return phase;
      if (phase.sent.length === 1) return IDLE;
      const rest: InFlight[] = [];
      for (const response of phase.sent) if (response !== answered) rest.push(response);
      return { kind: "inflight", sent: rest };
    }
    case "nack":
      return inFlightWith(phase, event.nonce) === undefined
        ? phase
        : { kind: "backoff", until: event.until };
    case "expired":
      return phase.kind === "backoff" && event.now >= phase.until ? IDLE : phase;
    case "timeout":
      return phase.kind === "inflight" ? IDLE : phase;
  }
}
