// The documented mapping from how a session ended to the status its stream
// ends with (docs/protocol.md, "How a session ends"): every end code, both
// initiators, through the same toConnectError the Connect service uses.
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { KdsError } from "../../src/errors.ts";
import { sessionEndError } from "../../src/global/global-server.ts";
import type { SessionEnd, SessionEndCode } from "../../src/mux/state.ts";
import { KDS_ERROR_CODE_HEADER, toConnectError } from "../../src/connect-errors.ts";

const end = (code: SessionEndCode, initiator: "local" | "peer", cause?: unknown): SessionEnd => ({
  code,
  initiator,
  graceful: false,
  message: `ended: ${code}`,
  cause,
});

/** The status of a stream whose session ended with `e`: undefined for OK. */
function status(
  e: SessionEnd,
): { code: Code; errorCode: string | null; message: string } | undefined {
  const error = sessionEndError(e);
  if (error === undefined) return undefined;
  const connect = toConnectError(error);
  return {
    code: connect.code,
    errorCode: connect.metadata.get(KDS_ERROR_CODE_HEADER),
    message: connect.rawMessage,
  };
}

describe("session end -> stream status", () => {
  it("maps every end this side decided for a failure or a revocation to its documented code and trailer", () => {
    expect(status(end("protocol_error", "local"))).toEqual({
      code: Code.InvalidArgument,
      errorCode: "protocol_error",
      message: "the global ended the session (protocol_error): ended: protocol_error",
    });
    expect(
      status(end("protocol_error", "local", new KdsError("unknown_type", "no such type"))),
    ).toMatchObject({ code: Code.InvalidArgument, errorCode: "unknown_type" });
    expect(status(end("resource_exhausted", "local"))).toMatchObject({
      code: Code.ResourceExhausted,
      errorCode: "resource_exhausted",
    });
    expect(status(end("heartbeat_timeout", "local"))).toMatchObject({
      code: Code.Unavailable,
      errorCode: "heartbeat_timeout",
    });
    expect(status(end("send_timeout", "local"))).toMatchObject({
      code: Code.Unavailable,
      errorCode: "send_timeout",
    });
    expect(status(end("handshake_timeout", "local"))).toMatchObject({
      code: Code.DeadlineExceeded,
      errorCode: "handshake_timeout",
    });
    expect(status(end("zone_revoked", "local"))).toMatchObject({
      code: Code.FailedPrecondition,
      errorCode: "zone_revoked",
    });
  });

  it("ends with OK after a shutdown, a replacement, and every end the peer decided", () => {
    for (const code of ["shutdown", "replaced", "aborted", "transport", "peer_eof"] as const)
      expect(status(end(code, "local"))).toBeUndefined();
    for (const code of [
      "shutdown",
      "replaced",
      "zone_revoked",
      "protocol_error",
      "heartbeat_timeout",
      "send_timeout",
      "handshake_timeout",
      "peer_eof",
      "transport",
      "aborted",
    ] as const) {
      expect(status(end(code, "peer"))).toBeUndefined();
    }
  });
});
