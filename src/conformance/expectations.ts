/**
 * Checks both modes share: the fields of a hello, and how a side reacts to
 * a protocol violation (goaway PROTOCOL_ERROR, then the status).
 *
 * @module
 */
import type { Conversation } from "./conversation.ts";
import { ANSWER_MS } from "./conversation.ts";
import { KIT_PROTOCOL_VERSION } from "./frames.ts";
import type { LinkEnd } from "./link.ts";
import type { Report } from "./report.ts";
import type { RuleName } from "./rules.ts";

/** A call's end in words. */
export function describeEnd(end: LinkEnd): string {
  return `status ${end.grpcStatus ?? "none"}, kds-error-code ${end.kdsErrorCode ?? "none"}${end.message === "" ? "" : `: ${end.message.split("\n")[0]}`}`;
}

const MAX_WINDOW = 65_536;
const MIN_WINDOW_BYTES = 1024;
const MAX_WINDOW_BYTES = 2 ** 30;

/**
 * Checks the peer's first frame and hello. `expectedPeerId`: the zone's
 * client-id in zone mode; in global mode any non-empty name. `end`: how the
 * call ended, for the detail when no hello came.
 */
export function checkHello(
  report: Report,
  c: Conversation,
  o: { role: "zone" | "global"; expectedPeerId: string | undefined; end: LinkEnd | undefined },
): void {
  const first = c.received[0];
  const h = c.peerHello;
  if (h === undefined) {
    const why = `no hello from the ${o.role}${first === undefined ? "" : ` (its first frame: ${first.value.case})`}${o.end === undefined ? "" : `; the call ended: ${describeEnd(o.end)}`}`;
    for (const rule of [
      "hello.first-frame",
      "hello.version",
      "hello.windows",
      "hello.byte-windows",
      "hello.max-message-bytes",
      "hello.peer-id",
    ] as const)
      report.add(rule, "fail", why);
    return;
  }
  report.expect(
    "hello.first-frame",
    first?.value.case === "hello",
    `first frame: ${first?.value.case ?? "none"}`,
  );
  // A range (version 3's max_protocol_version) that holds the kit's version 2 is as good as version 2 exactly.
  const max = Math.max(h.protocolVersion, h.maxProtocolVersion);
  report.expect(
    "hello.version",
    h.protocolVersion <= KIT_PROTOCOL_VERSION && max >= KIT_PROTOCOL_VERSION,
    `protocol_version ${h.protocolVersion}${h.maxProtocolVersion === 0 ? "" : `, max_protocol_version ${h.maxProtocolVersion}`} (the kit speaks ${KIT_PROTOCOL_VERSION})`,
  );
  const framesOk = [h.requestWindow, h.responseWindow].every((w) => w >= 1 && w <= MAX_WINDOW);
  report.expect(
    "hello.windows",
    framesOk,
    `request_window ${h.requestWindow}, response_window ${h.responseWindow}`,
  );
  const bytesOk = [h.requestWindowBytes, h.responseWindowBytes].every(
    (w) => w >= MIN_WINDOW_BYTES && w <= MAX_WINDOW_BYTES,
  );
  report.expect(
    "hello.byte-windows",
    bytesOk,
    `request_window_bytes ${h.requestWindowBytes}, response_window_bytes ${h.responseWindowBytes}`,
  );
  report.expect(
    "hello.max-message-bytes",
    h.maxMessageBytes >= 1024,
    `max_message_bytes ${h.maxMessageBytes}`,
  );
  if (o.expectedPeerId !== undefined) {
    report.expect(
      "hello.peer-id",
      h.peerId === o.expectedPeerId,
      `peer_id "${h.peerId}", client-id "${o.expectedPeerId}"`,
    );
  } else {
    report.expect("hello.peer-id", h.peerId !== "", `peer_id "${h.peerId}"`);
  }
}

/** What a protocol violation should bring. */
export interface Expectation {
  /** The status the call must end with (global mode), with its `kds-error-code`; undefined in zone mode (the kit ends the call). */
  readonly grpcStatus?: number;
  readonly kdsErrorCode?: string;
  /** The violation, for the detail. */
  readonly what: string;
  /** A further test of the goaway's message; returns what is wrong, if anything. */
  readonly extra?: ((message: string) => string | undefined) | undefined;
}

/**
 * Expects the peer to answer a violation with goaway PROTOCOL_ERROR (and,
 * when given, the call's status and trailer); records `rule`, and the
 * status rule for every violation a global answers. Ends the call.
 */
export async function expectProtocolError(
  report: Report,
  rule: RuleName,
  c: Conversation,
  e: Expectation,
): Promise<void> {
  const goaway = await c.awaitGoaway(ANSWER_MS);
  const end = e.grpcStatus === undefined ? undefined : await c.end(ANSWER_MS);
  // Global mode: the global has ended the call (or failed to); zone mode: the kit plays the global and ends it as one would.
  if (e.grpcStatus === undefined)
    c.link.close({
      grpcStatus: 3,
      kdsErrorCode: "protocol_error",
      message: `conformance kit: ${e.what}`,
    });
  else c.link.cancel();
  const problems: string[] = [];
  if (goaway === undefined) problems.push(`no goaway within ${ANSWER_MS} ms`);
  else if (goaway.reason !== "PROTOCOL_ERROR")
    problems.push(`goaway ${goaway.reason}, not PROTOCOL_ERROR`);
  const extra = goaway === undefined ? undefined : e.extra?.(goaway.message);
  if (extra !== undefined) problems.push(extra);
  const seen = `${goaway === undefined ? "no goaway" : `goaway ${goaway.reason} "${goaway.message.split("\n")[0]}"`}${end === undefined ? "" : `; ${describeEnd(end)}`}`;
  report.expect(
    rule,
    problems.length === 0,
    `${e.what}: ${problems.length === 0 ? seen : `${problems.join("; ")} (${seen})`}`,
  );
  if (e.grpcStatus !== undefined && goaway !== undefined) {
    const ok = end?.grpcStatus === e.grpcStatus && end.kdsErrorCode === e.kdsErrorCode;
    report.expect(
      "goaway.protocol-error-status",
      ok,
      `${e.what}: ${end === undefined ? `the call did not end within ${ANSWER_MS} ms` : describeEnd(end)} (expected status ${e.grpcStatus}, kds-error-code ${e.kdsErrorCode})`,
    );
  }
}
