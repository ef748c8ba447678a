/**
 * The zone role: dials the global, hands each new session to the caller, and
 * reconnects after any end with exponential backoff and full jitter; when the
 * global asks it to reconnect (goaway RECONNECT: a drain or a rebalance), at
 * once, after a small jitter only, and without counting it as a failure.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import { CLIENT_ID_HEADER, assertZoneName } from "../names.ts";
import { consoleLogger, type Logger } from "../log.ts";
import { resolveSessionOptions, type SessionOptions } from "../mux/options.ts";
import { MuxSession } from "../mux/session.ts";
import { describeAgreement } from "../mux/negotiation.ts";
import type { Session } from "../mux/views.ts";
import { anySignal, childSignal, sleep } from "../util/abort.ts";
import type { MuxTransport } from "../transport/transport.ts";
import type { Metrics } from "../metrics.ts";
import { createConnectRouter, type ConnectRouter } from "@connectrpc/connect";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import { callEndpoint, type CallEndpointOptions } from "../rpc/endpoint.ts";
import {
  backoffCeiling,
  fullJitter,
  resolveBackoff,
  type BackoffOptions,
  type ResolvedBackoff,
} from "../util/backoff.ts";

/**
 * After a healthy session, the highest backoff ceiling while the global's
 * address refuses connections (nothing listens there: it is restarting), so
 * every zone dials within this long of the global listening again; the
 * global then admits them at its pace, telling the ones it refuses when to
 * come back. A refusal costs the global nothing, so this does not weaken the
 * backoff against a global that is up but overloaded.
 */
export const REFUSED_CEILING_MS = 5_000;

/** The default of {@link ZoneClientOptions.reconnectJitterMs}. */
export const DEFAULT_RECONNECT_JITTER_MS = 1_000;

/** What the zone reports before each retry. */
export interface RetryInfo {
  /** Retry number since the last healthy session, from 0. */
  readonly attempt: number;
  /** How long the zone waits before dialing again. */
  readonly delayMs: number;
  /** The ceiling the delay was drawn from (grows with attempts up to the cap). */
  readonly ceilingMs: number;
  /** When the next dial happens (wall clock). */
  readonly nextAttemptAt: Date;
  /** Why the zone retries: the dial error, or `session_closed` with the end as cause. */
  readonly error: KdsError;
  /** True when the global asked the zone to reconnect (goaway RECONNECT): not a failure, and the backoff was not used. */
  readonly asked: boolean;
  /**
   * True when the global refused the zone as `overloaded` and said when to
   * come back (`kds-retry-after-ms`): the delay is the global's (at most the
   * backoff's cap), and the backoff did not grow.
   */
  readonly told: boolean;
}

/** Options of {@link ZoneClient}. */
export interface ZoneClientOptions {
  /** The zone's name, sent in `client-id`. */
  name: string;
  /** How to reach the global. */
  transport: MuxTransport;
  /**
   * The zone token that proves this zone's name to the global, sent as
   * `authorization: Bearer <token>` on every dial; a function is called
   * before each dial (for example to re-read a token file). Omit it when the
   * zone proves itself with a client certificate, or the global runs
   * without zone authentication.
   */
  token?: string | (() => string | Promise<string>);
  /** Called with every new session once it is ready. Errors are logged. */
  onSession?: (session: Session) => void | Promise<void>;
  /** Called before every retry (the default logger also logs it). */
  onRetry?: (info: RetryInfo) => void;
  /** Tunables of every session. */
  session?: SessionOptions;
  /** Reconnect backoff; see {@link BackoffOptions}. */
  backoff?: BackoffOptions;
  /**
   * The most a zone waits (uniformly at random from 0) before it dials again
   * after the global asked it to reconnect (goaway RECONNECT), instead of its
   * backoff. Default {@link DEFAULT_RECONNECT_JITTER_MS}.
   */
  reconnectJitterMs?: number;
  /** Where to log. Default: warnings and errors to the console. */
  logger?: Logger;
  /** Random source in [0, 1) for the jitter. Default `Math.random`. */
  random?: () => number;
  /** Where every session's frames, credit waits, open and end are reported. Default: nowhere. */
  metrics?: Metrics;
  /**
   * Connect services the global may call inside the session (reverse
   * calls), for example the zone's admin API. Default: none (calls are refused).
   */
  reverseCalls?: (router: ConnectRouter) => void;
  /** Bounds of reverse calls. */
  reverseCallOptions?: CallEndpointOptions;
  /**
   * Asked right before every dial, synchronously: false means this process
   * may not dial now (a zone replica that does not lead), and the dial fails
   * with `not_leader` (`run` then returns). Default: always true.
   */
  mayDial?: () => boolean;
}

