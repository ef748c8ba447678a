// A hostile peer on raw HTTP/2: it writes whatever bytes it is given as the
// body of a MultiplexService.StreamMessage call (gRPC, gRPC-web or Connect
// framing), half-closes, and reads how the global ends the call: the mux
// frames it answered (a goaway, with its reason) and the final status.
import { fromBinary } from "@bufbuild/protobuf";
import * as http2 from "node:http2";
import { GoAwayReason, FrameSchema } from "../../src/gen/kds/mux/v1/mux_pb.ts";

/** The wire protocols a hostile session may speak. */
export type Protocol = "grpc" | "grpc-web" | "connect";

const contentTypes: Record<Protocol, string> = {
  grpc: "application/grpc+proto",
  "grpc-web": "application/grpc-web+proto",
  connect: "application/connect+proto",
};

/** The path of the mux call. */
export const STREAM_PATH = "/kds.mux.v1.MultiplexService/StreamMessage";

/** One hostile session: headers and the body chunks written in order. */
export interface HostileCall {
  readonly protocol: Protocol;
  /** Extra request headers (client-id, authorization). */
  readonly headers: Record<string, string>;
  /** Body chunks (envelopes, possibly broken), each written separately. */
  readonly chunks: readonly Uint8Array[];
  /** How long to wait for the global to end the call after the body was written. */
  readonly timeoutMs: number;
}

/** How the global ended one hostile session. */
export interface CallEnd {
  /** "ok", a gRPC/Connect code name, "http-NNN", "reset" (stream reset or connection lost) or "hang" (nothing within the timeout). */
  readonly status: string;
  /** The reason of the goaway the global sent, if it sent one. */
  readonly goaway: string | undefined;
  /** The goaway's or the status's message (first line), for the report. */
  readonly message: string;
  /** Mux frames the global sent (hello, ping, goaway, ...), by kind. */
  readonly framesReceived: number;
  /** Response bytes that did not parse as envelopes or mux frames (a finding when non-zero). */
  readonly garbled: number;
}

const grpcCodes = [
  "ok",
  "canceled",
  "unknown",
  "invalid_argument",
  "deadline_exceeded",
  "not_found",
  "already_exists",
  "permission_denied",
  "resource_exhausted",
  "failed_precondition",
  "aborted",
  "out_of_range",
  "unimplemented",
  "internal",
  "unavailable",
  "data_loss",
  "unauthenticated",
];

/** Name of a gRPC status number as Connect spells it. */
function grpcCodeName(value: string | undefined): string {
  const n = Number(value);
  return Number.isInteger(n) && grpcCodes[n] !== undefined
    ? (grpcCodes[n] as string)
    : `grpc-status ${String(value)}`;
}

/** Runs one hostile session on `client` (an open HTTP/2 session to the global). */
export function hostileCall(client: http2.ClientHttp2Session, call: HostileCall): Promise<CallEnd> {
  return new Promise((resolve) => {
    const headers: http2.OutgoingHttpHeaders = {
      ":method": "POST",
      ":path": STREAM_PATH,
      "content-type": contentTypes[call.protocol],
      ...call.headers,
    };
    if (call.protocol === "grpc") headers.te = "trailers";
    if (call.protocol === "connect") headers["connect-protocol-version"] = "1";
    let stream: http2.ClientHttp2Stream;
    let responseHeaders: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    let body: Buffer = Buffer.alloc(0);
    let done = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let resetWhy = "";
    const finish = (override?: string): void => {
      if (done) return;
      done = true;
      if (timer !== undefined) clearTimeout(timer);
      if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
      const end = interpret(call.protocol, responseHeaders, trailers, body, override);
      resolve(
        end.status === "reset"
          ? {
              ...end,
              message:
                resetWhy !== ""
                  ? resetWhy
                  : `stream closed with RST_STREAM code ${stream.rstCode ?? "none"}`,
            }
          : end,
      );
    };
    try {
      stream = client.request(headers);
    } catch (error) {
      resolve({
        status: "reset",
        goaway: undefined,
        message: (error as { code?: string }).code ?? String(error),
        framesReceived: 0,
        garbled: 0,
      });
      return;
    }
    stream.on("response", (h) => (responseHeaders = h));
    stream.on("trailers", (t) => (trailers = t));
    stream.on(
      "data",
      (chunk: Buffer) => (body = body.length === 0 ? chunk : Buffer.concat([body, chunk])),
    );
    stream.on("end", () => finish());
    stream.on("error", (error: Error & { code?: string }) => {
      resetWhy = error.message;
      finish("reset");
    });
    stream.on("close", () =>
      finish(
        stream.rstCode !== undefined &&
          stream.rstCode !== 0 &&
          Object.keys(responseHeaders).length === 0
          ? "reset"
          : undefined,
      ),
    );
    for (const chunk of call.chunks) stream.write(chunk);
    stream.end();
    timer = setTimeout(() => finish("hang"), call.timeoutMs);
  });
}

