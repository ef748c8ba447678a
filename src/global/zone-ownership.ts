/**
 * Which global instance holds a zone's session, when several instances share
 * one store. The instance that admits the newest session writes the zone's
 * ZoneInsight (the lease) unconditionally; every instance follows those
 * writes and closes its own older session of that zone (a write for a
 * session that started before its own, a late renewal, is taken over
 * instead); the holder renews the
 * lease while its session lives (with the version it last wrote, so a
 * takeover shows up as a conflict), and marks it offline when the session
 * ends. A crashed instance stops renewing: its zones reconnect elsewhere and
 * take the lease, and until then its entries go stale and read as offline.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { KdsError } from "../errors.ts";
import { ZoneInsightSpecSchema, type ZoneInsightSpec } from "../gen/kds/v1/resource_pb.ts";
import type { Logger } from "../log.ts";
import type { SessionEnd } from "../mux/state.ts";
import type { Session } from "../mux/views.ts";
import type { ResourceStore } from "../store/contract.ts";
import { ZONE_INSIGHT_KIND } from "../kinds/builtin-types.ts";
import { followStore } from "../store/follow.ts";
import type { BackoffOptions } from "../util/backoff.ts";
import { sleep } from "../util/abort.ts";

/**
 * Most leases renewed in one store batch. A renewal writes its leases in
 * batches of this many and lets the event loop run between them: a thousand
 * leases in one batch held the loop for tens of milliseconds, which every
 * change fanning out at that moment waited for.
 */
export const RENEW_BATCH = 100;

/** Options of {@link ZoneOwnership}. */
export interface ZoneOwnershipOptions {
  /** The shared store. */
  readonly store: ResourceStore;
  /** This instance's id (unique among the instances sharing the store). */
  readonly instance: string;
  /** How often the holder renews its leases (in batches of `RENEW_BATCH`, 100). Default 10 s; a lease not renewed for 3 periods reads as offline. */
  readonly renewMs?: number;
  /** Delays between retries of a failed store read. */
  readonly retry?: BackoffOptions;
  /** Wall clock. Default `Date.now`. */
  readonly now?: () => number;
  /** Where to log. */
  readonly logger: Logger;
}

interface Held {
  readonly session: Session;
  readonly id: string;
  readonly connectedAt: Date;
  /** Version of the lease this instance last wrote; undefined until the first write landed. */
  version: string | undefined;
  /** A claim by another session seen before our first write landed: decided once it has. */
  other: { readonly revision: number; readonly instance: string } | undefined;
  /** The first write (the claim, or its retry at a renewal) is under way. */
  claiming: boolean;
}

/** What the store says about a zone's session, as any instance sees it. */
export interface ZoneLease {
  /** The instance holding it. */
  readonly instance: string;
  /** Online: the holder says so and renewed it recently. */
  readonly online: boolean;
  /** The raw record. */
  readonly insight: ZoneInsightSpec;
}

/** Ownership leases of zone sessions, shared through the store. */
export class ZoneOwnership {
  readonly #options: ZoneOwnershipOptions;
  readonly #renewMs: number;
  readonly #now: () => number;
  readonly #held = new Map<string, Held>();
  /** A renewal is under way (a slow store can make one outlast the period: the next is skipped, not stacked). */
  #renewing = false;

  /** @param options - store, instance id */
  constructor(options: ZoneOwnershipOptions) {
    this.#options = options;
    this.#renewMs = options.renewMs ?? 10_000;
    this.#now = options.now ?? Date.now;
  }

  /** This instance's id. */
  get instance(): string {
    return this.#options.instance;
  }

