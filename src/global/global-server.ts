/**
 * The global role: admits a zone once its authenticator proves the name in
 * `client-id` (a zone token, or a client certificate) and the registry
 * knows it, runs one mux session per zone, replaces a zone's older session
 * when a newer one is ready, and ends sessions whose credentials are revoked.
 *
 * @module
 */
import type { Registry } from "@bufbuild/protobuf";
import type { PeerInfo } from "../auth/peer.ts";
import {
  zoneTokenCommand,
  type RevokedMatcher,
  type ZoneAuthenticator,
  type ZoneIdentity,
} from "../auth/zone-authenticator.ts";
import { KdsError } from "../errors.ts";
import type { Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import { consoleLogger, type Logger } from "../log.ts";
import { MemoryBudget } from "../mux/budget.ts";
import { resolveSessionOptions, type SessionOptions } from "../mux/options.ts";
import { MuxSession } from "../mux/session.ts";
import {
  WRITE_FRAMES,
  writesFrames,
  type FrameFlow,
  type FrameWriter,
  type WrittenFrames,
} from "../mux/frame-push.ts";
import type { SessionEnd } from "../mux/state.ts";
import type { Session } from "../mux/views.ts";
import type { MuxAcceptor } from "../transport/transport.ts";
import { noopMetrics, type AdmissionResult, type Metrics } from "../metrics.ts";
import type { Transport } from "@connectrpc/connect";
import { callEndpoint } from "../rpc/endpoint.ts";
import { reverseCallTransport, type ReverseCallTransportOptions } from "../rpc/transport.ts";
import { toConnectError } from "../connect-errors.ts";
import { disabledMessage, missingClientIdMessage, notRegisteredMessage } from "./registration.ts";
import type { ZoneRegistry } from "./zone-registry.ts";
import { describeAgreement } from "../mux/negotiation.ts";
import { CLIENT_ID_HEADER, ZONE_NAME_PATTERN } from "../names.ts";
import { muxJsonRegistry } from "../kinds/json-registry.ts";
import { BurstLog } from "../util/burst-log.ts";
import { RefusalLog } from "./refusal-log.ts";
import { raceAbort, sleep } from "../util/abort.ts";
import { AdmissionPacer, type AdmissionPacerOptions } from "./admission-pacer.ts";
import { CredentialExpiry } from "./credential-expiry.ts";
import type { Clock } from "../util/clock.ts";

/** The default of {@link GlobalServerOptions.maxHandshakes}. */
export const DEFAULT_MAX_HANDSHAKES = 512;

/** The default of {@link GlobalServerOptions.maxHandshakesPerZone}: a zone needs one; a few cover a reconnect racing a stale stream. */
export const DEFAULT_MAX_HANDSHAKES_PER_ZONE = 4;

/** The default of {@link DrainOptions.maxGapMs}: at least 4 zones a second. */
export const DEFAULT_DRAIN_MAX_GAP_MS = 250;

/** Options of {@link GlobalServer.drain}. */
export interface DrainOptions {
  /** Spread the zones' goaways over this many milliseconds (evenly, one zone at a time); 0 tells them all at once. */
  readonly spreadMs: number;
  /**
   * The longest wait between two zones' goaways, so a few zones are not
   * stretched over the whole spread (a global with two zones would take
   * half of it to stop). Default {@link DEFAULT_DRAIN_MAX_GAP_MS}.
   */
  readonly maxGapMs?: number;
  /** Stops spreading: the zones not yet told are all told at once, and the drain stops waiting for their sessions to release. */
  readonly signal?: AbortSignal;
}

/** Options of {@link GlobalServer}. */
export interface GlobalServerOptions {
  /** Which zones may connect. */
  registry: ZoneRegistry;
  /**
   * Proves each dialing zone's name before anything is looked up for it:
   * `TokenZoneAuthenticator` (zone tokens, optionally client certificates),
   * or `insecureZoneAuthenticator()` to trust `client-id` (development only;
   * the global logs a warning).
   */
  authenticator: ZoneAuthenticator;
  /** This global's name, sent in its hello and shown in messages. Default "global". */
  id?: string;
  /**
   * The global's admin API address, shown in the registration command told to
   * refused zones (a function when it is known only once the server listens).
   * Default "<global-admin-url>".
   */
  adminUrl?: string | (() => string);
  /** Tunables of every session (their byte windows are each session's ceiling on buffered inbound bytes; `handshakeTimeoutMs` bounds how long an admitted stream may stay silent before its hello). */
  session?: SessionOptions;
  /**
   * The ceiling on inbound bytes all sessions buffer together; when a frame
   * does not fit, the session holding the most ends with `resource_exhausted`.
   * Default: a budget of its own of 256 MiB.
   */
  memoryBudget?: MemoryBudget;
  /**
   * How many authenticated streams may be in admission or waiting for their
   * hello at once, all zones together. A stream beyond it is refused at once
   * with `overloaded` (Connect code resource_exhausted) and told when to
   * retry (see `admissionPacer`); the zone waits that long, or, when it
   * does not read the hint, retries with backoff. A stream counts from the moment its credentials are proven
   * (a stream that presents none, or a bad one, is refused without taking a
   * slot); sessions that finished their handshake are never counted nor
   * ended by it. Default {@link DEFAULT_MAX_HANDSHAKES}.
   */
  maxHandshakes?: number;
  /**
   * How many of those slots one zone identity may hold at once, so that a
   * peer with one zone's credentials that opens streams and never says hello
   * cannot fill `maxHandshakes` and lock every other zone out. A stream of a
   * zone already holding this many is refused at once with `overloaded`.
   * Default {@link DEFAULT_MAX_HANDSHAKES_PER_ZONE}.
   */
  maxHandshakesPerZone?: number;
  /**
   * How a stream refused for `maxHandshakes` is told when to come back (the
   * `kds-retry-after-ms` header of docs/protocol.md): from the rate at which
   * handshake slots freed up lately, each refused zone one slot after the
   * previous one, jittered within it. A refusal for `maxHandshakesPerZone`
   * carries no hint. Default: see {@link AdmissionPacerOptions}.
   */
  admissionPacer?: AdmissionPacerOptions;
  /** Called when a zone's session is ready (hellos exchanged). Errors are logged. */
  onSession?: (session: Session) => void | Promise<void>;
  /** Called when a zone's session ends. Errors are logged. */
  onSessionEnded?: (session: Session, end: SessionEnd) => void;
  /** Where to log. Default: warnings and errors to the console. */
  logger?: Logger;
  /** Where admissions and every session's frames are reported. Default: nowhere. */
  metrics?: Metrics;
  /**
   * The messages the `Any`s of frames may hold, for the Connect protocol's
   * JSON codec (see `muxJsonRegistry`). Default: the frame, discovery,
   * envelope and catalog messages only, so JSON clients can connect but no
   * kind's resource can be written as JSON; `GlobalControlPlane` passes one
   * with its kinds.
   */
  jsonRegistry?: Registry;
  /**
   * How long before a zone's credential (zone token, client certificate)
   * expires the global logs an error line about it. The session itself ends
   * at expiry (goaway TOKEN_EXPIRED). Default 24 hours.
   */
  tokenExpiryWarningMs?: number;
  /** Timers of credential expiry. Default: the system clock. */
  clock?: Clock;
  /** Wall clock in ms since the epoch, against which credentials expire. Default `Date.now`. */
  now?: () => number;
}

/** The global control plane's mux endpoint. Mount it with `registerGlobal` or `memoryMuxTransport`. */
export class GlobalServer implements MuxAcceptor {
  /** This global's name. */
  readonly id: string;
  /** The registry the JSON codec of its services uses (see {@link GlobalServerOptions.jsonRegistry}). */
  readonly jsonRegistry: Registry;
  readonly #options: GlobalServerOptions;
  readonly #maxMessageBytes: number;
  readonly #logger: Logger;
  readonly #metrics: Metrics;
  readonly #adminUrl: () => string;
  readonly #budget: MemoryBudget;
  /** The session each zone currently uses (the newest ready one). */
  readonly #current = new Map<string, MuxSession>();
  /** Every live session, including ones still handshaking or being replaced, with who it was proven to be. */
  readonly #live = new Map<MuxSession, ZoneIdentity>();
  #closing = false;
  #draining = false;
  readonly #maxHandshakes: number;
  readonly #maxHandshakesPerZone: number;
  /** Authenticated streams in admission or waiting for their hello. */
  #handshaking = 0;
  /** The same, per zone (a zone with none has no entry). */
  readonly #handshakingByZone = new Map<string, number>();
  readonly #overloadLog: BurstLog;
  readonly #zoneOverloadLog: BurstLog;
  /** Refusals for credentials, each reason logged once per burst (a flood of tokenless streams must not flood the log). */
  readonly #refusals: RefusalLog;
  readonly #helloTimeoutLog: BurstLog;
  /** Tells zones refused for `maxHandshakes` when to come back. */
  readonly #pacer: AdmissionPacer;
  /** Ends sessions whose credential expired; warns before. */
  readonly #expiry: CredentialExpiry;

  /** @param options - registry, names, callbacks */
  constructor(options: GlobalServerOptions) {
    this.#options = options;
    this.id = options.id ?? "global";
    this.jsonRegistry = options.jsonRegistry ?? muxJsonRegistry();
    this.#logger = options.logger ?? consoleLogger();
    this.#refusals = new RefusalLog(this.#logger);
    this.#metrics = options.metrics ?? noopMetrics;
    const adminUrl = options.adminUrl ?? "<global-admin-url>";
    this.#adminUrl = typeof adminUrl === "string" ? () => adminUrl : adminUrl;
    const session = resolveSessionOptions(options.session);
    this.#maxMessageBytes = session.maxMessageBytes;
    this.#budget = options.memoryBudget ?? new MemoryBudget();
    this.#maxHandshakes = options.maxHandshakes ?? DEFAULT_MAX_HANDSHAKES;
    if (!Number.isInteger(this.#maxHandshakes) || this.#maxHandshakes < 1) {
      throw new KdsError(
        "invalid_argument",
        `maxHandshakes must be a positive integer, got ${String(options.maxHandshakes)}`,
      );
    }
    this.#maxHandshakesPerZone =
      options.maxHandshakesPerZone ??
      Math.min(DEFAULT_MAX_HANDSHAKES_PER_ZONE, this.#maxHandshakes);
    if (!Number.isInteger(this.#maxHandshakesPerZone) || this.#maxHandshakesPerZone < 1) {
      throw new KdsError(
        "invalid_argument",
        `maxHandshakesPerZone must be a positive integer, got ${String(options.maxHandshakesPerZone)}`,
      );
    }
    this.#pacer = new AdmissionPacer(options.admissionPacer);
    this.#expiry = new CredentialExpiry({
      logger: this.#logger,
      metrics: this.#metrics,
      clock: options.clock,
      now: options.now,
      warnBeforeMs: options.tokenExpiryWarningMs,
      global: this.id,
      renewHint: (zone) => zoneTokenCommand(zone, this.#adminUrl()),
    });
    this.#overloadLog = new BurstLog((count, windowMs) =>
      this.#logger.warn(
        count === 1 && windowMs === 0
          ? `refusing zone streams: ${this.#maxHandshakes} streams are already in admission or waiting for their hello (maxHandshakes); further refusals are logged at most every 10 s and counted in kds_admissions_total{result="overloaded"}`
          : `refused ${count} more zone streams in the last ${Math.round(windowMs / 1000)} s: ${this.#maxHandshakes} streams were already in admission or waiting for their hello`,
        { limit: this.#maxHandshakes, refused: count },
      ),
    );
    this.#zoneOverloadLog = new BurstLog((count, windowMs) =>
      this.#logger.warn(
        count === 1 && windowMs === 0
          ? `refusing zone streams of one zone: it already has ${this.#maxHandshakesPerZone} streams in admission or waiting for their hello (maxHandshakesPerZone), so it cannot take other zones' slots; further refusals are logged at most every 10 s and counted in kds_admissions_total{result="overloaded"}`
          : `refused ${count} more streams in the last ${Math.round(windowMs / 1000)} s of zones that already had ${this.#maxHandshakesPerZone} streams in admission or waiting for their hello`,
        { limit: this.#maxHandshakesPerZone, refused: count },
      ),
    );
    this.#helloTimeoutLog = new BurstLog((count, windowMs) =>
      this.#logger.warn(
        count === 1 && windowMs === 0
          ? `ended a zone stream that sent no hello within ${session.handshakeTimeoutMs} ms (goaway PROTOCOL_ERROR, handshake_timeout); more are logged at most every 10 s`
          : `ended ${count} more zone streams that sent no hello within ${session.handshakeTimeoutMs} ms in the last ${Math.round(windowMs / 1000)} s`,
        { ended: count },
      ),
    );
    if (!options.authenticator.secure) {
      this.#logger.warn(
        `INSECURE: global "${this.id}" authenticates no zone (${options.authenticator.description}); anyone who can reach it can impersonate any zone, read every global resource and write zone resources. Use this for local development only.`,
      );
    }
  }

  /** The largest frame a zone may send, in bytes (configure the server's read limit with it). */
  get maxMessageBytes(): number {
    return this.#maxMessageBytes;
  }

  /** The ceiling on inbound bytes all sessions buffer together, and its figures. */
  get memoryBudget(): MemoryBudget {
    return this.#budget;
  }

  /** The current session of every connected zone. */
  sessions(): Session[] {
    return [...this.#current.values()];
  }

  /** The current session of zone `name`, if connected. */
  session(name: string): Session | undefined {
    return this.#current.get(name);
  }

  /** How zone `session` was proven to be who it is (undefined once it ended). */
  identity(session: Session): ZoneIdentity | undefined {
    return this.#live.get(session as MuxSession);
  }

  /** How many streams are in admission or waiting for their hello now (at most `maxHandshakes`). */
  get handshaking(): number {
    return this.#handshaking;
  }

  /**
   * When the credential of zone `name`'s session here expires (its zone
   * token's expiry, its client certificate's notAfter), and which it is;
   * undefined when it has no session here or its credential does not expire.
   */
  credentialExpiry(
    name: string,
  ): { readonly at: Date; readonly credential: "token" | "certificate" } | undefined {
    return this.#expiry.expiry(name);
  }

  /** How many authenticated streams of zone `name` are in admission or waiting for their hello now (at most `maxHandshakesPerZone`). */
  handshakingOf(name: string): number {
    return this.#handshakingByZone.get(name) ?? 0;
  }

  /**
   * Proves the caller named in `headers` (`client-id`) with the
   * authenticator, and nothing more: no registry lookup, no slot. Server
   * adapters call it on a request's headers, before reading its body, for
   * calls whose body they would otherwise read first (the half-duplex
   * service's). Throws `missing_client_id`, `invalid_argument`,
   * `unauthenticated` or `permission_denied`.
   */
  async authenticate(
    headers: Headers,
    signal: AbortSignal,
    peer?: PeerInfo,
  ): Promise<ZoneIdentity> {
    const zone = zoneName(headers);
    return this.#options.authenticator.authenticate({ zone, headers, peer }, signal);
  }

  async accept(
    headers: Headers,
    inbound: AsyncIterable<Frame>,
    signal: AbortSignal,
    peer?: PeerInfo,
  ): Promise<AsyncIterable<Frame>> {
    let slot: (() => void) | undefined;
    try {
      const identity = await this.#authenticate(headers, signal, peer);
      slot = this.#takeSlot(identity.zone);
      const { outbound, session } = await this.#admit(identity, inbound, signal);
      this.#metrics.admission("admitted");
      // The slot is held until the hello arrives or the session ends (the handshake timeout ends it).
      session.ready.then(slot, slot);
      return outbound;
    } catch (error) {
      slot?.();
      this.#metrics.admission(admissionResult(error));
      throw error;
    }
  }

  /** Checks `client-id` and proves it (see {@link authenticate}); a refusal is logged. */
  async #authenticate(
    headers: Headers,
    signal: AbortSignal,
    peer: PeerInfo | undefined,
  ): Promise<ZoneIdentity> {
    const zone = zoneName(headers);
    if (this.#closing)
      throw new KdsError(
        "session_closed",
        `global "${this.id}" is shutting down; the zone retries with backoff`,
      );
    // Prove the name before looking anything up for it: an unproven caller learns nothing about the zone.
    try {
      return await this.#options.authenticator.authenticate({ zone, headers, peer }, signal);
    } catch (error) {
      this.#refusals.note(zone, error);
      throw error;
    }
  }

  /**
   * Takes a handshake slot for a stream proven to be `zone`, or throws
   * `overloaded` when the zone already holds its share or the process
   * holds them all; returns the function that gives it back (once).
   */
  #takeSlot(zone: string): () => void {
    const held = this.#handshakingByZone.get(zone) ?? 0;
    if (held >= this.#maxHandshakesPerZone) {
      this.#zoneOverloadLog.note();
      throw new KdsError(
        "overloaded",
        `zone "${zone}" already has ${held} streams in admission or waiting for their hello on global "${this.id}"; the zone retries with backoff (a zone needs one; if this zone is not dialing that often, someone else holds its credentials: revoke them)`,
      );
    }
    if (this.#handshaking >= this.#maxHandshakes) {
      this.#overloadLog.note();
      const retryAfterMs = this.#pacer.retryAfterMs();
      throw new KdsError(
        "overloaded",
        `global "${this.id}" already has ${this.#maxHandshakes} streams in admission or waiting for their hello; the zone retries in ${retryAfterMs} ms (kds-retry-after-ms; a zone that does not read it retries with backoff; an operator may raise the global's \`maxHandshakes\` option, or lower its \`handshakeTimeoutMs\`)`,
        { retryAfterMs },
      );
    }
    this.#handshaking += 1;
    this.#handshakingByZone.set(zone, held + 1);
    let counted = true;
    return () => {
      if (!counted) return;
      counted = false;
      this.#pacer.freed();
      this.#handshaking -= 1;
      const left = (this.#handshakingByZone.get(zone) ?? 1) - 1;
      if (left > 0) this.#handshakingByZone.set(zone, left);
      else this.#handshakingByZone.delete(zone);
    };
  }

  async #admit(
    identity: ZoneIdentity,
    inbound: AsyncIterable<Frame>,
    signal: AbortSignal,
  ): Promise<{ outbound: AcceptedFrames; session: MuxSession }> {
    const zone = identity.zone;
    const record = await this.#options.registry.get(zone, signal);
    if (record === undefined) {
      this.#logger.warn(`refused zone "${zone}": not registered`, { zone });
      throw new KdsError(
        "zone_not_registered",
        notRegisteredMessage(zone, this.id, this.#adminUrl()),
      );
    }
    if (!record.enabled) {
      this.#logger.warn(`refused zone "${zone}": disabled`, { zone });
      throw new KdsError("zone_disabled", disabledMessage(zone, this.id, this.#adminUrl()));
    }

    const session = new MuxSession({
      role: "global",
      localId: this.id,
      peerId: zone,
      options: this.#options.session,
      metrics: this.#metrics,
      budget: this.#budget,
    });
    this.#live.set(session, identity);
    callEndpoint(session); // the global serves no calls: a zone's calls are refused
    const transport = new TransportWatch(session, zone, signal);
    session.attach(inbound);
    void this.#watch(session, zone, transport);
    const outbound = endsWithStatus(session.outbound, session);
    outbound[TRANSPORT_WATCH] = transport;
    return { outbound, session };
  }

  /**
   * A Connect transport to the services zone `name` serves, through reverse
   * calls inside its current session (the global never dials a zone). Each
   * call takes the zone's session at the time it starts, so it reaches that
   * zone and no other; a zone without a session fails the call with
   * `zone_offline` (Connect code unavailable).
   */
  zoneTransport(name: string, options: ReverseCallTransportOptions = {}): Transport {
    return reverseCallTransport(
      (request) => {
        const session = this.#current.get(name);
        if (session === undefined || session.end !== undefined) {
          return Promise.reject(
            toConnectError(
              new KdsError(
                "zone_offline",
                `zone "${name}" is offline: it has no session with global "${this.id}", and the global reaches a zone only through the zone's own session; check that the zone runs and reaches the global (kds-mux inspect zones)`,
              ),
            ),
          );
        }
        return callEndpoint(session).httpClient(request);
      },
      { maxMessageBytes: this.#maxMessageBytes, ...options },
    );
  }

  /** Ends every live session of zone `name` (goaway ZONE_REVOKED) because it was removed or disabled; true if it was connected. */
  async revoke(name: string, message?: string): Promise<boolean> {
    const sessions = [...this.#live.keys()].filter((s) => s.peerId === name);
    const text = message ?? `zone "${name}" was removed or disabled on global "${this.id}"`;
    await Promise.all(sessions.map((s) => s.close({ code: "zone_revoked", message: text })));
    return sessions.length > 0;
  }

  /**
   * Ends every live session whose identity `matches` (goaway ZONE_REVOKED
   * with `reason`); resolves with how many ended. A matcher that fails is
   * logged and ends nothing.
   */
  async endSessions(matches: RevokedMatcher, reason: string): Promise<number> {
    const ended: Promise<unknown>[] = [];
    for (const [session, identity] of [...this.#live]) {
      let match: boolean;
      try {
        match = await matches(identity);
      } catch (error) {
        this.#logger.error(
          `could not check whether zone "${identity.zone}"'s credentials were revoked; its session stays up`,
          { zone: identity.zone, error },
        );
        continue;
      }
      if (!match || session.end !== undefined) continue;
      this.#logger.warn(`ending zone "${identity.zone}"'s session: ${reason}`, {
        zone: identity.zone,
      });
      ended.push(
        session.close({
          code: "zone_revoked",
          message: `zone "${identity.zone}" was revoked on global "${this.id}": ${reason}`,
        }),
      );
    }
    await Promise.all(ended);
    return ended.length;
  }

  /**
   * Follows the authenticator's revocations (from every instance sharing
   * its store) until `signal` aborts, ending the affected sessions at once.
   */
  async followRevocations(signal: AbortSignal): Promise<void> {
    await this.#options.authenticator.follow?.(signal, (matches, reason) => {
      this.endSessions(matches, reason).catch((error: unknown) =>
        this.#logger.error("ending revoked sessions failed", { error }),
      );
    });
  }

  /** True once {@link drain} began: no zone is admitted any more. */
  get draining(): boolean {
    return this.#draining;
  }

  /**
   * Drains this instance before it stops: a zone that dials from now on is
   * sent on as soon as its handshake completes (goaway RECONNECT, as the zones
   * it holds are: for the zone a move, not a refusal; a rebalancing hint or a
   * retry may still name this instance for a moment), then asks each
   * connected zone to reconnect now, preferably to
   * another instance (goaway RECONNECT; the zone resumes there by versions),
   * one at a time, evenly spread over `spreadMs` but at most `maxGapMs`
   * apart (by the clock, so a slow loop does not stretch it), so the other
   * instances take them at a bounded rate. When `signal` aborts, the zones not yet asked are asked at once.
   * Sessions still handshaking at the end are asked too. Resolves, with how
   * many zones were asked, once every asked session released its transport
   * (or `signal` aborted).
   */
  async drain(options: DrainOptions): Promise<number> {
    this.#draining = true;
    const { signal } = options;
    const message = this.#drainMessage();
    const closing: Promise<unknown>[] = [];
    const ask = (session: MuxSession): void => {
      // No signal per close: the wait for them all races `signal` once below (a listener per
      // session on the one drain signal made Node warn of a leak past 10 zones).
      if (session.end === undefined) closing.push(session.close({ code: "reconnect", message }));
    };
    const sessions = [...this.#current.values()];
    const gapMs =
      sessions.length === 0
        ? 0
        : Math.min(
            options.maxGapMs ?? DEFAULT_DRAIN_MAX_GAP_MS,
            Math.max(0, options.spreadMs) / sessions.length,
          );
    this.#logger.info(
      `draining: asking ${sessions.length} zones to reconnect to another instance, one every ${Math.round(gapMs)} ms`,
      { zones: sessions.length },
    );
    const start = performance.now();
    for (const [i, session] of sessions.entries()) {
      const waitMs = start + i * gapMs - performance.now();
      if (waitMs > 0 && signal?.aborted !== true) {
        try {
          await sleep(waitMs, signal);
        } catch {
          // Rejects only once the signal aborted: the zones left are asked at once below.
        }
      }
      ask(session);
    }
    for (const session of [...this.#live.keys()]) ask(session);
    await raceAbort(
      Promise.all(closing),
      signal,
      "waiting for the drained sessions to release",
    ).catch(
      () => undefined, // rejects only when `signal` aborts: every session was asked and ended; only the wait stops
    );
    return closing.length;
  }

  #drainMessage(): string {
    return `global "${this.id}" is draining before it stops; reconnect now, to another instance if there is one (the state resumes by versions)`;
  }

  /** Ends every session with a goaway and refuses new ones; resolves when all transports are released. */
  async close(signal?: AbortSignal): Promise<void> {
    this.#closing = true;
    await Promise.all(
      [...this.#live.keys()].map((s) =>
        s.close({
          code: "shutdown",
          message: `global "${this.id}" is shutting down; the zone reconnects with backoff`,
          signal,
        }),
      ),
    );
  }

  async #watch(session: MuxSession, zone: string, transport: TransportWatch): Promise<void> {
    let ready = false;
    try {
      await session.ready;
      ready = true;
    } catch {
      // Ended during the handshake; reported below.
    }
    if (ready) {
      // A revocation that landed while this zone was being admitted: the feed may have passed before the session was live.
      const identity = this.#live.get(session);
      try {
        if (identity !== undefined) await this.#options.authenticator.revalidate?.(identity);
      } catch (error) {
        if (KdsError.is(error, "unauthenticated")) {
          ready = false;
          this.#logger.warn(
            `zone "${zone}"'s credentials were revoked during admission: ${error.message}`,
            { zone },
          );
          await session.close({
            code: "zone_revoked",
            message: `zone "${zone}" was revoked on global "${this.id}": ${error.message}`,
          });
        } else {
          // Admission just verified the credential; a store that cannot answer now does not revoke it.
          this.#logger.warn(
            `could not re-check zone "${zone}"'s credentials after admission; the session stays up`,
            { zone, error },
          );
        }
      }
    }
    if (ready && this.#draining) {
      // Dialed while this instance drains: sent on at once, like the zones it held, rather than refused.
      ready = false;
      this.#logger.info(
        `zone "${zone}" dialed while this instance drains; asked to reconnect to another instance`,
        { zone },
      );
      await session.close({ code: "reconnect", message: this.#drainMessage() });
    }
    if (ready) {
      const previous = this.#current.get(zone);
      this.#current.set(zone, session);
      if (previous !== undefined) {
        this.#logger.info(`zone "${zone}" reconnected; replacing its older session`, { zone });
        void previous.close({
          code: "replaced",
          message: `a newer session of zone "${zone}" replaced this one on global "${this.id}"`,
        });
      }
      const proof = this.#live.get(session);
      if (proof !== undefined) this.#expiry.track(session, proof);
      this.#logger.info(
        `zone "${zone}" connected (${proof?.proof === "token" ? `zone token ${proof.tokenId ?? ""}` : proof?.proof === "certificate" ? `client certificate sha256:${proof.certificate ?? "?"} serial:${proof.certificateSerial ?? "?"}` : "NOT authenticated"}; ${session.peer === undefined ? "" : describeAgreement(session.peer)})`,
        { zone },
      );
      try {
        await this.#options.onSession?.(session);
      } catch (error) {
        this.#logger.error(`onSession failed for zone "${zone}"`, { zone, error });
      }
    }
    // Not awaited here: a suspended frame of this function would live as long as the session, in every idle zone's.
    // Nor returned: this function's own promise would adopt the chain, with more promise machinery per idle zone.
    void session.closed.then((end) => {
      // The session's end stops the listening on the transport's signal, which may outlive it.
      transport.detach();
      return this.#ended(session, zone, ready, end);
    });
  }

  /** Forgets, logs and reports the end of `session` of `zone` (`ready`: it was admitted), then waits for its release. */
  async #ended(session: MuxSession, zone: string, ready: boolean, end: SessionEnd): Promise<void> {
    this.#expiry.untrack(session);
    if (this.#current.get(zone) === session) this.#current.delete(zone);
    // A flood of streams that never say hello is logged once per burst, not once per stream.
    if (!ready && end.code === "handshake_timeout") this.#helloTimeoutLog.note();
    else {
      // A peer that broke the protocol or the memory budget is worth an operator's attention.
      const log =
        end.code === "protocol_error" || end.code === "resource_exhausted"
          ? this.#logger.warn
          : this.#logger.info;
      log.call(this.#logger, `zone "${zone}" session ended (${end.code}): ${end.message}`, {
        zone,
        code: end.code,
      });
    }
    if (ready) {
      try {
        this.#options.onSessionEnded?.(session, end);
      } catch (error) {
        this.#logger.error(`onSessionEnded failed for zone "${zone}"`, { zone, error });
      }
    }
    await session.released;
    this.#live.delete(session);
  }
}