/** The zone control plane's side of the mux. */
export class ZoneClient {
  /** The zone's name. */
  readonly name: string;
  readonly #options: ZoneClientOptions;
  readonly #backoff: ResolvedBackoff;
  readonly #reconnectJitterMs: number;
  readonly #logger: Logger;
  #current: MuxSession | undefined;
  #callHandlers: readonly UniversalHandler[] | undefined;

  /** @param options - name, transport, callbacks */
  constructor(options: ZoneClientOptions) {
    assertZoneName(options.name);
    resolveSessionOptions(options.session);
    this.name = options.name;
    this.#options = options;
    this.#backoff = resolveBackoff(options.backoff);
    const jitter = options.reconnectJitterMs ?? DEFAULT_RECONNECT_JITTER_MS;
    if (!Number.isFinite(jitter) || jitter < 0)
      throw new KdsError(
        "invalid_argument",
        `reconnectJitterMs must be a non-negative number of milliseconds, got ${String(options.reconnectJitterMs)}`,
      );
    this.#reconnectJitterMs = jitter;
    this.#logger = options.logger ?? consoleLogger();
  }

  /** The services reverse calls reach, built at the first dial (the routes may refer to the object that owns this client). */
  #reverseCallHandlers(): readonly UniversalHandler[] {
    if (this.#callHandlers === undefined) {
      const router = createConnectRouter();
      this.#options.reverseCalls?.(router);
      this.#callHandlers = router.handlers;
    }
    return this.#callHandlers;
  }

  /** The current session, if one is open. */
  get session(): Session | undefined {
    return this.#current?.end === undefined ? this.#current : undefined;
  }

  /**
   * Dials once. Resolves with the session once both hellos are exchanged;
   * rejects with a `KdsError`: `unauthenticated` / `permission_denied` (no
   * valid token for this zone; the message says how to create one),
   * `zone_not_registered` / `zone_disabled` (the message says how to
   * register), `missing_client_id`, `transport`
   * (unreachable), `session_closed`, or `aborted`. Aborting `signal` later
   * closes the session with a goaway.
   */
  async dial(signal?: AbortSignal): Promise<Session> {
    const session = new MuxSession({
      role: "zone",
      localId: this.name,
      options: this.#options.session,
      signal,
      metrics: this.#options.metrics,
    });
    callEndpoint(session, this.#reverseCallHandlers(), this.#options.reverseCallOptions);
    // `signal` cuts the transport only while dialing (a dial that hangs ends at once); once the session is ready, aborting it closes the
    // session with a goaway that must reach the global (so it records a clean stop, not a lost connection), and the session lets the
    // transport go after the global answered or `closeGraceMs`.
    const dialing = new AbortController();
    const stopDialing = (): void => dialing.abort(signal?.reason);
    if (signal?.aborted === true) stopDialing();
    else signal?.addEventListener("abort", stopDialing, { once: true });
    const transportSignal =
      signal === undefined
        ? session.transportSignal
        : anySignal([session.transportSignal, dialing.signal]);
    try {
      await this.#open(session, transportSignal);
      try {
        await session.ready;
      } catch (error) {
        // The session ended before the hello: surface the most specific reason.
        const cause = session.end?.cause;
        throw cause instanceof KdsError ? cause : error;
      }
    } finally {
      // Also after a failed open: a zone that keeps failing to dial (its global down) left one listener on its signal per dial.
      signal?.removeEventListener("abort", stopDialing);
    }
    this.#current = session;
    return session;
  }

  /** Opens the transport for `session` (its credentials read now); a failure fails the session and is thrown. */
  async #open(session: MuxSession, transportSignal: AbortSignal): Promise<void> {
    try {
      const headers = new Headers({ [CLIENT_ID_HEADER]: this.name });
      const token =
        typeof this.#options.token === "function"
          ? await this.#options.token()
          : this.#options.token;
      if (token !== undefined) headers.set("authorization", `Bearer ${token.trim()}`);
      // Asked after every await of this dial, right before the connection opens.
      if (this.#options.mayDial?.() === false)
        throw new KdsError(
          "not_leader",
          `zone "${this.name}" does not dial: this replica does not lead (another replica of the zone does)`,
        );
      const inbound = await this.#options.transport.open({
        headers,
        outbound: session.outbound,
        signal: transportSignal,
      });
      session.attach(inbound);
    } catch (error) {
      const kdsError =
        error instanceof KdsError
          ? error
          : new KdsError("transport", `dialing the global failed: ${String(error)}`, {
              cause: error,
            });
      session.fail("transport", kdsError.message, kdsError);
      throw kdsError;
    }
  }

  /**
   * Keeps the zone connected until `signal` aborts: dial, hand the session to
   * `onSession`, wait for its end, back off, dial again. Resolves after
   * `signal` aborts and the last session has been closed with a goaway.
   */
  async run(signal: AbortSignal): Promise<void> {
    // Every dial and backoff sleep listens on the zone's own signal, not on `signal`, which a process may share among thousands of zones.
    const own = childSignal(signal);
    try {
      await this.#run(own.signal);
    } finally {
      own.release();
    }
  }

  async #run(signal: AbortSignal): Promise<void> {
    let attempt = 0;
    /** When the last healthy session (one that lasted `resetAfterMs`) ended. */
    let healthyEndedAt: number | undefined;
    const random = this.#options.random ?? Math.random;
    while (!signal.aborted) {
      let error: KdsError;
      let upMs = 0;
      let asked = false;
      /** The global ended the session because the zone's credential expired: dial again at once with the credential read again. */
      let expired = false;
      try {
        const session = await this.dial(signal);
        const startedAt = performance.now();
        this.#logger.info(
          `zone "${this.name}" connected to global "${session.peerId}" over ${this.#options.transport.name}${session.peer === undefined ? "" : `; ${describeAgreement(session.peer)}`}`,
        );
        void this.#handOver(session);
        const end = await session.closed;
        upMs = performance.now() - startedAt;
        asked = end.code === "reconnect" && end.initiator === "peer";
        expired = end.code === "token_expired" && end.initiator === "peer";
        error = new KdsError("session_closed", `the session ended (${end.code}): ${end.message}`, {
          cause: end,
        });
        await (session as MuxSession).released;
      } catch (e) {
        error = e instanceof KdsError ? e : new KdsError("transport", String(e), { cause: e });
      }
      if (signal.aborted || error.code === "not_leader") break;
      if (upMs >= this.#backoff.resetAfterMs || asked || expired) attempt = 0;
      if (upMs >= this.#backoff.resetAfterMs) healthyEndedAt = performance.now();
      const { delayMs, ceilingMs, told } = retryDelay({
        error,
        // A renewed credential is picked up at the next dial: no reason to wait longer than a jitter.
        asked: asked || expired,
        attempt,
        backoff: this.#backoff,
        reconnectJitterMs: this.#reconnectJitterMs,
        downMs: healthyEndedAt === undefined ? undefined : performance.now() - healthyEndedAt,
        random,
      });
      const info: RetryInfo = {
        attempt,
        delayMs,
        ceilingMs,
        nextAttemptAt: new Date(Date.now() + delayMs),
        error,
        asked,
        told,
      };
      if (!asked && !told) attempt++;
      const log = asked ? this.#logger.info : expired ? this.#logger.error : this.#logger.warn;
      log.call(
        this.#logger,
        `${error.message}\nzone "${this.name}" ${asked ? "reconnects as asked" : expired ? "reads its token again (a renewed token file) and dials again" : told ? "retries when the global said" : "retries"} in ${delayMs} ms (at ${info.nextAttemptAt.toISOString()}, attempt ${info.attempt + 1})`,
        {
          zone: this.name,
          code: error.code,
          delayMs,
        },
      );
      this.#options.onRetry?.(info);
      try {
        await sleep(delayMs, signal);
      } catch {
        break; // sleep rejects only when `signal` aborts: the zone is shutting down, nothing is pending
      }
    }
    await this.#current?.close({ message: `zone "${this.name}" is shutting down` });
  }

  async #handOver(session: Session): Promise<void> {
    try {
      await this.#options.onSession?.(session);
    } catch (error) {
      this.#logger.error(`onSession failed for zone "${this.name}"`, { error });
    }
  }
}

