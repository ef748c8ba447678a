// A global written for the conformance tests: just enough of the protocol
// to pass every global-mode check the kit can run against a global without
// zone tokens, and faults that each break one rule. It serves the zones that
// dial the listener, one call at a time.
import { create } from "@bufbuild/protobuf";
import {
  listenForZone,
  type ConformanceListener,
} from "../../src/adapters/node/conformance-link.ts";
import { Conversation, encodedLength, laneOf } from "../../src/conformance/conversation.ts";
import { deltaRequest, goaway, hello, pong, windowUpdate } from "../../src/conformance/frames.ts";
import { GoAwayReason, FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { DiscoveryResponseSchema } from "../../src/gen/kds/v1/discovery_pb.ts";
import { KindCatalogSchema, KindDirection } from "../../src/gen/kds/v1/kinds_pb.ts";
import { KIND_CATALOG_TYPE_URL, catalogResource } from "../../src/sync/kind-catalog.ts";

/** Each fault breaks the rule named in its comment. */
export interface GlobalFaults {
  dataBeforeHello?: boolean; // hello.no-data-before-peer-hello
  noPong?: boolean; // ping.pong
  noCredit?: boolean; // flow.returns-credit
  acceptOverrun?: boolean; // overrun.frame, overrun.byte
  reuseNonce?: boolean; // nonce.unique
  noByteWindows?: boolean; // hello.byte-windows
  acceptOldVersion?: boolean; // refuse.version
  unknownTypeWithoutTrailer?: boolean; // goaway.protocol-error-status
  ignoreFirstNonce?: boolean; // nonce.first-request
  answerStale?: boolean; // nonce.stale
  acceptWindowCap?: boolean; // refuse.window-cap
  dependsOnUnlisted?: boolean; // catalog.response
}

const ZONE_KIND = "type.googleapis.com/kds.conformance.v1.ProbeSpec";
const catalogOf = (dependsOn: string[]) =>
  catalogResource(
    create(KindCatalogSchema, {
      kinds: [
        {
          kind: "Probe",
          message: "kds.conformance.v1.ProbeSpec",
          direction: KindDirection.ZONE_TO_GLOBAL,
          scope: 1,
          dependsOn,
        },
      ],
    }),
  );
const GOOD_CATALOG = catalogOf([]);
/** A catalog whose kind depends on a kind it does not list. */
const UNLISTED_CATALOG = catalogOf(["Missing"]);
const WINDOW = 64;
const WINDOW_BYTES = 8 << 20;
const MAX_MESSAGE_BYTES = 4 << 20;

/** Serves zones on 127.0.0.1 until `signal` aborts; `zone` is the one registered zone. */
export async function scriptedGlobal(
  zone: string,
  faults: GlobalFaults,
  signal: AbortSignal,
): Promise<ConformanceListener> {
  const listener = await listenForZone("127.0.0.1", 0, signal);
  void (async () => {
    for (let i = 0; i < 1000 && !signal.aborted; i++) {
      const link = await listener.accept(signal).catch(() => undefined); // aborted: the test is over
      if (link === undefined) return;
      await serve(new Conversation(link, signal), zone, faults).catch(() => link.cancel()); // a session's failure ends only that call
    }
  })();
  return listener;
}

async function serve(c: Conversation, zone: string, f: GlobalFaults): Promise<void> {
  const CATALOG = f.dependsOnUnlisted ? UNLISTED_CATALOG : GOOD_CATALOG;
  const id = c.link.headers.get("client-id");
  const refuse = (grpcStatus: number, kdsErrorCode: string, message: string): void =>
    c.link.close({ grpcStatus, kdsErrorCode, message });
  if (id === undefined) return refuse(3, "missing_client_id", "no client-id");
  if (!/^[a-z0-9-]{1,63}$/.test(id)) return refuse(3, "invalid_argument", "bad client-id");
  if (id !== zone) return refuse(9, "zone_not_registered", `zone ${id} is not registered`);
  const fail = (message: string, code = "protocol_error"): void => {
    c.write(goaway(GoAwayReason.PROTOCOL_ERROR, message));
    if (f.unknownTypeWithoutTrailer && code === "unknown_type") c.link.close({ grpcStatus: 3 });
    else c.link.close({ grpcStatus: 3, kdsErrorCode: code, message });
  };
  if (f.dataBeforeHello)
    c.write(deltaRequest({ typeUrl: ZONE_KIND, resourceNamesSubscribe: ["*"] }));
  c.write(
    hello(
      "scripted-global",
      f.noByteWindows
        ? { requestWindowBytes: 0, responseWindowBytes: 0 }
        : {
            requestWindow: WINDOW,
            responseWindow: WINDOW,
            requestWindowBytes: WINDOW_BYTES,
            responseWindowBytes: WINDOW_BYTES,
            maxMessageBytes: MAX_MESSAGE_BYTES,
          },
    ),
  );
  c.sentHello = true;
  const granted = {
    requests: { frames: WINDOW, bytes: WINDOW_BYTES },
    responses: { frames: WINDOW, bytes: WINDOW_BYTES },
  };
  const received = { requests: { frames: 0, bytes: 0 }, responses: { frames: 0, bytes: 0 } };
  let nonce = 0;
  let requestCredit = 0;
  /** Response frames the zone granted and this side has not used (it sends responses only for the catalog). */
  let responseCredit = 0;
  let catalogRequested = false;
  const unacked: Frame[] = [];
  let consumedRequests = 0;
  for (let i = 0; i < 10_000; i++) {
    const frame = await c.next(30_000);
    // A frame the listener's reader refused (too large, too many elements) ends the reading: answer it as a protocol error.
    const unreadable = (c.link as { readError?: string }).readError;
    if (frame === undefined)
      return unreadable === undefined || unreadable === "" ? undefined : fail(unreadable);
    const v = frame.value;
    if (i === 0) {
      if (v.case !== "hello") return fail(`the first frame must be a hello, got ${v.case}`);
      if (v.value.protocolVersion !== 2 && !f.acceptOldVersion)
        return fail(`the peer speaks version ${v.value.protocolVersion}, this side speaks 2`);
      if (v.value.requestWindowBytes < 1024 || v.value.responseWindowBytes < 1024)
        return fail("the hello grants no byte windows");
      if (v.value.peerId !== zone) return fail(`the peer named itself ${v.value.peerId}`);
      requestCredit = v.value.requestWindow;
      responseCredit = v.value.responseWindow;
      continue;
    }
    if (v.case === "hello") return fail("a second hello");
    if (v.case === "ping" && !f.noPong) c.write(pong(v.value.id));
    if (v.case === "goaway") return c.link.close({ grpcStatus: 0 });
    if (v.case === "windowUpdate") {
      requestCredit += v.value.requests;
      responseCredit += v.value.responses;
      if (!f.acceptWindowCap && (requestCredit > 2 ** 31 || responseCredit > 2 ** 31))
        return fail("peer granted more than 2^31 frames of window");
    }
    const lane = laneOf(frame);
    if (lane === undefined) continue;
    const bytes = encodedLength(frame);
    if (bytes > MAX_MESSAGE_BYTES) return fail(`a frame of ${bytes} bytes`);
    if (v.case === "request" && v.value.resourceNames.length > 2 ** 19)
      return fail("a frame of too many elements");
    received[lane].frames++;
    received[lane].bytes += bytes;
    if (
      !f.acceptOverrun &&
      (received[lane].frames > granted[lane].frames || received[lane].bytes > granted[lane].bytes)
    )
      return fail(`the peer overran the ${lane} window`);
    if (v.case === "request") {
      consumedRequests++;
      if (consumedRequests % 16 === 0 && !f.noCredit) {
        granted.requests.frames += 16;
        c.write(windowUpdate(16, 0, 0, 0));
      }
      if (v.value.typeUrl !== KIND_CATALOG_TYPE_URL)
        return fail(`zone requested ${v.value.typeUrl}, which is not served`, "unknown_type");
      if (v.value.errorDetail !== undefined) {
        c.write(goaway(GoAwayReason.SHUTDOWN, v.value.errorDetail.message));
        return c.link.close({ grpcStatus: 0 });
      }
      // The type's first request subscribes whatever its nonce; later, a nonce not in flight is stale.
      const first = !catalogRequested && !f.ignoreFirstNonce;
      catalogRequested = true;
      const stale =
        v.value.responseNonce !== "" && v.value.responseNonce !== String(nonce) && !f.reuseNonce;
      if (v.value.responseNonce === "" || first || (stale && f.answerStale)) {
        nonce++;
        const n = f.reuseNonce ? "1" : String(nonce);
        c.write(
          create(FrameSchema, {
            value: {
              case: "response",
              value: create(DiscoveryResponseSchema, {
                typeUrl: KIND_CATALOG_TYPE_URL,
                versionInfo: CATALOG.version,
                nonce: n,
                resources: [CATALOG.any],
              }),
            },
          }),
        );
      } else if (v.value.responseNonce === String(nonce) || f.reuseNonce) {
        // The catalog ACK: subscribe to the zone's kind.
        if (requestCredit > 0) {
          requestCredit--;
          c.write(deltaRequest({ typeUrl: ZONE_KIND, resourceNamesSubscribe: ["*"] }));
        }
      }
    }
    if (v.case === "deltaRequest")
      return fail(`zone requested ${v.value.typeUrl}, which is not served`, "unknown_type");
    if (v.case === "deltaResponse") {
      // ACK it (within the zone's request credit); its credit goes back with the ACK, so a response waits while an ACK cannot leave.
      unacked.push(frame);
      while (unacked.length > 0 && requestCredit > 0) {
        const r = unacked.shift() as Frame;
        requestCredit--;
        if (r.value.case === "deltaResponse")
          c.write(
            deltaRequest({ typeUrl: r.value.value.typeUrl, responseNonce: r.value.value.nonce }),
          );
        if (!f.noCredit) {
          const b = encodedLength(r);
          granted.responses.frames++;
          granted.responses.bytes += b;
          c.write(windowUpdate(0, 1, 0, b));
        }
      }
    }
  }
}