/**
 * Ends an admitted session with `transport` when its transport goes: it
 * listens to the signal given to {@link GlobalServer.accept} until the
 * session ends. An object with `handleEvent`, not a closure with the
 * listener's `signal` option: every idle zone's session holds one, and the
 * option costs a weak listener on the session's signal besides. A transport
 * that sees its stream close itself (the node mux stream) takes it from the
 * frames `accept` returns ({@link TRANSPORT_WATCH}), calls {@link detach}
 * and then {@link gone} on the close, so it need not keep an AbortSignal per
 * stream for the session's whole life.
 */
export class TransportWatch {
  readonly #session: MuxSession;
  readonly #zone: string;
  /** The signal listened to; undefined once it fired or was let go. */
  #signal: AbortSignal | undefined;

  /**
   * @param session - the admitted session
   * @param zone - its zone, for the end's message
   * @param signal - the transport's signal (aborted already: the session ends at once)
   */
  constructor(session: MuxSession, zone: string, signal: AbortSignal) {
    this.#session = session;
    this.#zone = zone;
    if (signal.aborted) this.gone(signal.reason);
    else {
      this.#signal = signal;
      signal.addEventListener("abort", this, { once: true });
    }
  }

  /** The signal's abort: the transport went. */
  handleEvent(): void {
    const signal = this.#signal;
    this.#signal = undefined; // a once listener: it is gone now
    this.gone(signal?.reason);
  }