/** What {@link retryDelay} decides from. */
export interface RetryDelayInput {
  /** Why the zone retries. */
  readonly error: KdsError;
  /** The global asked the zone to reconnect (goaway RECONNECT). */
  readonly asked: boolean;
  /** Retry number since the last healthy session, from 0. */
  readonly attempt: number;
  /** The zone's backoff. */
  readonly backoff: ResolvedBackoff;
  /** The zone's `reconnectJitterMs`. */
  readonly reconnectJitterMs: number;
  /** How long ago the zone's last healthy session (one that lasted `resetAfterMs`) ended; undefined before there was one. */
  readonly downMs: number | undefined;
  /** Random source in [0, 1). */
  readonly random: () => number;
}

/**
 * How long a zone waits before it dials again:
 * - asked to reconnect (goaway RECONNECT): a uniform jitter up to
 *   `reconnectJitterMs` (the global spreads these requests itself);
 * - refused as `overloaded` with a retry hint: the hint, at most the
 *   backoff's cap (`told`; the backoff does not grow: the global spreads the
 *   refused zones over the time it needs to admit them);
 * - the global unreachable (`transport`) after a healthy session: the
 *   backoff's full jitter, but the ceiling no higher than the time since that
 *   session ended (at least the base), so a zone whose early draws were short
 *   does not escalate far past a short outage, and, while the connection is
 *   refused (nothing listens: the global restarts), no higher than
 *   {@link REFUSED_CEILING_MS};
 * - anything else: the backoff's full jitter for `attempt`.
 */
