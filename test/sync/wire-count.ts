// Counts the resources (and removals) crossing a transport in each direction,
// as they are on the wire (the resume and churn tests).
import type { Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { resourcesIn } from "../../src/mux/frames.ts";
import { KIND_CATALOG_TYPE_URL } from "../../src/sync/kind-catalog.ts";
import type { MuxTransport } from "../../src/transport/transport.ts";

/** Resources counted so far, per direction. */
export interface WireCount {
  toZone: number;
  toGlobal: number;
}

/** `inner`, counting the resources (and removals) in every response frame, both ways, into `count`. */
export function counting(inner: MuxTransport, count: WireCount): MuxTransport {
  const tally = (frame: Frame, to: keyof WireCount): void => {
    count[to] += resourcesIn(frame, KIND_CATALOG_TYPE_URL); // the catalog opens every session; resources are what is counted
  };
  return {
    name: `counting ${inner.name}`,
    async open(request) {
      const outbound = (async function* () {
        for await (const frame of request.outbound) {
          tally(frame, "toGlobal");
          yield frame;
        }
      })();
      const inbound = await inner.open({ ...request, outbound });
      return (async function* () {
        for await (const frame of inbound) {
          tally(frame, "toZone");
          yield frame;
        }
      })();
    },
  };
}
