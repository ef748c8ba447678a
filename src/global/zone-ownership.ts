/**
 * Which global instance holds a zone's session, when several instances share
 * one store. The instance that admits the newest session writes the zone's
 * ZoneInsight (the lease) unconditionally; every instance follows those
 * writes and closes its own older session of that zone (a write for a
 * session that started before its own, a late refresh, is taken over
 * instead); the holder marks the lease offline when the session ends.
 *
 * Whether the holder still lives is not in the lease: every instance
 * announces itself in ONE GlobalInstance record (when, whether it drains, the
 * address zones dial, when this run started) at start and every `renewMs`,
 * and a lease reads online while its instance's record is fresh (renewed
 * within 3 periods). So the periodic work is one write per instance, not one
 * per zone: the leases themselves are rewritten only when something happens
 * (a claim, a session's end), plus a slow refresh of their details (heartbeat
 * round trip, `renewedAt`) capped at {@link RENEW_BATCH} a period. A crashed
 * instance stops announcing: its zones reconnect elsewhere and take the lease,
 * and until then its entries read offline.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { KdsError } from "../errors.ts";
import {
  GlobalInstanceSpecSchema,
  ZoneInsightSpecSchema,
  type GlobalInstanceSpec,
  type ZoneInsightSpec,
} from "../gen/kds/v1/resource_pb.ts";
import type { Logger } from "../log.ts";
import type { SessionEnd } from "../mux/state.ts";
import type { Session } from "../mux/views.ts";
import type { ResourceStore } from "../store/contract.ts";
import { GLOBAL_INSTANCE_KIND, ZONE_INSIGHT_KIND } from "../kinds/builtin-types.ts";
import { followStore } from "../store/follow.ts";
import type { BackoffOptions } from "../util/backoff.ts";
import { systemClock, type Clock } from "../util/clock.ts";
import { BurstLog } from "../util/burst-log.ts";
import { isAborted, raceAbort } from "../util/abort.ts";

/**
 * Most leases whose details one period refreshes (in one store batch). It
 * caps the periodic lease writes of an instance, however many zones it holds:
 * with more than `RENEW_BATCH × refreshAfterMs / renewMs` zones, each is
 * refreshed less often than `refreshAfterMs`, which only ages the details
 * shown for it (liveness is the instance's record, renewed every period).
 */
export const RENEW_BATCH = 100;

/** Periods after which a lease's details are refreshed, by default (see {@link ZoneOwnershipOptions.refreshAfterMs}). */
export const DEFAULT_REFRESH_PERIODS = 30;

/**
 * Periods of silence after which an instance's GlobalInstance record is
 * deleted (by any instance, every {@link DEFAULT_REFRESH_PERIODS} periods):
 * each start of an instance with a fresh id leaves a record, and without
 * this they would pile up for ever. 360 periods is an hour at the default
 * period; the record has read as gone since its third silent period, and
 * leases naming it read offline after as before (by their own `renewedAt`).
 */
export const PRUNE_AFTER_PERIODS = 360;

/** Options of {@link ZoneOwnership}. */
export interface ZoneOwnershipOptions {
  /** The shared store. */
  readonly store: ResourceStore;
  /** This instance's id (unique among the instances sharing the store). */
  readonly instance: string;
  /**
   * How often this instance announces itself (its GlobalInstance record) and
   * retries failed claims. Default 10 s. A lease reads offline once its
   * instance's record is 3 periods old: instances sharing a store should use
   * the same period.
   */
  readonly renewMs?: number;
  /**
   * A held lease last written longer ago than this has its details
   * (heartbeat round trip, `renewedAt`) written again at the next period,
   * oldest first, at most {@link RENEW_BATCH} a period. Only those details
   * age meanwhile: liveness is the instance's record. Default 30 ×
   * `renewMs` (5 minutes at the default period).
   */
  readonly refreshAfterMs?: number;
  /** The address zones dial to reach this instance, once known (announced in its record; rebalancing names it). Read at each announcement: call {@link ZoneOwnership.announce} when it becomes known to publish it before the next period. */
  readonly zoneUrl?: () => string | undefined;
  /** True while this instance drains (announced in its record: the others send it no zones). Default: never. */
  readonly draining?: () => boolean;
  /** Delays between retries of a failed store read. */
  readonly retry?: BackoffOptions;
  /** Wall clock (the times written to the store and compared with theirs). Default `Date.now`. */
  readonly now?: () => number;
  /** Timers of the periodic work. Default: the system clock. */
  readonly clock?: Clock;
  /** Where to log. */
  readonly logger: Logger;
}

