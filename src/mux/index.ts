/**
 * `kds-mux/mux`: the mux layer on its own. A {@link MuxSession} multiplexes
 * discovery in both directions, with per-lane windows, heartbeats and a
 * graceful goaway, over the frames of any `MuxTransport`
 * (`kds-mux/transport`); the mux wire schema comes with it as `Frame`,
 * `HelloSchema` and so on. Web standards only: no `node:` import.
 *
 * @module
 */
export type { MuxRequest, MuxResponse, Lane } from "./frames.ts";
export {
  DEFAULT_MEMORY_BUDGET_BYTES,
  MemoryBudget,
  type BudgetHolder,
  type MemoryBudgetStats,
} from "./budget.ts";
export { creditSize } from "./frame-size.ts";
export {
  defaultSessionOptions,
  resolveSessionOptions,
  type SessionOptions,
  type ResolvedSessionOptions,
} from "./options.ts";
export { MuxSession, type SessionInit } from "./session.ts";
export {
  FEATURES,
  MIN_PROTOCOL_VERSION,
  PROTOCOL_VERSION,
  SOFTWARE_VERSION,
  negotiate,
  type Agreement,
  type Feature,
  type HelloNegotiationFields,
  type HelloOffer,
  type VersionRange,
} from "./negotiation.ts";
export type { SessionEnd, SessionEndCode, PeerSettings, SessionState } from "./state.ts";
export type {
  CallPort,
  ClientStreamView,
  CloseOptions,
  ServerStreamView,
  Session,
  SessionStats,
  ViewReceiver,
} from "./views.ts";
export * from "./schema.ts";