/** Splits `body` into envelopes; what is left over (a cut envelope) counts as garbled. */
function envelopes(body: Buffer): { flags: number; data: Buffer }[] & { rest?: number } {
  const out: { flags: number; data: Buffer }[] & { rest?: number } = [];
  let at = 0;
  while (at + 5 <= body.length) {
    const flags = body[at] as number;
    const length = body.readUInt32BE(at + 1);
    if (at + 5 + length > body.length) break;
    out.push({ flags, data: body.subarray(at + 5, at + 5 + length) });
    at += 5 + length;
  }
  out.rest = body.length - at;
  return out;
}

function interpret(
  protocol: Protocol,
  headers: http2.IncomingHttpHeaders,
  trailers: http2.IncomingHttpHeaders,
  body: Buffer,
  override: string | undefined,
): CallEnd {
  let goaway: string | undefined;
  let goawayMessage = "";
  let framesReceived = 0;
  let garbled = 0;
  let status: string | undefined;
  let message = "";
  const parts = envelopes(body);
  garbled += parts.rest ?? 0;
  for (const { flags, data } of parts) {
    if (protocol === "connect" && (flags & 0x02) !== 0) {
      // Connect end-of-stream: JSON with an optional error.
      try {
        const end = JSON.parse(data.toString("utf8")) as {
          error?: { code?: string; message?: string };
        };
        status = end.error === undefined ? "ok" : (end.error.code ?? "unknown");
        message = end.error?.message ?? "";
      } catch {
        garbled += data.length; // counted: an end-of-stream message that is not JSON is reported
      }
      continue;
    }
    if (protocol === "grpc-web" && (flags & 0x80) !== 0) {
      const fields = new Map(
        data
          .toString("latin1")
          .split("\r\n")
          .filter((l) => l.includes(":"))
          .map(
            (l) =>
              [
                l.slice(0, l.indexOf(":")).trim().toLowerCase(),
                l.slice(l.indexOf(":") + 1).trim(),
              ] as const,
          ),
      );
      status = grpcCodeName(fields.get("grpc-status"));
      message = decodeURIComponent(fields.get("grpc-message") ?? "");
      continue;
    }
    try {
      const frame = fromBinary(FrameSchema, data);
      framesReceived++;
      if (frame.value.case === "goaway") {
        goaway = GoAwayReason[frame.value.value.reason] ?? String(frame.value.value.reason);
        goawayMessage = frame.value.value.message;
      }
    } catch {
      garbled += data.length; // counted: the global sent a frame that does not decode
    }
  }
  if (status === undefined && protocol !== "connect") {
    const s = trailers["grpc-status"] ?? headers["grpc-status"];
    if (s !== undefined) {
      status = grpcCodeName(String(s));
      message = decodeURIComponent(
        String(trailers["grpc-message"] ?? headers["grpc-message"] ?? ""),
      );
    }
  }
  const httpStatus = Number(headers[":status"] ?? 0);
  if (status === undefined && httpStatus !== 0 && httpStatus !== 200) status = `http-${httpStatus}`;
  if (override === "hang") status = status ?? "hang";
  status ??= override ?? "reset";
  return {
    status,
    goaway,
    message: (goawayMessage !== "" ? goawayMessage : message).split("\n")[0] ?? "",
    framesReceived,
    garbled,
  };
}