/** A live global instance, as its record in the store says (see {@link ZoneOwnership.instances}). */
export interface LiveInstance {
  /** Its id. */
  readonly instance: string;
  /** The address zones dial to reach it ("" when unknown). */
  readonly zoneUrl: string;
  /** It drains: it takes no zones. */
  readonly draining: boolean;
  /** When it last announced itself (its own clock). */
  readonly renewedAt: Date;
  /** How many zones it held then; undefined when its record does not say (count its leases instead). */
  readonly zones?: number;
}

interface Held {
  readonly session: Session;
  readonly id: string;
  readonly connectedAt: Date;
  /** Version of the lease this instance last wrote; undefined until the first write landed. */
  version: string | undefined;
  /** When that write was made (wall clock), so the refresh picks the oldest. */
  writtenAt: number;
  /** A claim by another session seen before our first write landed: decided once it has. */
  other: { readonly revision: number; readonly instance: string } | undefined;
  /** The first write (the claim, or its retry at a later period) is under way. */
  claiming: boolean;
}

/** Who holds a zone's session, as any instance sees it (see {@link ZoneOwnership.holders}). */
export interface LeaseHolder {
  /** The instance holding it. */
  readonly instance: string;
  /**
   * Online: the holder says so and is alive (its GlobalInstance record
   * renewed within 3 periods, and this session started in its current run;
   * only for an instance with no record at all, the lease's own `renewedAt`
   * within 3 periods).
   */
  readonly online: boolean;
}

/** What the store says about a zone's session, as any instance sees it. */
export interface ZoneLease extends LeaseHolder {
  /** As {@link LeaseHolder.online}; also always true for the lease of a session this instance holds. */
  readonly online: boolean;
  /** The raw record. */
  readonly insight: ZoneInsightSpec;
}

/** A zone's lease as the ownership watch last saw it: what {@link ZoneOwnership.holders} needs of it, no more. */
interface FollowedLease {
  /** The store revision that wrote it (its version). */
  readonly revision: number;
  readonly instance: string;
  /** The holder said online. */
  readonly online: boolean;
  /** When the session started (wall clock ms), when the lease says. */
  readonly connectedAt: number | undefined;
  /** When the lease was last renewed (wall clock ms; 0 when never). */
  readonly renewedAt: number;
}

/** Ownership leases of zone sessions, and this instance's liveness record, shared through the store. */
export class ZoneOwnership {
  readonly #options: ZoneOwnershipOptions;
  readonly #renewMs: number;
  readonly #refreshAfterMs: number;
  readonly #now: () => number;
  readonly #clock: Clock;
  /** When this run started (wall clock): leases naming this instance from before then are an earlier run's. */
  readonly #startedAt: number;
  readonly #held = new Map<string, Held>();
  /**
   * Every zone's lease, kept from the ownership watch once {@link holders}
   * was first asked (undefined before: an instance that never rebalances
   * keeps nothing), so that it reads no lease from the store after that.
   */
  #followed: Map<string, FollowedLease> | undefined;
  /** Leases deleted while the first read for `#followed` is under way, by revision: that read must not bring them back. */
  #gone: Map<string, number> | undefined;
  /** The first read for `#followed` (shared by the calls that wait for it). */
  #filling: Promise<void> | undefined;
  /** A period's lease work is under way (a slow store can make it outlast the period: the next is skipped, not stacked). */
  #ticking = false;
  /** Periods ticked since this instance started: every {@link DEFAULT_REFRESH_PERIODS}th also prunes long-silent instance records. */
  #ticks = 0;
  /** A periodic announcement is under way (likewise skipped, not stacked, when the store is slow). */
  #announcing = false;
  /** Announcements run one after another, each built when its turn comes, so the last one written says the latest. */
  #announced: Promise<unknown> = Promise.resolve();
  /** The last announcement failed (logged once until one lands again). */
  #announceFailing = false;
  /** The offline records being written for sessions that ended, one per zone at most (see {@link released}). */
  readonly #releasing = new Set<Promise<void>>();
  /** Offline records that could not be written: a store that is away fails every one, so they are logged once per burst. */
  readonly #releaseFailures: BurstLog;
  /** The latest of those failures, named in the burst's line. */
  #releaseFailure: { readonly zone: string; readonly error: unknown } | undefined;