  /** Ends the session because its transport went (the zone cancelled the stream or the connection was lost), for `reason`. */
  gone(reason: unknown): void {
    this.#session.fail(
      "transport",
      `zone "${this.#zone}" cancelled the stream or the connection was lost`,
      reason,
    );
  }

  /** Stops listening to the signal (the session ended, or the transport reports the close through {@link gone}). */
  detach(): void {
    this.#signal?.removeEventListener("abort", this);
    this.#signal = undefined;
  }
}

/**
 * Where the frames {@link GlobalServer.accept} returns carry their
 * session's {@link TransportWatch}. Not public: the node mux stream reads it.
 */
export const TRANSPORT_WATCH: unique symbol = Symbol("kds-mux.transportWatch");

/** The frames {@link GlobalServer.accept} returns, with what a transport of this package may use of them. */
export type AcceptedFrames = AsyncIterable<Frame> &
  Partial<WrittenFrames> & { [TRANSPORT_WATCH]?: TransportWatch };

/**
 * The global's frames of `session`, then, once its goaway is written, the
 * session's end as an error when the global ended it for a failure or a
 * revocation (see {@link sessionEndError}), so the stream ends with a
 * matching non-OK status rather than OK. A plain iterator over the
 * session's, not an async generator: each frame to each zone passes
 * through it with one step, not a generator's several.
 */
