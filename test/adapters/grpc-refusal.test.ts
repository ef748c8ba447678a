// A gRPC call the admin listener refuses on its headers (a zone stream sent to
// the admin port) is answered Trailers-Only: one HEADERS frame with
// END_STREAM holding grpc-status 3, grpc-message and kds-error-code. Checked
// with grpc-js (which reports INTERNAL when the status comes as initial
// metadata followed by a reset) and with a raw node:http2 client that reads
// the frame's flags.
import * as grpc from "@grpc/grpc-js";
import * as http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serveRoutes, type ServedGlobal } from "../../src/adapters/node/serve-global.ts";
import { refuseZoneStreamOnAdmin } from "../../src/cli/zone-stream-paths.ts";

const PATH = "/kds.mux.v1.MultiplexService/StreamMessage";
const HINT = "this address is the global's admin API";

let served: ServedGlobal;
beforeAll(async () => {
  served = await serveRoutes(() => undefined, {
    host: "127.0.0.1",
    port: 0,
    httpVersion: "both", // as the CLI's admin listener
    gate: async (request) => {
      refuseZoneStreamOnAdmin(request.path, "global");
      return { authenticated: true };
    },
  });
});
afterAll(async () => {
  await served?.close();
});

describe("the admin listener's refusal of a gRPC stream", () => {
  it("reaches grpc-js as InvalidArgument (3) with the message, not INTERNAL", async () => {
    const client = new grpc.Client(
      served.url.replace(/^http:\/\//, ""),
      grpc.credentials.createInsecure(),
    );
    try {
      const status = await new Promise<grpc.StatusObject>((resolve, reject) => {
        const call = client.makeBidiStreamRequest(
          PATH,
          (b: Buffer) => b,
          (b: Buffer) => b,
          new grpc.Metadata(),
        );
        const timer = setTimeout(() => reject(new Error("no status within 20 s")), 20_000);
        call.on("status", (s: grpc.StatusObject) => {
          clearTimeout(timer);
          resolve(s);
        });
        call.on("error", () => undefined); // the status event carries the same outcome
        call.on("data", () => undefined);
      });
      expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(status.details).toContain(HINT);
      expect(status.metadata.get("kds-error-code")).toEqual(["invalid_argument"]);
    } finally {
      client.close();
    }
  });

  it("is one HEADERS frame with END_STREAM holding grpc-status, grpc-message and kds-error-code (raw node:http2)", async () => {
    const session = http2.connect(served.url);
    try {
      const seen = await new Promise<{
        headers: http2.IncomingHttpHeaders;
        flags: number;
        rstCode: number;
        trailers: boolean;
      }>((resolve, reject) => {
        const stream = session.request({
          ":method": "POST",
          ":path": PATH,
          "content-type": "application/grpc",
          te: "trailers",
          "client-id": "zone-1",
        }); // the request body stays open, as a bidi stream's does
        let trailers = false;
        let first: { headers: http2.IncomingHttpHeaders; flags: number } | undefined;
        const timer = setTimeout(() => reject(new Error("no answer within 20 s")), 20_000);
        stream.on("response", (headers, flags) => {
          first = { headers, flags };
        });
        stream.on("trailers", () => {
          trailers = true;
        });
        stream.on("error", () => undefined); // a reset after the status is read from rstCode below
        stream.resume();
        stream.on("close", () => {
          clearTimeout(timer);
          if (first === undefined)
            reject(new Error(`closed without headers (rst ${stream.rstCode})`));
          else resolve({ ...first, rstCode: stream.rstCode ?? 0, trailers });
        });
      });
      expect(seen.flags & http2.constants.NGHTTP2_FLAG_END_STREAM).toBe(
        http2.constants.NGHTTP2_FLAG_END_STREAM,
      );
      expect(seen.trailers).toBe(false);
      expect(seen.headers[":status"]).toBe(200);
      expect(seen.headers["grpc-status"]).toBe("3");
      expect(decodeURIComponent(String(seen.headers["grpc-message"]))).toContain(HINT);
      expect(seen.headers["kds-error-code"]).toBe("invalid_argument");
      expect(seen.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
    } finally {
      session.close();
    }
  });
});
