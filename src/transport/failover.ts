/**
 * A zone that knows several global instances: each dial uses one of them,
 * and a dial that fails before the global answered, or a session the global
 * ended asking the zone to reconnect (goaway RECONNECT: it drains or evens
 * out its instances), moves the next dial on to another instance, picked at
 * random so that the zones of a failed instance spread over the others
 * rather than all landing on the one after it in their lists. A
 * RECONNECT naming an instance outside the list is followed once (with
 * `follow`), and a failed dial there falls back to the list.
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
   * to another one at random.
   */
  readonly targets?: readonly string[];
  /**
   * Makes the transport for a URL a goaway RECONNECT names outside
   * `targets` (the instance a rebalancing global moves the zone to, one
   * the zone was not configured with). With it, the next dial goes there,
   * once: only when the URL has the same scheme as the target the zone
   * dialed (https only from https, so a zone never leaves TLS), with the
   * same credentials and TLS settings as the list (the function's job).
   * When that dial fails before the global answers, the dial after it
   * goes back to the list. Without it (or without `targets`), such a
   * RECONNECT moves on to another listed target at random, as a RECONNECT
   * naming no listed target does.
   */
  readonly follow?: (url: string) => MuxTransport;
  /**
   * Where a dial goes after one that failed (or a RECONNECT naming no
   * listed instance): a number in [0, 1) picks one of the other transports
   * (default `Math.random`). Give one for a repeatable order.
   */
  readonly random?: () => number;
}

/** A URL in one spelling (no trailing slash), for comparing addresses; the text itself when it is no URL. */
function normalUrl(url: string): string {
  try {
    return new URL(url).href.replace(/\/+$/, "");
  } catch {
    return url; // not a URL: compared as written, which is what the caller asked for
  }
}

/** The scheme of `url` ("https:", "http:"), or undefined when it is no URL. */
function schemeOf(url: string): string | undefined {
  try {
    return new URL(url).protocol;
  } catch {
    return undefined; // not a URL: never followed
  }
}

/**
 * Dials `transports` one at a time, the first one first: the current one
 * until a dial fails before the global sent its first frame, or the global
 * sends goaway RECONNECT, then another one at random (`options.random`), so
 * that when an instance fails its zones spread over the rest (or, after a
 * RECONNECT naming one of `options.targets`, that one; or, naming another
 * URL of the same scheme and with `options.follow`, that URL once, then the
 * list again).
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
  /** A URL outside the list the next dial goes to, once (a RECONNECT named it). */
  let detour: string | undefined;
  /** The last transport made for a detour, reused while the detours name the same URL. */
  let followed: { readonly url: string; readonly transport: MuxTransport } | undefined;
  const detourTransport = (url: string, follow: (url: string) => MuxTransport): MuxTransport => {
    if (followed?.url !== url) followed = { url, transport: follow(url) };
    return followed.transport;
  };
  /** Where a RECONNECT from a session on `dialed` (a URL) tells the next dial to go. */
  const reconnect = (index: number, dialed: string | undefined, hint: string): void => {
    const hinted = hint === "" ? -1 : (targets?.indexOf(normalUrl(hint)) ?? -1);
    if (hinted >= 0) {
      if (current === index) current = hinted;
      return;
    }
    moveOn(index); // another listed target: where a failed detour falls back to
    if (
      hint !== "" &&
      options.follow !== undefined &&
      dialed !== undefined &&
      schemeOf(hint) !== undefined &&
      schemeOf(hint) === schemeOf(dialed)
    )
      detour = normalUrl(hint);
  };
  const random = options.random ?? Math.random;
  /** Another transport than `index`, each of the others equally likely. */
  const moveOn = (index: number): void => {
    if (current !== index || transports.length === 1) return;
    const others = transports.length - 1;
    const draw = random();
    // A draw outside [0, 1) (or NaN) still picks one of the others: never the same index, never none.
    const k = Number.isFinite(draw) ? Math.floor(draw * others) : 0;
    const step = 1 + Math.max(0, Math.min(others - 1, k));
    current = (index + step) % transports.length;
  };
  const failed = (index: number, error: unknown): void => {
    if (KdsError.is(error) && REFUSALS.has(error.code)) return;
    moveOn(index);
  };
  return {
    name: transports.map((t) => t.name).join(","),
    async open(request: MuxDialRequest): Promise<AsyncIterable<Frame>> {
      const index = current;
      // A detour is dialed once: whatever happens, the dial after it goes back to the list (unless a RECONNECT names another).
      const away = detour;
      detour = undefined;
      const transport =
        away !== undefined && options.follow !== undefined
          ? detourTransport(away, options.follow)
          : (transports[index] as MuxTransport);
      const dialed = away ?? targets?.[index];
      let inbound: AsyncIterable<Frame>;
      try {
        inbound = await transport.open(request);
      } catch (error) {
        if (away === undefined && !request.signal.aborted) failed(index, error);
        throw error;
      }
      return (async function* () {
        let answered = false;
        try {
          for await (const frame of inbound) {
            answered = true;
            // Asked to reconnect: this instance drains or sheds zones, so the next dial goes to the one it names, or another at random.
            if (
              frame.value.case === "goaway" &&
              frame.value.value.reason === GoAwayReason.RECONNECT
            ) {
              reconnect(index, dialed, frame.value.value.reconnectTo);
              // A new connection, so a load balancer in front of the instances places the zone again.
              transport.newConnection?.();
            }
            yield frame;
          }
        } catch (error) {
          if (away === undefined && !answered && !request.signal.aborted) failed(index, error);
          throw error;
        }
      })();
    },
  };
}