function endsWithStatus(frames: AsyncIterable<Frame>, session: MuxSession): AcceptedFrames {
  // Pushed to a writer (frame-push.ts) when the session's frames can be: no promise per frame either.
  return writesFrames(frames)
    ? new PushedStatusFrames(frames, session)
    : new StatusFrames(frames, session);
}

/** The error the frames of `session` end with: its end, when it was a failure or a revocation. */
function endError(session: MuxSession): Error | undefined {
  return session.end === undefined ? undefined : sessionEndError(session.end);
}

/**
 * What {@link endsWithStatus} returns: objects with prototype methods, not
 * literals of closures, as every idle zone's stream holds its own for the
 * session's life.
 */
class StatusFrames implements AcceptedFrames {
  /** The session's {@link TransportWatch} (set by the admission). */
  [TRANSPORT_WATCH]: TransportWatch | undefined;
  protected readonly frames: AsyncIterable<Frame>;
  protected readonly session: MuxSession;

  constructor(frames: AsyncIterable<Frame>, session: MuxSession) {
    this.frames = frames;
    this.session = session;
  }

  [Symbol.asyncIterator](): AsyncIterator<Frame> {
    const inner = this.frames[Symbol.asyncIterator]();
    const session = this.session;
    const last = (r: IteratorResult<Frame>): IteratorResult<Frame> => {
      if (r.done !== true) return r;
      const error = endError(session);
      if (error !== undefined) throw error;
      return r;
    };
    return {
      next: () => inner.next().then(last),
      return: () => inner.return?.() ?? Promise.resolve({ done: true, value: undefined }),
      throw: (error: unknown) => inner.throw?.(error) ?? Promise.reject(error),
    };
  }
}

