/**
 * The conformance kit: scripts one side of the kds-mux protocol against an
 * implementation of the other and checks every MUST rule of
 * docs/protocol.md. {@link checkGlobal} plays a zone against a global;
 * {@link checkZone} plays the global for a zone that dials it. Both run
 * over a {@link MuxLink} the caller provides (the node adapter has one over
 * gRPC on HTTP/2) and resolve with one {@link CheckResult} per rule.
 *
 * @module
 */
export { checkGlobal, type GlobalCheckOptions } from "./check-global.ts";
export { checkZone, type ZoneCheckOptions } from "./check-zone.ts";
export type { AcceptLink, DialLink, LinkEnd, MuxLink } from "./link.ts";
export { formatTable, Report, type CheckResult, type Outcome } from "./report.ts";
export { RULES, rule, type Rule, type RuleName, type Section } from "./rules.ts";
