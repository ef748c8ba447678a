/**
 * `--rebalance-interval` and `--rebalance-moves` of `kds-mux global`: how
 * instances sharing one store even out their zones (src/global/rebalancer.ts).
 *
 * @module
 */
import { InvalidArgumentError, Option } from "commander";
import {
  DEFAULT_REBALANCE_INTERVAL_MS,
  DEFAULT_REBALANCE_MOVES,
  type RebalanceOptions,
} from "../global/rebalancer.ts";
import { parseDuration } from "./address.ts";

/** The flags, as commander parsed them. */
export interface RebalanceFlags {
  /** --rebalance-interval, in ms; 0 turns rebalancing off. */
  readonly rebalanceInterval?: number;
  /** --rebalance-moves. */
  readonly rebalanceMoves?: number;
  /** --advertise-url. */
  readonly advertiseUrl?: string;
}

/** `--advertise-url`. */
export const advertiseUrlOption = (): Option =>
  new Option(
    "--advertise-url <url>",
    "the URL zones dial to reach this instance, named in rebalancing's goaway RECONNECT to the zones moved here (default: the zone listener's own URL, which is only dialable where the listen address is; set it behind a load balancer, NAT or a 0.0.0.0 listener)",
  ).argParser((text: string) => {
    let url: URL;
    try {
      url = new URL(text);
    } catch {
      throw new InvalidArgumentError(
        `--advertise-url "${text}" is not a URL; use for example https://global-1.example.com:5685`,
      );
    }
    if (url.protocol !== "http:" && url.protocol !== "https:")
      throw new InvalidArgumentError(
        `--advertise-url must be an http:// or https:// URL, got "${text}"`,
      );
    return text;
  });

/** Whether zones could dial `url`: not a wildcard listen address (0.0.0.0 or ::). */
export function isDialable(url: string): boolean {
  const host = new URL(url).hostname;
  return host !== "0.0.0.0" && host !== "[::]" && host !== "::";
}

/** `--rebalance-interval`. */
export const rebalanceIntervalOption = (): Option =>
  new Option(
    "--rebalance-interval <duration>",
    "with several instances on one PostgreSQL server (--store postgres://...; never with memory or the embedded engine, which one process owns): how often each checks its share and, holding more than it, asks a few to reconnect to the least loaded instance (goaway RECONNECT); 0 turns it off",
  )
    .argParser((text: string) => {
      let ms: number;
      try {
        ms = parseDuration(text);
      } catch {
        throw new InvalidArgumentError(
          `--rebalance-interval "${text}" is not a duration; use for example 10s or 1m (0 turns rebalancing off)`,
        );
      }
      if (ms > 2 ** 31 - 1)
        throw new InvalidArgumentError(
          `--rebalance-interval must be at most ${2 ** 31 - 1}ms, got "${text}"`,
        );
      return ms;
    })
    .default(DEFAULT_REBALANCE_INTERVAL_MS, "10s");

/** `--rebalance-moves`. */
export const rebalanceMovesOption = (): Option =>
  new Option("--rebalance-moves <n>", "most zones one instance asks to move per rebalancing round")
    .argParser((text: string) => {
      const n = Number(text);
      if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(n) || n < 1)
        throw new InvalidArgumentError(
          `--rebalance-moves must be a whole number of at least 1, got "${text}"`,
        );
      return n;
    })
    .default(DEFAULT_REBALANCE_MOVES);

/** The control plane's `rebalance` option from the flags. */
export function rebalanceOption(flags: RebalanceFlags): RebalanceOptions | false {
  if (flags.rebalanceInterval === 0) return false;
  return { intervalMs: flags.rebalanceInterval, maxMovesPerRound: flags.rebalanceMoves };
}