  /**
   * Follows other instances' claims and renews this instance's leases until
   * `signal` aborts.
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
      begin: () => store.revision({ signal }),
      onChange: (change) => {
        if (change.op === "put")
          this.#claimed(
            change.resource.meta.name,
            change.resource.spec as ZoneInsightSpec,
            change.resource.meta.version,
          );
      },
    });
    const timer = setInterval(() => void this.#renewAll(signal), this.#renewMs);
    signal.addEventListener("abort", () => clearInterval(timer), { once: true });
  }

  /** Claims zone `zone` for `session` (the newest session wins); renews it until the session ends. */
  async claim(session: Session, signal?: AbortSignal): Promise<void> {
    const zone = session.peerId;
    const held: Held = {
      session,
      id: crypto.randomUUID(),
      connectedAt: new Date(this.#now()),
      version: undefined,
      other: undefined,
      claiming: true,
    };
    this.#held.set(zone, held);
    void session.closed.then((end) => this.#release(zone, held, end));
    try {
      await this.#write(zone, held, undefined, signal);
    } finally {
      held.claiming = false;
    }
    const other = held.other;
    if (other !== undefined && held.version !== undefined && other.revision > Number(held.version))
      this.#lost(zone, held, other.instance);
  }

  /** Every zone's lease as the store has it (from any instance), by zone name. */
  async leases(signal?: AbortSignal): Promise<Map<string, ZoneLease>> {
    const { resources } = await this.#options.store.list(ZONE_INSIGHT_KIND, { signal });
    const out = new Map<string, ZoneLease>();
    for (const r of resources) {
      const insight = r.spec as ZoneInsightSpec;
      const renewed =
        insight.renewedAt === undefined ? 0 : timestampDate(insight.renewedAt).getTime();
      out.set(r.meta.name, {
        instance: insight.instance,
        online: insight.online && this.#now() - renewed < 3 * this.#renewMs,
        insight,
      });
    }
    return out;
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
    // A write for a session that started before ours (another instance's renewal that was under way when that session ended) must not
    // end ours: a zone holds one session at a time, and ours is the newer one. Take that write's version, so our next renewal replaces it.
    const theirs =
      insight.connectedAt === undefined ? undefined : timestampDate(insight.connectedAt).getTime();
    if (theirs !== undefined && theirs < held.connectedAt.getTime()) {
      if (held.version !== undefined && revision > Number(held.version)) held.version = version;
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

  async #renewAll(signal: AbortSignal): Promise<void> {
    if (this.#renewing) return;
    this.#renewing = true;
    try {
      await this.#claimAgain(signal);
      const zones = [...this.#held.keys()];
      for (let i = 0; i < zones.length && !signal.aborted; i += RENEW_BATCH) {
        if (i > 0) {
          try {
            await sleep(0, signal); // let the loop run between batches
          } catch {
            return; // rejects only once the signal aborted: the renewals stop with the instance
          }
        }
        // Leases released or lost while earlier batches were written are left alone.
        const due: [string, Held][] = [];
        for (const zone of zones.slice(i, i + RENEW_BATCH)) {
          const held = this.#held.get(zone);
          if (held?.version !== undefined) due.push([zone, held]);
        }
        if (due.length > 0 && !(await this.#renew(due, zones.length - i, signal))) return;
      }
    } finally {
      this.#renewing = false;
    }
  }

  /**
   * Writes again the leases whose claim failed (their first write never
   * landed, so there is nothing to renew yet); a failure is logged once and
   * left for the next renewal.
   */
  async #claimAgain(signal: AbortSignal): Promise<void> {
    const unclaimed = [...this.#held].filter(([, h]) => h.version === undefined && !h.claiming);
    if (unclaimed.length === 0) return;
    let failed = 0;
    let last: unknown;
    await Promise.all(
      unclaimed.map(async ([zone, held]) => {
        held.claiming = true;
        try {
          await this.#write(zone, held, undefined, signal);
        } catch (error) {
          failed += 1;
          last = error;
        } finally {
          held.claiming = false;
        }
      }),
    );
    if (failed > 0 && !signal.aborted)
      this.#options.logger.warn(
        `recording that this instance holds ${failed} zones failed again; the next renewal retries`,
        { zones: failed, error: last },
      );
  }

  /**
   * Renews the leases `due` in one batch; a conflict in it (a takeover) falls
   * back to one write each. Returns false when the store failed otherwise
   * (logged once for the `left` leases not renewed; the next renewal retries)
   * or the signal aborted: the renewal stops there.
   */
  async #renew(
    due: readonly [string, Held][],
    left: number,
    signal: AbortSignal,
  ): Promise<boolean> {
    try {
      const { results } = await this.#options.store.apply(
        due.map(([zone, held]) => ({
          op: "put" as const,
          input: { kind: ZONE_INSIGHT_KIND, name: zone, spec: this.#insight(held) },
          expectedVersion: held.version,
        })),
        { signal },
      );
      due.forEach(([zone, held], i) => {
        const stored = results[i];
        if (this.#held.get(zone) === held && typeof stored === "object")
          held.version = stored.meta.version;
      });
      return true;
    } catch (error) {
      if (signal.aborted) return false;
      if (!KdsError.is(error, "conflict")) {
        this.#options.logger.warn(
          `renewing ${left} zone leases failed; retrying at the next renewal`,
          { error },
        );
        return false;
      }
    }
    for (const [zone, held] of due) {
      if (signal.aborted) return false;
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
          `renewing the lease of zone "${zone}" failed; retrying at the next renewal`,
          { zone, error },
        );
      }
    }
    return true;
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
      this.#options.logger.warn(`recording that zone "${zone}" went offline failed`, {
        zone,
        error,
      });
    }
  }

  async #write(
    zone: string,
    held: Held,
    expectedVersion: string | undefined,
    signal?: AbortSignal,
  ): Promise<void> {
    const stored = await this.#options.store.put(
      { kind: ZONE_INSIGHT_KIND, name: zone, spec: this.#insight(held) },
      { expectedVersion, signal },
    );
    if (this.#held.get(zone) === held) held.version = stored.meta.version;
  }

  /** The lease record of a live session. */
  #insight(held: Held): ZoneInsightSpec {
    return create(ZoneInsightSpecSchema, {
      instance: this.#options.instance,
      session: held.id,
      online: true,
      connectedAt: timestampFromDate(held.connectedAt),
      renewedAt: timestampFromDate(new Date(this.#now())),
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
