/**
 * Evens out zone sessions across the global instances that share one store.
 * Every round it reads the live instances (their GlobalInstance records,
 * which `ZoneOwnership` announces: alive, draining, the address zones dial),
 * counts the zones each holds from the ownership leases, and when this
 * instance holds more than its share (total / live instances not draining,
 * rounded up) it asks a few of its zones to reconnect (goaway RECONNECT) to
 * the live instance holding the fewest, naming that instance's address. A
 * zone resumes there by versions, so nothing is resent. An instance that
 * joins holds none, so the others shed toward it, a bounded number per round,
 * until the counts are even.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { Session } from "../mux/views.ts";
import { sleep } from "../util/abort.ts";
import type { LiveInstance, ZoneLease } from "./zone-ownership.ts";

/** Tunables of rebalancing; `false` in `GlobalControlPlaneOptions.rebalance` turns it off. */
export interface RebalanceOptions {
  /** How often an instance checks its share. Default 10 s. (Which instances are alive is their GlobalInstance record, renewed every lease period: see `GlobalControlPlaneOptions.leaseRenewMs`.) */
  readonly intervalMs?: number;
  /** The most zones one instance asks to move per round. Default 10. */
  readonly maxMovesPerRound?: number;
}

/** Options of {@link Rebalancer}. */
export interface RebalancerOptions extends RebalanceOptions {
  /** This instance's id. */
  readonly instance: string;
  /** The live instances sharing the store, this one included (see `ZoneOwnership.instances`). */
  readonly instances: (signal: AbortSignal) => Promise<readonly LiveInstance[]>;
  /** Every zone's lease (see `ZoneOwnership.leases`). */
  readonly leases: (signal: AbortSignal) => Promise<Map<string, ZoneLease>>;
  /** The sessions this instance holds now. */
  readonly sessions: () => readonly Session[];
  /** True while this instance drains (it sheds nothing itself then: the drain moves every zone). */
  readonly draining: () => boolean;
  readonly logger: Logger;
}

/** The default of {@link RebalanceOptions.intervalMs}. */
export const DEFAULT_REBALANCE_INTERVAL_MS = 10_000;
/** The default of {@link RebalanceOptions.maxMovesPerRound}. */
export const DEFAULT_REBALANCE_MOVES = 10;

/** A live instance as a round sees it. */
interface Peer {
  readonly instance: string;
  readonly zoneUrl: string;
  zones: number;
}

/** Sheds this instance's zones beyond its share, every round. */
export class Rebalancer {
  readonly #options: RebalancerOptions;
  readonly #intervalMs: number;
  readonly #maxMoves: number;

  /** @param options - instance, the live instances, what it holds */
  constructor(options: RebalancerOptions) {
    this.#options = options;
    this.#intervalMs = options.intervalMs ?? DEFAULT_REBALANCE_INTERVAL_MS;
    this.#maxMoves = options.maxMovesPerRound ?? DEFAULT_REBALANCE_MOVES;
    if (!Number.isFinite(this.#intervalMs) || this.#intervalMs <= 0)
      throw new KdsError(
        "invalid_argument",
        `rebalance intervalMs must be a positive number of milliseconds, got ${String(options.intervalMs)}`,
      );
    if (!Number.isInteger(this.#maxMoves) || this.#maxMoves < 1)
      throw new KdsError(
        "invalid_argument",
        `rebalance maxMovesPerRound must be a positive integer, got ${String(options.maxMovesPerRound)}`,
      );
  }

  /** Runs a round every interval until `signal` aborts; a round that fails is logged and the next one tries again. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.round(signal);
      } catch (error) {
        if (signal.aborted) return;
        this.#options.logger.warn("rebalancing: a round failed; the next one tries again", {
          error,
        });
      }
      try {
        await sleep(this.#intervalMs, signal);
      } catch {
        return; // rejects only once the signal aborted: rebalancing stops with the instance
      }
    }
  }

  /**
   * One round: ask the zones beyond this instance's share to move to the
   * least loaded live instance. Resolves with how many were asked.
   */
  async round(signal: AbortSignal): Promise<number> {
    const { instance, logger } = this.#options;
    if (this.#options.draining()) return 0;
    const peers = new Map<string, Peer>();
    for (const live of await this.#options.instances(signal))
      if (!live.draining)
        peers.set(live.instance, { instance: live.instance, zoneUrl: live.zoneUrl, zones: 0 });
    if (peers.size < 2) return 0;
    for (const lease of (await this.#options.leases(signal)).values()) {
      const peer = peers.get(lease.instance);
      if (lease.online && peer !== undefined && peer.instance !== instance) peer.zones++;
    }
    const held = this.#options.sessions().filter((s) => s.end === undefined);
    const self = peers.get(instance);
    if (self === undefined) return 0;
    self.zones = held.length;
    const all = [...peers.values()];
    const share = Math.ceil(all.reduce((n, p) => n + p.zones, 0) / all.length);
    const excess = self.zones - share;
    if (excess <= 0) return 0;
    const target = all
      .filter((p) => p !== self && p.zoneUrl !== "")
      .sort((a, b) => a.zones - b.zones)[0];
    if (target === undefined || target.zones >= share) return 0;
    // Several instances over their share shed toward the same one: each sends its part of the room, so together they do not overshoot.
    const over = all.filter((p) => p.zones > share).length;
    const moves = Math.min(excess, Math.ceil((share - target.zones) / over), this.#maxMoves);
    const message = `global instance "${instance}" holds ${self.zones} zones, more than its share of ${share} among ${all.length} instances; reconnect now to ${target.zoneUrl} (the state resumes by versions)`;
    // The newest sessions move first: the zones that connected last have the least history here.
    const chosen = [...held].reverse().slice(0, moves);
    for (const session of chosen)
      void session.close({ code: "reconnect", message, reconnectTo: target.zoneUrl });
    logger.info(
      `rebalancing: holding ${self.zones} zones (share ${share} among ${all.length} instances); asked ${chosen.length} to move to "${target.instance}" (${target.zones} zones)`,
      {
        held: self.zones,
        share,
        moved: chosen.length,
        target: target.instance,
      },
    );
    return chosen.length;
  }
}
