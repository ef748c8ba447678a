/**
 * Following a store: read a starting point, then apply every later change
 * in order, for as long as a signal lives. The one loop behind every store
 * follower (the served-kinds cache, Zone lifecycle, zone ownership): a failed
 * read or watch is logged and retried with backoff from the last revision
 * seen, and a feed that can no longer resume (`store_compacted`) starts over
 * from a fresh read.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { resolveBackoff, type BackoffOptions } from "../util/backoff.ts";
import { retryUntilAborted } from "../util/retry.ts";
import type { ResourceStore, StoreChange } from "./contract.ts";

/** What {@link followStore} needs. */
export interface FollowOptions {
  /** The store. */
  readonly store: ResourceStore;
  /** The kinds to follow. */
  readonly kinds: readonly string[];
  /** Stops following. */
  readonly signal: AbortSignal;
  /** What is being followed, for log lines ("served kinds", "Zone resources"). */
  readonly what: string;
  /** Where failures are logged. */
  readonly logger: Logger;
  /** Delays between retries. Default 200 ms doubling to 10 s, full jitter. */
  readonly retry?: BackoffOptions;
  /**
   * Reads the starting point (lists what it needs) and returns the revision
   * to follow from. Called first, and again after `store_compacted`
   * (`compacted` true); a rejection is retried like any failure.
   */
  readonly begin: (signal: AbortSignal, compacted: boolean) => Promise<number>;
  /** Handles one change; a rejection is retried from that change on. */
  readonly onChange: (change: StoreChange) => void | Promise<void>;
  /** Told about every failure (after it was logged), e.g. to show it in a status. */
  readonly onError?: (error: unknown) => void;
  /** Told when the store answers again after a failure. */
  readonly onRecovered?: () => void;
}

/** Follows the store until the signal aborts. Never rejects. */
export async function followStore(options: FollowOptions): Promise<void> {
  const { store, kinds, signal, logger, what } = options;
  let cursor: number | undefined;
  let compacted = false;
  let failing = false;
  await retryUntilAborted(
    signal,
    resolveBackoff({ baseMs: 200, capMs: 10_000, ...options.retry }),
    async (healthy) => {
      cursor ??= await options.begin(signal, compacted);
      compacted = false;
      if (failing) {
        failing = false;
        logger.info(`the store answers again; following ${what}`);
        options.onRecovered?.();
      }
      for await (const change of store.watch(cursor, { signal, kinds })) {
        await options.onChange(change);
        cursor = change.revision;
        healthy();
      }
    },
    (error, delay) => {
      failing = true;
      if (KdsError.is(error, "store_compacted")) {
        cursor = undefined;
        compacted = true;
      }
      logger.warn(`following ${what} in the store failed; retrying in ${delay} ms`, { error });
      options.onError?.(error);
    },
  );
}