export function retryDelay(input: RetryDelayInput): {
  delayMs: number;
  ceilingMs: number;
  told: boolean;
} {
  const { error, backoff, random } = input;
  if (input.asked)
    return {
      delayMs: fullJitter(input.reconnectJitterMs, random),
      ceilingMs: input.reconnectJitterMs,
      told: false,
    };
  if (error.code === "overloaded" && error.retryAfterMs !== undefined) {
    const delayMs = Math.min(error.retryAfterMs, backoff.capMs);
    return { delayMs, ceilingMs: delayMs, told: true };
  }
  let ceilingMs = backoffCeiling(input.attempt, backoff);
  if (error.code === "transport" && input.downMs !== undefined) {
    let bound = Math.round(input.downMs);
    if (connectionRefused(error)) bound = Math.min(bound, REFUSED_CEILING_MS);
    ceilingMs = Math.min(ceilingMs, Math.max(backoff.baseMs, bound));
  }
  return { delayMs: fullJitter(ceilingMs, random), ceilingMs, told: false };
}

/**
 * True when `error` (or a cause under it) says the connection was refused:
 * nothing listens at the address (code `ECONNREFUSED` on Node and Bun, name
 * `ConnectionRefused` on Deno).
 */
export function connectionRefused(error: unknown): boolean {
  let e: unknown = error;
  for (let depth = 0; depth < 8 && typeof e === "object" && e !== null; depth++) {
    const { code, name, cause } = e as { code?: unknown; name?: unknown; cause?: unknown };
    if (code === "ECONNREFUSED" || name === "ConnectionRefused") return true;
    e = cause;
  }
  return false;
}
