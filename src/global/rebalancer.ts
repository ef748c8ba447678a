/**
 * Evens out zone sessions across the global instances that share one store.
 * Every round it reads the live instances (their GlobalInstance records,
 * which `ZoneOwnership` announces: alive, draining, the address zones dial,
 * how many zones each held at its last announcement), and when this
 * instance holds more than its share (total / live instances not draining,
 * rounded up) it asks a few of its zones to reconnect (goaway RECONNECT) to
 * the live instance holding the fewest, naming that instance's address. A
 * zone resumes there by versions, so nothing is resent. An instance that
 * joins holds none, so the others shed toward it, a bounded number per round,
 * until the counts are even: each within 1% of the share, so that a fleet
 * that grows or shrinks does not move zones to chase a few. The counts in the
 * records are as old as their last announcement, so they only say whether
 * this instance may be over its share; only then (or when a record gives no
 * count, or while a zone asked to move is neither back here nor seen
 * elsewhere) does a round count every zone's lease, which decide. The leases
 * are counted as this instance's ownership watch keeps them
 * (`ZoneOwnership.holders`), not read from the store: a round costs each
 * instance one read of the records, never one of every lease.
 *
 * A move may not land: a zone that does not follow the address (an older
 * zone, a scheme it will not switch to), or a load balancer in front of
 * every instance that routes the zone back here. A zone asked to move that
 * is back on this instance by the next round is counted (a move that did not
 * land) and not asked again for a hold-off that grows each time it comes
 * back (the backoff of src/util/backoff), so an instance never churns the
 * same zones round after round.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { Session } from "../mux/views.ts";
import type { Metrics } from "../metrics.ts";
import type { RebalanceMoves } from "../observe/zone-status.ts";
import { sleep } from "../util/abort.ts";
import { backoffCeiling, resolveBackoff, type BackoffOptions } from "../util/backoff.ts";
import { systemClock, type Clock } from "../util/clock.ts";
import type { LeaseHolder, LiveInstance } from "./zone-ownership.ts";

/** Tunables of rebalancing; `false` in `GlobalControlPlaneOptions.rebalance` turns it off. */
export interface RebalanceOptions {
  /** How often an instance checks its share. Default 10 s. (Which instances are alive is their GlobalInstance record, renewed every lease period: see `GlobalControlPlaneOptions.leaseRenewMs`.) */
  readonly intervalMs?: number;
  /** The most zones one instance asks to move per round. Default 10. */
  readonly maxMovesPerRound?: number;
  /**
   * How long a zone that was asked to move and came back to this instance
   * is not asked again: `baseMs` after the first move that did not land,
   * doubling with each next one up to `capMs`. Default 1 min to 1 h.
   */
  readonly holdOff?: Pick<BackoffOptions, "baseMs" | "capMs">;
}

/** What rebalancing did with one zone on this instance (for `inspect zones`). */
export type ZoneMoves = RebalanceMoves;

/** Options of {@link Rebalancer}. */
export interface RebalancerOptions extends RebalanceOptions {
  /** This instance's id. */
  readonly instance: string;
  /** The live instances sharing the store, this one included (see `ZoneOwnership.instances`). */
  readonly instances: (signal: AbortSignal) => Promise<readonly LiveInstance[]>;
  /** Who holds every zone's lease (see `ZoneOwnership.holders`); asked only when a round needs it (see the top). */
  readonly leases: (signal: AbortSignal) => Promise<ReadonlyMap<string, LeaseHolder>>;
  /** The sessions this instance holds now. */
  readonly sessions: () => readonly Session[];
  /** True while this instance drains (it sheds nothing itself then: the drain moves every zone). */
  readonly draining: () => boolean;
  readonly logger: Logger;
  /** Counts the moves asked and those that did not land (`kds_rebalance_moves_total`). */
  readonly metrics?: Metrics;
  /** Times the hold-off. Default: the system clock. */
  readonly clock?: Clock;
}

/** The default of {@link RebalanceOptions.holdOff}. */
export const DEFAULT_REBALANCE_HOLD_OFF = Object.freeze({ baseMs: 60_000, capMs: 3_600_000 });

/** The default of {@link RebalanceOptions.intervalMs}. */
export const DEFAULT_REBALANCE_INTERVAL_MS = 10_000;
/** The default of {@link RebalanceOptions.maxMovesPerRound}. */
export const DEFAULT_REBALANCE_MOVES = 10;

/** Each instance's share of zones: the total over the instances, rounded up. */
function shareOf(zones: readonly number[]): number {
  return Math.ceil(zones.reduce((n, z) => n + z, 0) / zones.length);
}

