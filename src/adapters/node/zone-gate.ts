/**
 * The gate of the listener zones dial (`serveGlobal`): every zone call's
 * credentials are proven on its headers, before its body is read, so a
 * caller without valid zone credentials never gets a body read nor an
 * authenticated connection.
 *
 * @module
 */
import { KdsError } from "../../errors.ts";
import { HalfDuplexService } from "../../gen/kds/mux/v1/half_duplex_pb.ts";
import type { GlobalServer } from "../../global/global-server.ts";
import { CLIENT_ID_HEADER } from "../../names.ts";
import type { HalfDuplexHub } from "../../transport/half-duplex/server.ts";
import { MUX_PATH } from "./mux-stream.ts";
import type { RequestGate } from "./request-gate.ts";

const PULL_PATH = `/${HalfDuplexService.typeName}/${HalfDuplexService.method.pull.name}`;
const PUSH_PATH = `/${HalfDuplexService.typeName}/${HalfDuplexService.method.push.name}`;

/**
 * The zone listener's gate:
 * - the mux stream: its credentials are proven here so its connection
 *   counts as authenticated; a failure lets it through, because the
 *   global's admission proves them again before reading any frame and
 *   refuses it there (logged and counted as an admission);
 * - a half-duplex Pull or Push: let through when a live link was opened
 *   with the same zone and `authorization` (a map lookup), else proven with
 *   the global's authenticator (a client certificate, or a Pull opening a
 *   link); the call must still name a link opened with them;
 * - anything else (a route the application added): let through without
 *   authenticating the connection.
 */
export function zoneGate(global: GlobalServer, hub: HalfDuplexHub): RequestGate {
  return async (request, signal) => {
    const { headers, peer } = request;
    const zone = headers.get(CLIENT_ID_HEADER)?.trim() ?? "";
    const authorization = headers.get("authorization") ?? "";
    switch (request.path) {
      case MUX_PATH:
        try {
          return {
            authenticated: true,
            identity: (await global.authenticate(headers, signal, peer)).zone,
          };
        } catch (error) {
          // Nothing is lost: admission proves the same credentials before reading a frame, and refuses, logs and counts the failure.
          if (KdsError.is(error)) return { authenticated: false };
          throw error;
        }
      case PULL_PATH:
      case PUSH_PATH:
        // The usual case costs a lookup; other credentials (a client certificate, a new token, a new link) are proven in full.
        if (hub.admits(zone, authorization)) return { authenticated: true, identity: zone };
        return {
          authenticated: true,
          identity: (await global.authenticate(headers, signal, peer)).zone,
        };
      default:
        return { authenticated: false };
    }
  };
}
