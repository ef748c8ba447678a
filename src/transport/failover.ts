/**
 * A zone that knows several global instances: each dial uses one of them,
 * and a dial that fails before the global answered, or a session the global
 * ended asking the zone to reconnect (goaway RECONNECT: it drains or evens
 * out its instances), moves the next dial on to the next instance.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import { GoAwayReason, type Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import type { MuxDialRequest, MuxTransport } from "./transport.ts";

/** Errors that mean "no instance will take the zone" (they share one store), not "this instance is unreachable". */
const REFUSALS: ReadonlySet<string> = new Set([
  "zone_not_registered",
  "zone_disabled",
  "missing_client_id",
  "invalid_argument",
]);

/** Options of {@link failoverMuxTransport}. */
export interface FailoverOptions {
  /**
   * The URL each transport dials, in the same order: a goaway RECONNECT
   * naming one of them (`reconnect_to`) moves the next dial there rather than
   * to the next transport.
   */
  readonly targets?: readonly string[];
}

/** A URL in one spelling (no trailing slash), for comparing addresses; the text itself when it is no URL. */
function normalUrl(url: string): string {
  try {
    return new URL(url).href.replace(/\/+$/, "");
  } catch {
    return url; // not a URL: compared as written, which is what the caller asked for
  }
}

/**
 * Dials `transports` one at a time: the current one until a dial fails
 * before the global sent its first frame, or the global sends goaway
 * RECONNECT, then the next one, round robin (or, after a RECONNECT naming
 * one of `options.targets`, that one).
 * The zone's reconnect backoff applies between dials as usual. A refusal
 * (unregistered or disabled zone) does not move on: every instance shares
 * the same registry.
 */
export function failoverMuxTransport(
  transports: readonly MuxTransport[],
  options: FailoverOptions = {},
): MuxTransport {
  if (transports.length === 0)
    throw new KdsError("invalid_argument", "failoverMuxTransport needs at least one transport");
  const targets = options.targets?.map(normalUrl);
  if (targets !== undefined && targets.length !== transports.length)
    throw new KdsError(
      "invalid_argument",
      "failoverMuxTransport: targets must name one URL per transport",
    );
  let current = 0;
  const moveOn = (index: number): void => {
    if (current === index) current = (index + 1) % transports.length;
  };
  const failed = (index: number, error: unknown): void => {
    if (KdsError.is(error) && REFUSALS.has(error.code)) return;
    moveOn(index);
  };
  return {
    name: transports.map((t) => t.name).join(","),
    async open(request: MuxDialRequest): Promise<AsyncIterable<Frame>> {
      const index = current;
      const transport = transports[index] as MuxTransport;
      let inbound: AsyncIterable<Frame>;
      try {
        inbound = await transport.open(request);
      } catch (error) {
        if (!request.signal.aborted) failed(index, error);
        throw error;
      }
      return (async function* () {
        let answered = false;
        try {
          for await (const frame of inbound) {
            answered = true;
            // Asked to reconnect: this instance drains or sheds zones, so the next dial goes to the next one.
            if (
              frame.value.case === "goaway" &&
              frame.value.value.reason === GoAwayReason.RECONNECT
            ) {
              // The global named the instance to dial (one with room): go there when it is one of ours.
              const hinted =
                frame.value.value.reconnectTo === ""
                  ? -1
                  : (targets?.indexOf(normalUrl(frame.value.value.reconnectTo)) ?? -1);
              if (hinted >= 0 && current === index) current = hinted;
              else moveOn(index);
            }
            yield frame;
          }
        } catch (error) {
          if (!answered && !request.signal.aborted) failed(index, error);
          throw error;
        }
      })();
    },
  };
}