/** How far from its share an instance may be: 1% of the share (none while the share is under 100). */
function slackOf(share: number): number {
  return Math.floor(share / 100);
}

/**
 * Whether an instance holding `zones` sheds toward the least loaded one,
 * holding `fewest`: when it is over the share by more than the slack, or
 * over it at all while the least loaded is under it by more than the slack
 * (so that a fleet stays within the slack on both sides, not only above).
 */
function sheds(zones: number, fewest: number, share: number): boolean {
  const slack = slackOf(share);
  return zones > share + slack || (zones > share && fewest < share - slack);
}

/** A live instance as a round sees it. */
interface Peer {
  readonly instance: string;
  readonly zoneUrl: string;
  zones: number;
}

/** One zone this instance asked to move: the session asked, and what came of the asks so far. */
interface Moves {
  /** The session last asked to move, while the outcome is not known; undefined once it is. */
  pending: Session | undefined;
  asked: number;
  unlanded: number;
  /** Clock time of the last ask. */
  askedAt: number;
  /** Clock time until which the zone is not asked again; 0 when it may be. */
  holdUntil: number;
}

/** Sheds this instance's zones beyond its share, every round. */
export class Rebalancer {
  readonly #options: RebalancerOptions;
  readonly #intervalMs: number;
  readonly #maxMoves: number;
  readonly #holdOff: ReturnType<typeof resolveBackoff>;
  readonly #clock: Clock;
  /** The zones this instance asked to move, by name; pruned each round (only zones held here, or held off). */
  readonly #moves = new Map<string, Moves>();
  /** The reason the last round asked nothing while over its share, logged once until it changes. */
  #stuck = "";