  /** @param options - store, instance id */
  constructor(options: ZoneOwnershipOptions) {
    this.#options = options;
    this.#renewMs = options.renewMs ?? 10_000;
    this.#refreshAfterMs = options.refreshAfterMs ?? DEFAULT_REFRESH_PERIODS * this.#renewMs;
    if (!Number.isFinite(this.#renewMs) || this.#renewMs <= 0)
      throw new KdsError(
        "invalid_argument",
        `the lease renewMs must be a positive number of milliseconds, got ${String(options.renewMs)}`,
      );
    if (!Number.isFinite(this.#refreshAfterMs) || this.#refreshAfterMs < 0)
      throw new KdsError(
        "invalid_argument",
        `the lease refreshAfterMs must be a number of milliseconds, 0 or more, got ${String(options.refreshAfterMs)}`,
      );
    this.#now = options.now ?? Date.now;
    this.#clock = options.clock ?? systemClock;
    this.#startedAt = this.#now();
    this.#releaseFailures = new BurstLog(
      (count, windowMs) =>
        this.#options.logger.warn(
          count === 1 && windowMs === 0
            ? `recording that zone "${this.#releaseFailure?.zone ?? "?"}" went offline failed; its lease says it is online here until another instance takes it, or until three lease periods after this instance's last announcement (more such failures are counted in one line every 10 s)`
            : `recording that ${count} more zones went offline failed in the last ${Math.round(windowMs / 1000)} s (the last: zone "${this.#releaseFailure?.zone ?? "?"}"); their leases say they are online here until another instance takes them, or until three lease periods after this instance's last announcement`,
          { zone: this.#releaseFailure?.zone, error: this.#releaseFailure?.error, failed: count },
        ),
      10_000,
      this.#clock,
    );
  }

  /** This instance's id. */
  get instance(): string {
    return this.#options.instance;
  }

  /** The lease period: how often this instance announces itself (the `renewMs` option). */
  get renewMs(): number {
    return this.#renewMs;
  }

  /**
   * Announces this instance, then follows other instances' claims, announces
   * it again and refreshes its leases every `renewMs`, until `signal` aborts.
   */
  start(signal: AbortSignal): void {
    const { store, logger } = this.#options;
    void followStore({
      store,
      kinds: [ZONE_INSIGHT_KIND],
      signal,
      what: "zone ownership",
      logger,
      retry: this.#options.retry,
      begin: (_signal, compacted) => {
        // The feed could not resume: changes were missed, so the leases kept are read whole again when next asked.
        if (compacted) this.#unfollow();
        return store.revision({ signal });
      },
      onChange: (change) => {
        if (change.op === "delete") {
          this.#followed?.delete(change.ref.name);
          this.#gone?.set(change.ref.name, change.revision);
          return;
        }
        const zone = change.resource.meta.name;
        const insight = change.resource.spec as ZoneInsightSpec;
        if (this.#followed !== undefined) this.#follow(zone, insight, change.revision);
        this.#claimed(zone, insight, change.resource.meta.version);
      },
    });
    void this.#announceLogged(signal);
    let cancel: () => void = () => undefined;
    const arm = (): void => {
      cancel = this.#clock.setTimer(() => {
        if (signal.aborted) return;
        arm(); // a fixed rate: the next period does not wait for this one's writes
        // Apart: liveness must not wait behind the lease work (thousands of claims retried after a store outage).
        void this.#announceLogged(signal);
        void this.#tick(signal);
      }, this.#renewMs);
    };
    arm();
    signal.addEventListener("abort", () => cancel(), { once: true });
  }

  /**
   * Writes this instance's GlobalInstance record now: renewed now, whether
   * it drains, the address zones dial, when this run started, how many zones
   * it holds. The periodic
   * work calls it every `renewMs`; a drain calls it at once, so the other
   * instances see `draining` without waiting for the next period. Rejects
   * with the store's error.
   */
  announce(signal?: AbortSignal): Promise<void> {
    const next = this.#announced.then(async () => {
      const spec = create(GlobalInstanceSpecSchema, {
        renewedAt: timestampFromDate(new Date(this.#now())),
        draining: this.#options.draining?.() ?? false,
        zoneUrl: this.#options.zoneUrl?.() ?? "",
        startedAt: timestampFromDate(new Date(this.#startedAt)),
        zones: this.#held.size,
      });
      await this.#options.store.put(
        { kind: GLOBAL_INSTANCE_KIND, name: this.#options.instance, spec },
        { signal },
      );
    });
    this.#announced = next.catch(() => undefined); // the caller gets the failure; the chain goes on
    return next;
  }

  /** The live instances sharing the store (this one included once announced): their records renewed within 3 periods. */
  async instances(signal?: AbortSignal): Promise<LiveInstance[]> {
    const out: LiveInstance[] = [];
    for (const [instance, spec] of await this.#records(signal)) {
      const renewedAt = new Date(renewedOf(spec.renewedAt));
      if (this.#fresh(renewedAt.getTime()))
        out.push({
          instance,
          zoneUrl: spec.zoneUrl,
          draining: spec.draining,
          renewedAt,
          ...(spec.zones === undefined ? {} : { zones: spec.zones }),
        });
    }
    return out;
  }

  /** Claims zone `zone` for `session` (the newest session wins); marks it offline when the session ends. */
  async claim(session: Session, signal?: AbortSignal): Promise<void> {
    const zone = session.peerId;
    const held: Held = {
      session,
      id: crypto.randomUUID(),
      connectedAt: new Date(this.#now()),
      version: undefined,
      writtenAt: 0,
      other: undefined,
      claiming: true,
    };
    this.#held.set(zone, held);
    void session.closed.then((end) => {
      const releasing = this.#release(zone, held, end).then(undefined, (error: unknown) => {
        // The store's failures are caught inside; this is anything else that went wrong building the record.
        this.#releaseFailure = { zone, error };
        this.#releaseFailures.note();
      });
      this.#releasing.add(releasing);
      void releasing.then(() => this.#releasing.delete(releasing));
    });
    await this.#claimWrite(zone, held, signal);
  }

  /**
   * Writes the claim of `held` (its first write, or a retry of it); then,
   * if another instance's claim of the zone was seen before ours landed and
   * is the later write, closes our session. Rejects with the store's error.
   */
  async #claimWrite(zone: string, held: Held, signal?: AbortSignal): Promise<void> {
    held.claiming = true;
    try {
      await this.#write(zone, held, undefined, signal);
    } finally {
      held.claiming = false;
    }
    const other = held.other;
    if (other !== undefined && held.version !== undefined && other.revision > Number(held.version))
      this.#lost(zone, held, other.instance);
  }

  /** Every zone's lease as the store has it (from any instance, online or not), by zone name. */
  async leases(signal?: AbortSignal): Promise<Map<string, ZoneLease>> {
    const [{ resources }, records] = await Promise.all([
      this.#options.store.list(ZONE_INSIGHT_KIND, { signal }),
      this.#records(signal),
    ]);
    const out = new Map<string, ZoneLease>();
    for (const r of resources) {
      const insight = r.spec as ZoneInsightSpec;
      const ours =
        insight.instance === this.#options.instance &&
        this.#held.get(r.meta.name)?.id === insight.session; // ours, and live: no record needs to say so
      out.set(r.meta.name, {
        instance: insight.instance,
        online:
          insight.online &&
          (ours ||
            this.#alive(
              connectedOf(insight),
              renewedOf(insight.renewedAt),
              records.get(insight.instance),
            )),
        insight,
      });
    }
    return out;
  }

  /**
   * Who holds each zone's lease, without reading the leases from the store:
   * the first call reads them whole, and from then on they are kept as the
   * ownership watch follows them (about 200 bytes per zone), so a later call
   * reads only the GlobalInstance records, one per instance, where
   * {@link leases} reads a row per zone (at 100,000 zones, every instance
   * reading them each rebalancing round took more CPU than the machine had).
   */
  async holders(signal?: AbortSignal): Promise<Map<string, LeaseHolder>> {
    if (this.#followed === undefined || this.#filling !== undefined) await this.#fill(signal);
    const followed = this.#followed;
    if (followed === undefined) return this.leases(signal); // the feed started over meanwhile: read them this once
    const records = await this.#records(signal);
    const out = new Map<string, LeaseHolder>();
    for (const [zone, lease] of followed)
      out.set(zone, {
        instance: lease.instance,
        online:
          lease.online &&
          this.#alive(lease.connectedAt, lease.renewedAt, records.get(lease.instance)),
      });
    return out;
  }

  /**
   * Starts keeping the leases: from now on the watch's writes go into
   * `#followed`, and one read of every lease fills in the rest. The read
   * comes after that start, so it holds every write the watch handed over
   * before; a write or deletion the watch hands over while it runs is newer
   * than what it read of that zone, and is kept.
   */
  async #fill(signal?: AbortSignal): Promise<void> {
    this.#filling ??= (async () => {
      const followed = new Map<string, FollowedLease>();
      const gone = new Map<string, number>();
      this.#followed = followed;
      this.#gone = gone;
      try {
        const { resources } = await this.#options.store.list(ZONE_INSIGHT_KIND, { signal });
        for (const r of resources) {
          const revision = Number(r.meta.version);
          if ((followed.get(r.meta.name)?.revision ?? 0) >= revision) continue;
          if ((gone.get(r.meta.name) ?? 0) >= revision) continue;
          this.#follow(r.meta.name, r.spec as ZoneInsightSpec, revision);
        }
      } catch (error) {
        this.#unfollow();
        throw error;
      } finally {
        if (this.#gone === gone) this.#gone = undefined;
        this.#filling = undefined;
      }
    })();
    await this.#filling;
  }

  /** Stops keeping the leases (the next {@link holders} reads them whole again). */
  #unfollow(): void {
    this.#followed = undefined;
    this.#gone = undefined;
  }

  /** Keeps what {@link holders} needs of the lease `insight` of `zone`, written at `revision`. */
  #follow(zone: string, insight: ZoneInsightSpec, revision: number): void {
    this.#followed?.set(zone, {
      revision,
      instance: insight.instance,
      online: insight.online,
      connectedAt: connectedOf(insight),
      renewedAt: renewedOf(insight.renewedAt),
    });
  }

  /**
   * Whether the holder of an online lease (its session started at
   * `connectedAt`, the lease renewed at `renewedAt`) is alive by its
   * instance's `record` (see {@link LeaseHolder.online}).
   */
  #alive(
    connectedAt: number | undefined,
    renewedAt: number,
    record: GlobalInstanceSpec | undefined,
  ): boolean {
    if (record === undefined) return this.#fresh(renewedAt);
    if (!this.#fresh(renewedOf(record.renewedAt))) return false;
    // A session from before the instance's current run was left by an earlier run under the same id.
    return (
      record.startedAt === undefined ||
      connectedAt === undefined ||
      connectedAt >= timestampDate(record.startedAt).getTime()
    );
  }

  /** Renewed within 3 periods. */
  #fresh(renewed: number): boolean {
    return this.#now() - renewed < 3 * this.#renewMs;
  }

  /** Every GlobalInstance record, by instance. */
  async #records(signal?: AbortSignal): Promise<Map<string, GlobalInstanceSpec>> {
    const { resources } = await this.#options.store.list(GLOBAL_INSTANCE_KIND, { signal });
    return new Map(resources.map((r) => [r.meta.name, r.spec as GlobalInstanceSpec]));
  }

  /** Another instance (or this one) wrote the lease of `zone`: close this instance's session if it lost it. */
  #claimed(zone: string, insight: ZoneInsightSpec, version: string): void {
    const held = this.#held.get(zone);
    if (held === undefined) return;
    if (insight.instance === this.#options.instance && insight.session === held.id) {
      held.version = version;
      return;
    }
    if (!insight.online) return; // an older session of this zone elsewhere went offline; ours still holds
    const revision = Number(version);
    // A write for a session that started before ours (another instance's claim or refresh that was under way when that session ended) must
    // not end ours: a zone holds one session at a time, and ours is the newer one. Take that write's version and put ours first in line, so
    // the next period's refresh replaces it (until then the lease names the other instance).
    const theirs =
      insight.connectedAt === undefined ? undefined : timestampDate(insight.connectedAt).getTime();
    if (theirs !== undefined && theirs < held.connectedAt.getTime()) {
      if (held.version !== undefined && revision > Number(held.version)) {
        held.version = version;
        held.writtenAt = Number.NEGATIVE_INFINITY;
      }
      return;
    }
    if (held.version === undefined) {
      // Our claim has not landed yet: whichever write came last wins, decided when it lands.
      held.other = { revision, instance: insight.instance };
      return;
    }
    if (revision > Number(held.version)) this.#lost(zone, held, insight.instance);
  }

  /** Another instance holds the newer session of `zone`: close ours. */
  #lost(zone: string, held: Held, instance: string): void {
    if (this.#held.get(zone) !== held) return;
    this.#held.delete(zone);
    this.#options.logger.info(
      `zone "${zone}" connected to instance "${instance}"; closing its older session here`,
      { zone },
    );
    void held.session.close({
      code: "replaced",
      message: `a newer session of zone "${zone}" on global instance "${instance}" replaced this one`,
    });
  }

  /**
   * One period's lease work (beside the announcement): write again the
   * claims that failed, then refresh the details of at most {@link
   * RENEW_BATCH} held leases last written more than `refreshAfterMs` ago,
   * oldest first. A failure is logged and left for the next period.
   */
  async #tick(signal: AbortSignal): Promise<void> {
    if (this.#ticking) return;
    this.#ticking = true;
    try {
      await this.#claimAgain(signal);
      if (signal.aborted) return;
      const before = this.#now() - this.#refreshAfterMs;
      const due = [...this.#held]
        .filter(([, h]) => h.version !== undefined && !h.claiming && h.writtenAt <= before)
        .sort(([, a], [, b]) => a.writtenAt - b.writtenAt)
        .slice(0, RENEW_BATCH);
      if (due.length > 0) await this.#refresh(due, signal);
      if (++this.#ticks % DEFAULT_REFRESH_PERIODS === 0) await this.#prune(signal);
    } finally {
      this.#ticking = false;
    }
  }

  /**
   * Deletes the GlobalInstance records silent for {@link PRUNE_AFTER_PERIODS}
   * periods, each only at the version read (an instance that announced
   * meanwhile keeps its record). A failure is logged and left for a later
   * period.
   */
  async #prune(signal: AbortSignal): Promise<void> {
    const { store, logger } = this.#options;
    const cutoff = this.#now() - PRUNE_AFTER_PERIODS * this.#renewMs;
    try {
      const { resources } = await store.list(GLOBAL_INSTANCE_KIND, { signal });
      for (const r of resources) {
        if (r.meta.name === this.#options.instance) continue;
        if (renewedOf((r.spec as GlobalInstanceSpec).renewedAt) > cutoff) continue;
        try {
          await store.delete(GLOBAL_INSTANCE_KIND, "", r.meta.name, {
            expectedVersion: r.meta.version,
            signal,
          });
        } catch (error) {
          // Another instance pruned it first, or it announced again: either way it is not ours to delete now.
          if (!KdsError.is(error, "conflict")) throw error;
        }
      }
    } catch (error) {
      if (!signal.aborted)
        logger.warn("deleting the records of long-gone instances failed; a later period retries", {
          error,
        });
    }
  }

  /**
   * {@link announce}, a failure logged (once until an announcement lands
   * again) instead of thrown; skipped while the previous one is under way.
   */
  async #announceLogged(signal: AbortSignal): Promise<void> {
    if (this.#announcing) return;
    this.#announcing = true;
    try {
      await this.announce(signal);
      if (this.#announceFailing)
        this.#options.logger.info("announcing this instance in the store works again");
      this.#announceFailing = false;
    } catch (error) {
      if (signal.aborted || this.#announceFailing) return;
      this.#announceFailing = true;
      this.#options.logger.warn(
        `announcing this instance in the store failed; retrying every ${this.#renewMs} ms (after ${3 * this.#renewMs} ms without, the other instances read its zones as offline)`,
        { error },
      );
    } finally {
      this.#announcing = false;
    }
  }

  /**
   * Writes again the leases whose claim failed (their first write never
   * landed), at most {@link RENEW_BATCH} at a time; a failure is logged once
   * and left for the next period.
   */
  async #claimAgain(signal: AbortSignal): Promise<void> {
    const unclaimed = [...this.#held].filter(([, h]) => h.version === undefined && !h.claiming);
    if (unclaimed.length === 0) return;
    let failed = 0;
    let last: unknown;
    // At most RENEW_BATCH writes at a time: after a store outage thousands of claims may wait here.
    for (let i = 0; i < unclaimed.length && !signal.aborted; i += RENEW_BATCH)
      await Promise.all(
        unclaimed.slice(i, i + RENEW_BATCH).map(async ([zone, held]) => {
          if (this.#held.get(zone) !== held || held.version !== undefined) return; // released, lost or landed meanwhile
          try {
            await this.#claimWrite(zone, held, signal);
          } catch (error) {
            failed += 1;
            last = error;
          }
        }),
      );
    if (failed > 0 && !signal.aborted)
      this.#options.logger.warn(
        `recording that this instance holds ${failed} zones failed again; the next period retries`,
        { zones: failed, error: last },
      );
  }

  /**
   * Refreshes the leases `due` in one batch, each with the version this
   * instance last wrote; a conflict in it (a takeover) falls back to one
   * write each, closing the sessions of the zones taken over. Another failure
   * is logged and left for the next period.
   */
  async #refresh(due: readonly [string, Held][], signal: AbortSignal): Promise<void> {
    try {
      const writtenAt = this.#now();
      const { results } = await this.#options.store.apply(
        due.map(([zone, held]) => ({
          op: "put" as const,
          input: { kind: ZONE_INSIGHT_KIND, name: zone, spec: this.#insight(held, writtenAt) },
          expectedVersion: held.version,
        })),
        { signal },
      );
      due.forEach(([zone, held], i) => {
        const stored = results[i];
        if (this.#held.get(zone) === held && typeof stored === "object") {
          held.version = stored.meta.version;
          held.writtenAt = writtenAt;
        }
      });
      return;
    } catch (error) {
      if (signal.aborted) return;
      if (!KdsError.is(error, "conflict")) {
        this.#options.logger.warn(
          `refreshing ${due.length} zone leases failed; retrying at the next period`,
          { error },
        );
        return;
      }
    }
    for (const [zone, held] of due) {
      if (signal.aborted) return;
      if (this.#held.get(zone) !== held) continue; // released or lost meanwhile
      try {
        await this.#write(zone, held, held.version, signal);
      } catch (error) {
        if (KdsError.is(error, "conflict")) {
          // Another instance took the zone over; its change event closes our session too.
          this.#held.delete(zone);
          void held.session.close({
            code: "replaced",
            message: `zone "${zone}" is now held by another global instance`,
          });
          continue;
        }
        this.#options.logger.warn(
          `refreshing the lease of zone "${zone}" failed; retrying at the next period`,
          { zone, error },
        );
      }
    }
  }

  async #release(zone: string, held: Held, end: SessionEnd): Promise<void> {
    if (this.#held.get(zone) !== held) return;
    this.#held.delete(zone);
    if (held.version === undefined) return; // our claim never landed: there is nothing of ours to mark
    const insight = create(ZoneInsightSpecSchema, {
      instance: this.#options.instance,
      session: held.id,
      online: false,
      connectedAt: timestampFromDate(held.connectedAt),
      disconnectedAt: timestampFromDate(new Date(this.#now())),
      renewedAt: timestampFromDate(new Date(this.#now())),
      lastEndCode: end.code,
      lastEndMessage: end.message,
      heartbeatRttMs: held.session.stats().heartbeatRttMs ?? 0,
      ...agreed(held.session),
    });
    try {
      // Only if nobody took the lease since: a newer holder's record must stand.
      await this.#options.store.put(
        { kind: ZONE_INSIGHT_KIND, name: zone, spec: insight },
        { expectedVersion: held.version },
      );
    } catch (error) {
      if (KdsError.is(error, "conflict")) return;
      this.#releaseFailure = { zone, error };
      this.#releaseFailures.note();
    }
  }

  /**
   * Resolves once the offline records of the sessions that ended so far (and
   * of those that end meanwhile) are written or failed, or when `signal`
   * aborts first; with how many were still being written then. The
   * failures not yet logged are logged then. A stopping instance waits for
   * them before it closes its store.
   */
  async released(signal?: AbortSignal): Promise<number> {
    // Each round waits for the writes under way; writes of sessions that end meanwhile make another round.
    // Bounded: sessions end once each, and a stopping instance admits none.
    while (this.#releasing.size > 0 && !isAborted(signal)) {
      try {
        await raceAbort(Promise.all(this.#releasing), signal, "waiting for the offline records");
      } catch (error) {
        // The records never reject (failures are logged where they happen): only the caller's signal ends the wait.
        if (!isAborted(signal)) throw error;
      }
    }
    // What failed is said now: the burst's count would otherwise wait for a next failure that a stopping instance never has.
    this.#releaseFailures.flush();
    return this.#releasing.size;
  }

  async #write(
    zone: string,
    held: Held,
    expectedVersion: string | undefined,
    signal?: AbortSignal,
  ): Promise<void> {
    const writtenAt = this.#now();
    const stored = await this.#options.store.put(
      { kind: ZONE_INSIGHT_KIND, name: zone, spec: this.#insight(held, writtenAt) },
      { expectedVersion, signal },
    );
    if (this.#held.get(zone) === held) {
      held.version = stored.meta.version;
      held.writtenAt = writtenAt;
    }
  }

  /** The lease record of a live session, written at `at` (wall clock). */
  #insight(held: Held, at: number): ZoneInsightSpec {
    return create(ZoneInsightSpecSchema, {
      instance: this.#options.instance,
      session: held.id,
      online: true,
      connectedAt: timestampFromDate(held.connectedAt),
      renewedAt: timestampFromDate(new Date(at)),
      heartbeatRttMs: held.session.stats().heartbeatRttMs ?? 0,
      ...agreed(held.session),
    });
  }
}

/** What the session's hellos agreed on, as the lease records it (so every instance shows it). */
function agreed(session: Session): {
  softwareVersion: string;
  protocolVersion: number;
  features: string[];
} {
  const peer = session.peer;
  return {
    softwareVersion: peer?.softwareVersion ?? "",
    protocolVersion: peer?.protocolVersion ?? 0,
    features: [...(peer?.features ?? [])],
  };
}

/** When the session of a lease started (ms), when it says. */
function connectedOf(insight: ZoneInsightSpec): number | undefined {
  return insight.connectedAt === undefined
    ? undefined
    : timestampDate(insight.connectedAt).getTime();
}

/** Milliseconds of a record's `renewedAt` (0, long ago, when unset). */
function renewedOf(renewedAt: Timestamp | undefined): number {
  return renewedAt === undefined ? 0 : timestampDate(renewedAt).getTime();
}