/** {@link StatusFrames} of a session whose frames can be pushed to a writer. */
class PushedStatusFrames extends StatusFrames implements WrittenFrames {
  [WRITE_FRAMES](writer: FrameWriter): FrameFlow {
    return (this.frames as AsyncIterable<Frame> & WrittenFrames)[WRITE_FRAMES](
      new StatusWriter(writer, this.session),
    );
  }
}

/** Passes the session's pushed frames on to `writer`, and their end as the session's status (see {@link endsWithStatus}). */
class StatusWriter implements FrameWriter {
  readonly #writer: FrameWriter;
  readonly #session: MuxSession;

  constructor(writer: FrameWriter, session: MuxSession) {
    this.#writer = writer;
    this.#session = session;
  }

  frame(frame: Frame): boolean {
    return this.#writer.frame(frame);
  }

  end(): void {
    const error = endError(this.#session);
    if (error === undefined) this.#writer.end();
    else this.#writer.fail(error);
  }

  fail(error: unknown): void {
    this.#writer.fail(error);
  }
}

const failureCodes = new Set([
  "protocol_error",
  "resource_exhausted",
  "heartbeat_timeout",
  "send_timeout",
  "handshake_timeout",
  "zone_revoked",
  "token_expired",
] as const);

/**
 * The error a stream ends with after the goaway of a session that ended with
 * `end`, or undefined for an OK status. Only ends this side decided for a
 * failure or a revocation carry one: `protocol_error` (`unknown_type` when
 * the peer asked for a type this side does not serve), `resource_exhausted`, `heartbeat_timeout`,
 * `send_timeout`, `handshake_timeout`, `zone_revoked` and `token_expired`. A shutdown, a
 * replacement, and every end the peer decided (its goaway, its EOF, a lost
 * connection) end the stream with OK, or not at all when it is gone. The
 * Connect/gRPC code of each is in `connect-errors.ts` and docs/protocol.md.
 */
export function sessionEndError(end: SessionEnd): KdsError | undefined {
  if (end.initiator !== "local") return undefined;
  const code = end.code;
  if (!(failureCodes as ReadonlySet<string>).has(code)) return undefined;
  const precise =
    code === "protocol_error" && KdsError.is(end.cause, "unknown_type")
      ? "unknown_type"
      : (code as KdsError["code"]);
  return new KdsError(precise, `the global ended the session (${code}): ${end.message}`, {
    cause: end,
  });
}

/** The zone a request names in `client-id`, checked to be a valid zone name. */
function zoneName(headers: Headers): string {
  const zone = headers.get(CLIENT_ID_HEADER)?.trim() ?? "";
  if (zone === "") throw new KdsError("missing_client_id", missingClientIdMessage());
  if (!ZONE_NAME_PATTERN.test(zone)) {
    throw new KdsError(
      "invalid_argument",
      `the client-id header "${zone}" is not a valid zone name (1 to 63 lower-case letters, digits and '-')`,
    );
  }
  return zone;
}

/** The admission result a refusal counts as. */
function admissionResult(error: unknown): AdmissionResult {
  if (!(error instanceof KdsError)) return "error";
  switch (error.code) {
    case "missing_client_id":
      return "missing_client_id";
    case "invalid_argument":
      return "invalid_client_id";
    case "unauthenticated":
      return "unauthenticated";
    case "permission_denied":
      return "permission_denied";
    case "zone_not_registered":
      return "not_registered";
    case "zone_disabled":
      return "disabled";
    case "session_closed":
      return "shutting_down";
    case "overloaded":
      return "overloaded";
    default:
      return "error";
  }
}