  /** @param options - instance, the live instances, what it holds */
  constructor(options: RebalancerOptions) {
    this.#options = options;
    this.#intervalMs = options.intervalMs ?? DEFAULT_REBALANCE_INTERVAL_MS;
    this.#maxMoves = options.maxMovesPerRound ?? DEFAULT_REBALANCE_MOVES;
    this.#clock = options.clock ?? systemClock;
    this.#holdOff = resolveBackoff({ ...DEFAULT_REBALANCE_HOLD_OFF, ...options.holdOff });
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

  /** What rebalancing did with `zone` here; undefined when this instance never asked it to move (or forgot it). */
  zoneMoves(zone: string): ZoneMoves | undefined {
    const m = this.#moves.get(zone);
    if (m === undefined) return undefined;
    const left = m.holdUntil - this.#clock.now();
    return {
      asked: m.asked,
      unlanded: m.unlanded,
      heldUntil: left > 0 ? new Date(Date.now() + left) : undefined,
    };
  }

  /**
   * Learns what came of earlier asks: a zone asked to move that is held here
   * again on a newer session came back (the move did not land), so it is
   * held off; one whose lease is online on another instance landed there.
   * Until one of the two, the ask stays pending (the zone may still be
   * between sessions), for at most three intervals. Forgets zones that are
   * neither held here nor held off.
   */
  #settle(
    sessions: ReadonlyMap<string, Session>,
    leases: ReadonlyMap<string, LeaseHolder> | undefined,
  ): void {
    const now = this.#clock.now();
    for (const [zone, m] of this.#moves) {
      const session = sessions.get(zone);
      if (m.pending !== undefined && session !== m.pending) {
        const lease = leases?.get(zone);
        if (session !== undefined) {
          m.pending = undefined;
          m.unlanded++;
          m.holdUntil = now + backoffCeiling(m.unlanded - 1, this.#holdOff);
          this.#options.metrics?.rebalanceMove?.("unlanded");
          this.#options.logger.info(
            `rebalancing: zone "${zone}" came back to this instance after it was asked to move (${m.unlanded} of ${m.asked} moves did not land); not asked again for ${Math.round((m.holdUntil - now) / 1000)} s`,
            { zone, asked: m.asked, unlanded: m.unlanded },
          );
        } else if (
          (lease?.online === true && lease.instance !== this.#options.instance) ||
          now - m.askedAt > 3 * this.#intervalMs
        )
          m.pending = undefined; // landed on another instance (or stayed away): nothing to hold
      }
      if (session === undefined && m.pending === undefined && m.holdUntil <= now)
        this.#moves.delete(zone);
    }
  }

  /** A zone asked to move is neither back here nor known to have landed elsewhere (only its lease can tell). */
  #awaitingLanding(sessions: ReadonlyMap<string, Session>): boolean {
    for (const [zone, m] of this.#moves)
      if (m.pending !== undefined && !sessions.has(zone)) return true;
    return false;
  }

  /**
   * One round: ask the zones beyond this instance's share to move to the
   * least loaded live instance. Resolves with how many were asked.
   */
  async round(signal: AbortSignal): Promise<number> {
    const { instance, logger } = this.#options;
    if (this.#options.draining()) return 0;
    const peers = new Map<string, Peer>();
    /** Each live instance's count of its zones at its last announcement, where its record gives one. */
    const counts = new Map<string, number | undefined>();
    for (const live of await this.#options.instances(signal))
      if (!live.draining) {
        peers.set(live.instance, { instance: live.instance, zoneUrl: live.zoneUrl, zones: 0 });
        counts.set(live.instance, live.zones);
      }
    if (peers.size < 2 && this.#moves.size === 0) return 0;
    const held = this.#options.sessions().filter((s) => s.end === undefined);
    const sessions = new Map(held.map((s) => [s.peerId, s]));
    // The records' counts are as old as their last announcement: they only say whether this
    // instance may be over its share. The leases, exact (kept by the ownership watch), decide.
    const counted = [...counts].every(([p, n]) => p === instance || n !== undefined);
    const others = [...peers.keys()].filter((p) => p !== instance).map((p) => counts.get(p) ?? 0);
    const byRecords = shareOf([held.length, ...others]);
    const maybeOver = !counted || sheds(held.length, Math.min(...others), byRecords);
    const leases =
      maybeOver || this.#awaitingLanding(sessions) ? await this.#options.leases(signal) : undefined;
    this.#settle(sessions, leases);
    // Without the leases nothing was decided: the reason last logged for asking none stays.
    if (peers.size < 2 || leases === undefined) return 0;
    for (const lease of leases.values()) {
      const peer = peers.get(lease.instance);
      if (lease.online && peer !== undefined && peer.instance !== instance) peer.zones++;
    }
    const self = peers.get(instance);
    if (self === undefined) return 0;
    self.zones = held.length;
    const all = [...peers.values()];
    const share = shareOf(all.map((p) => p.zones));
    const excess = self.zones - share;
    const target = all
      .filter((p) => p !== self && p.zoneUrl !== "")
      .sort((a, b) => a.zones - b.zones)[0];
    if (!sheds(self.zones, target?.zones ?? share, share)) {
      this.#stuck = "";
      return 0;
    }
    if (target === undefined || target.zones >= share) return 0;
    // Several instances over their share shed toward the same one: each sends its part of the room, so together they do not overshoot.
    const over = all.filter((p) => sheds(p.zones, target.zones, share)).length;
    const moves = Math.min(excess, Math.ceil((share - target.zones) / over), this.#maxMoves);
    const now = this.#clock.now();
    // Zones whose last move did not land wait out their hold-off; a zone still closing after an ask is not asked twice.
    const movable = held.filter((s) => {
      const m = this.#moves.get(s.peerId);
      return m === undefined || (m.pending === undefined && m.holdUntil <= now);
    });
    // Behind one address (a load balancer in front of every instance) the balancer, not this instance, picks where a moved zone lands.
    const shared = target.zoneUrl === self.zoneUrl;
    if (movable.length === 0) {
      const why = `rebalancing: holding ${self.zones} zones (share ${share} among ${all.length} instances) and asking none to move: every zone beyond the share came back when asked before and is held off${shared ? ` (every instance advertises ${target.zoneUrl}: the load balancer there picks the instance a zone reconnects to)` : " (zones that do not follow a goaway's reconnect_to outside the global addresses they were given, or that cannot reach it)"}`;
      if (why !== this.#stuck) logger.info(why, { held: self.zones, share });
      this.#stuck = why;
      return 0;
    }
    this.#stuck = "";
    const message = `global instance "${instance}" holds ${self.zones} zones, more than its share of ${share} among ${all.length} instances; reconnect now to ${target.zoneUrl} (the state resumes by versions)`;
    // The newest sessions move first: the zones that connected last have the least history here.
    const chosen = [...movable].reverse().slice(0, moves);
    for (const session of chosen) {
      const m = this.#moves.get(session.peerId) ?? {
        pending: undefined,
        asked: 0,
        unlanded: 0,
        askedAt: now,
        holdUntil: 0,
      };
      m.pending = session;
      m.askedAt = now;
      m.asked++;
      this.#moves.set(session.peerId, m);
      this.#options.metrics?.rebalanceMove?.("asked");
      void session.close({ code: "reconnect", message, reconnectTo: target.zoneUrl });
    }
    logger.info(
      `rebalancing: holding ${self.zones} zones (share ${share} among ${all.length} instances); asked ${chosen.length} to move to "${target.instance}" (${target.zones} zones)${shared ? ` through ${target.zoneUrl}, which every instance advertises: the load balancer there picks where they land` : ""}`,
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
