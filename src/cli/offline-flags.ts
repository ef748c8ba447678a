/**
 * Flags of offline zones and the reset guard: `--zone-stale-after`,
 * `--zone-expire-after` (global), and `--reset-guard-threshold`,
 * `--reset-guard-minimum`, `--reset-guard-hold-for` with `--no-reset-guard`
 * (global, on by default) or `--reset-guard` (zone, off by default). See
 * src/global/offline-zones.ts and src/sync/reset-guard.ts.
 *
 * @module
 */
import { InvalidArgumentError, Option } from "commander";
import { DEFAULT_RESET_GUARD, type ResetGuardOptions } from "../sync/reset-guard.ts";
import { durationFlag } from "./connection-flags.ts";

/** The flags, as commander parsed them. */
export interface OfflineFlags {
  /** --zone-stale-after, in ms. */
  readonly zoneStaleAfter?: number;
  /** --zone-expire-after, in ms. */
  readonly zoneExpireAfter?: number;
}

/** The reset guard flags, as commander parsed them. */
export interface ResetGuardFlags {
  /** --reset-guard / --no-reset-guard. */
  readonly resetGuard?: boolean;
  /** --reset-guard-threshold. */
  readonly resetGuardThreshold?: number;
  /** --reset-guard-minimum. */
  readonly resetGuardMinimum?: number;
  /** --reset-guard-hold-for, in ms. */
  readonly resetGuardHoldFor?: number;
}

/** `--zone-stale-after`. */
export const zoneStaleAfterOption = (): Option =>
  new Option(
    "--zone-stale-after <duration>",
    "a zone offline this long has its resources marked stale (label kds.io/origin-last-online, shown in get, inspect zones, the status page and metrics); zone-to-zones kinds with whenStale: withhold stop reaching the other zones. Cleared when the zone connects again (default: never)",
  ).argParser(durationFlag("--zone-stale-after"));

/** `--zone-expire-after`. */
export const zoneExpireAfterOption = (): Option =>
  new Option(
    "--zone-expire-after <duration>",
    "a zone offline this long has its resources deleted on the global and so in the other zones; they come back if it connects again (default: never)",
  ).argParser(durationFlag("--zone-expire-after"));

/** The reset guard flags of `role` (on by default on the global, off on a zone). */
export function resetGuardOptions(role: "global" | "zone"): Option[] {
  const peer = role === "global" ? "a zone" : "the global";
  const what =
    role === "global" ? "its resources on the global" : "what this zone holds from the global";
  return [
    role === "global"
      ? new Option(
          "--no-reset-guard",
          "turn the reset guard off: a zone that comes back empty deletes its resources on the global at once",
        )
      : new Option(
          "--reset-guard",
          "hold the deletions when the global's first exchange after connecting would delete most of what this zone holds from it (a global that lost its store); apply them with kds-mux zone accept-reset",
        ),
    new Option(
      "--reset-guard-threshold <share>",
      `reset guard: hold when the first exchange of ${peer} after connecting would delete more than this share of a kind of ${what}`,
    )
      .argParser((text: string) => {
        const n = Number(text);
        if (text.trim() === "" || !(n >= 0 && n < 1))
          throw new InvalidArgumentError(
            `--reset-guard-threshold must be a share from 0 up to (not including) 1, for example 0.5; got "${text}"`,
          );
        return n;
      })
      .default(DEFAULT_RESET_GUARD.threshold),
    new Option(
      "--reset-guard-minimum <n>",
      "reset guard: ... and at least this many resources of the kind",
    )
      .argParser((text: string) => {
        const n = Number(text);
        if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(n) || n < 1)
          throw new InvalidArgumentError(
            `--reset-guard-minimum must be a whole number of at least 1, got "${text}"`,
          );
        return n;
      })
      .default(DEFAULT_RESET_GUARD.minimum),
    new Option(
      "--reset-guard-hold-for <duration>",
      "reset guard: apply held deletions by themselves after this long (default: only when an operator runs kds-mux zone accept-reset)",
    ).argParser(durationFlag("--reset-guard-hold-for")),
  ];
}

/** The control plane's `resetGuard` option from the flags; `on`: whether it is on without a flag. */
export function resetGuardOption(
  flags: ResetGuardFlags,
  on: boolean,
): ResetGuardOptions | undefined {
  if (!(flags.resetGuard ?? on)) return undefined;
  return {
    threshold: flags.resetGuardThreshold,
    minimum: flags.resetGuardMinimum,
    holdForMs: flags.resetGuardHoldFor,
  };
}
