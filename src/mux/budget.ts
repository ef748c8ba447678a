/**
 * A byte budget shared by the sessions of one process: the ceiling on the
 * inbound bytes all their receive buffers hold together. Each session's own
 * byte windows bound what one peer can make it buffer; the budget bounds the
 * sum when many peers fill their windows at once.
 *
 * When a frame does not fit, the budget ends the session that holds the most
 * (the one whose peer let the most go unconsumed), which may be the session
 * asking. So a well-behaved zone whose buffers stay nearly empty keeps
 * syncing while peers that never read are ended one by one.
 *
 * @module
 */
import { KdsError } from "../errors.ts";

/** Default ceiling of a {@link MemoryBudget}: 256 MiB. */
export const DEFAULT_MEMORY_BUDGET_BYTES = 256 * 1024 * 1024;

/** A party that holds bytes of a {@link MemoryBudget} (a session). */
export interface BudgetHolder {
  /** Name for messages (the peer's name). */
  readonly name: string;
  /**
   * Ends the holder because the budget is exhausted; it must release all it
   * holds before returning. `message` says what happened.
   */
  evict(message: string): void;
}

/** Figures of a {@link MemoryBudget}. */
export interface MemoryBudgetStats {
  /** The ceiling, in bytes. */
  readonly limitBytes: number;
  /** Bytes reserved now. */
  readonly usedBytes: number;
  /** The most bytes ever reserved at once. */
  readonly peakBytes: number;
  /** How many holders were ended because the budget was exhausted. */
  readonly evictions: number;
  /** How many holders (sessions) the budget knows now: each from its first reservation until it ends. */
  readonly holders: number;
}

/** The per-process ceiling on buffered inbound bytes, shared by sessions. */
export class MemoryBudget {
  readonly limitBytes: number;
  /**
   * What each holder holds, in a cell the holder keeps until
   * {@link MemoryBudget.releaseAll}: every frame of every session reserves and
   * releases, and an entry deleted at zero and added again with the next
   * frame made the map rebuild its table every few frames.
   */
  readonly #held = new Map<BudgetHolder, { bytes: number }>();
  #used = 0;
  #peak = 0;
  #evictions = 0;

  /** @param limitBytes - the ceiling, an integer of at least 1 KiB; default {@link DEFAULT_MEMORY_BUDGET_BYTES} */
  constructor(limitBytes: number = DEFAULT_MEMORY_BUDGET_BYTES) {
    if (!Number.isSafeInteger(limitBytes) || limitBytes < 1024) {
      throw new KdsError(
        "invalid_argument",
        `a memory budget must be an integer of at least 1024 bytes, got ${String(limitBytes)}`,
      );
    }
    this.limitBytes = limitBytes;
  }

  /** Current figures. */
  stats(): MemoryBudgetStats {
    return {
      limitBytes: this.limitBytes,
      usedBytes: this.#used,
      peakBytes: this.#peak,
      evictions: this.#evictions,
      holders: this.#held.size,
    };
  }

  /** Bytes `holder` holds now. */
  heldBy(holder: BudgetHolder): number {
    return this.#held.get(holder)?.bytes ?? 0;
  }

  /**
   * Reserves `bytes` for `holder`. When they do not fit, ends the holders
   * that hold the most, largest first, until they fit. Returns undefined once
   * reserved, or why not (nothing reserved) when `holder` itself would then
   * hold the most: the caller ends it with that message.
   */
  reserve(holder: BudgetHolder, bytes: number): string | undefined {
    while (this.#used + bytes > this.limitBytes) {
      const own = this.heldBy(holder) + bytes;
      let largest: BudgetHolder | undefined;
      let largestBytes = 0;
      for (const [other, held] of this.#held) {
        if (other !== holder && held.bytes > largestBytes) {
          largest = other;
          largestBytes = held.bytes;
        }
      }
      this.#evictions++;
      if (largest === undefined || largestBytes <= own) {
        return `${this.#describe()} it cannot take ${bytes} more for "${holder.name}", whose unread frames would then be the most of any session; ${REMEDY}`;
      }
      largest.evict(
        `${this.#describe()} "${largest.name}" had left the most unread (${largestBytes} bytes), so its session was ended; ${REMEDY}`,
      );
      // A holder that did not release is forgotten all the same, so this loop ends.
      this.releaseAll(largest);
    }
    const cell = this.#held.get(holder);
    if (cell === undefined) this.#held.set(holder, { bytes });
    else cell.bytes += bytes;
    this.#used += bytes;
    if (this.#used > this.#peak) this.#peak = this.#used;
    return undefined;
  }

  /** Gives back `bytes` of what `holder` reserved (the holder stays known, holding what is left, perhaps nothing). */
  release(holder: BudgetHolder, bytes: number): void {
    const cell = this.#held.get(holder);
    if (cell === undefined) return;
    const given = Math.min(cell.bytes, bytes);
    cell.bytes -= given;
    this.#used -= given;
  }

  /** Gives back everything `holder` reserved and forgets it: call it when the holder ends. */
  releaseAll(holder: BudgetHolder): void {
    const cell = this.#held.get(holder);
    if (cell === undefined) return;
    this.#used -= cell.bytes;
    this.#held.delete(holder);
  }

  #describe(): string {
    return `this process's sessions buffer ${this.#used} bytes of the ${this.limitBytes} it allows for all of them (its memory budget);`;
  }
}

const REMEDY =
  "a peer must consume what it is sent; if the peers are well-behaved and simply many, raise the process's memory budget (the global's `memoryBudget` option)";
