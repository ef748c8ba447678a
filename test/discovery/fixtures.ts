// A scripted discovery peer: a DiscoveryServer on one side of a session pair,
// raw requests from the other side, a source the test controls, and a manual
// clock (the server's ACK timeout and NACK backoff move only when the test
// advances it), so "nothing more is sent" is checked once the server has
// settled rather than by waiting N ms for silence.
import { create, toBinary } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import {
  DeltaDiscoveryRequestSchema,
  DiscoveryRequestSchema,
  ResourceSchema,
  type DeltaDiscoveryResponse,
  type DiscoveryResponse,
} from "../../src/gen/kds/v1/discovery_pb.ts";
import { digestOf } from "../../src/discovery/digest.ts";
import { DiscoveryServer } from "../../src/discovery/server.ts";
import type {
  DiscoveryOptions,
  ServerObserver,
  Snapshot,
  SnapshotSource,
  WireResource,
} from "../../src/discovery/types.ts";
import type { MuxResponse } from "../../src/mux/frames.ts";
import { KdsError } from "../../src/errors.ts";
import { randomBytes, sessionPair } from "../contract/harness.ts";
import { ManualClock } from "../support/manual-clock.ts";

export const T = "type.googleapis.com/test.Thing";

export function wire(key: string, version: string, bytes = 16): WireResource {
  const any = create(AnySchema, {
    typeUrl: "type.googleapis.com/test.Blob",
    value: randomBytes(bytes),
  });
  const resource = create(ResourceSchema, { name: key, version, resource: any });
  return {
    key,
    version,
    any,
    resource,
    anyBytes: toBinary(AnySchema, any).byteLength,
    resourceBytes: toBinary(ResourceSchema, resource).byteLength,
  };
}

/**
 * A source whose content the test sets. It gives its snapshot later (a
 * promise) or, with `now`, also at once (`snapshotNow`, which the server
 * then reads instead): the server's two ways of reading a set.
 */
export class FakeSource implements SnapshotSource {
  readonly typeUrls = [T];
  readonly resources = new Map<string, WireResource>();
  readonly #listeners = new Set<(t: string, key?: string) => void>();
  snapshots = 0;
  readonly snapshotNow?: (typeUrl: string) => Snapshot;

  constructor(options: { readonly now?: boolean } = {}) {
    if (options.now === true) this.snapshotNow = () => this.#current();
  }

  set(key: string, version: string, bytes = 16): void {
    this.resources.set(key, wire(key, version, bytes));
    for (const l of this.#listeners) l(T, key);
  }

  delete(key: string): void {
    this.resources.delete(key);
    for (const l of this.#listeners) l(T, key);
  }

  snapshot(): Promise<Snapshot> {
    return Promise.resolve(this.#current());
  }

  #current(): Snapshot {
    this.snapshots++;
    const sorted = [...this.resources.values()].sort((a, b) => (a.key < b.key ? -1 : 1));
    const byKey = new Map(sorted.map((r) => [r.key, r]));
    return {
      version: digestOf(sorted),
      resources: { get: (k: string) => byKey.get(k), [Symbol.iterator]: () => byKey.values() },
    };
  }

  onChange(listener: (t: string, key?: string) => void, signal: AbortSignal): void {
    this.#listeners.add(listener);
    signal.addEventListener("abort", () => this.#listeners.delete(listener), { once: true });
  }
}

export interface Recorded {
  sent: number;
  acked: string[];
  nacked: string[];
  stalled: string[];
  oversized: string[];
}

/** Event-loop turns {@link startServer}'s `waiting()` allows the server to settle in. */
const SETTLE_TURNS = 1_000;

/** One turn of the event loop: every promise job queued before it has run. */
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Starts a DiscoveryServer on a session pair; the test speaks for the client. */
export function startServer(
  source: SnapshotSource,
  options: DiscoveryOptions = {},
  fetchedOnce: readonly string[] = [],
) {
  const { zone, global } = sessionPair(
    { requestWindow: 256, responseWindow: 256 },
    { requestWindow: 256, responseWindow: 256 },
  );
  const clock = new ManualClock();
  const recorded: Recorded = { sent: 0, acked: [], nacked: [], stalled: [], oversized: [] };
  const observer: ServerObserver = {
    sent: () => void recorded.sent++,
    acked: (_t, v) => void recorded.acked.push(v),
    nacked: (_t, _v, e) => void recorded.nacked.push(e),
    stalled: (_t, n) => void recorded.stalled.push(n),
    oversized: (_t, k) => void recorded.oversized.push(k),
  };
  const server = new DiscoveryServer({
    view: global.server,
    source,
    options,
    observer,
    clock,
    fetchedOnce,
  });
  const running = server.run(global.signal);
  const client = zone.client;
  /**
   * Resolves once the server has settled: it has taken every request the
   * zone sent, every response it sent has reached the zone's client view,
   * and nothing changed over a whole event-loop turn. The server and the
   * in-memory session pair move on promise jobs alone and its clock is
   * manual, so once settled it sends nothing more until the test acts.
   */
  const settled = async (): Promise<void> => {
    let last = "";
    for (let i = 0; i < SETTLE_TURNS; i++) {
      await turn();
      const z = zone.stats();
      const g = global.stats();
      const caughtUp =
        g.received.requests === z.sent.requests &&
        g.buffered.requests === 0 &&
        z.received.responses === g.sent.responses;
      const now = JSON.stringify([z.sent, z.received, g.sent, g.received, recorded]);
      if (caughtUp && now === last) return;
      last = now;
    }
    throw new Error(`the discovery server did not settle within ${SETTLE_TURNS} event-loop turns`);
  };
  return {
    recorded,
    zone,
    global,
    running,
    clock,
    /** Responses that have reached the test and wait to be read, once the server has settled. */
    waiting: async (): Promise<number> => {
      await settled();
      return zone.stats().buffered.responses;
    },
    /** Advances the server's clock by `ms` (firing its timers that fall due). */
    advance: (ms: number): void => clock.advance(ms),
    sotw: (init: { versionInfo?: string; responseNonce?: string; error?: string } = {}) =>
      client.send(
        create(DiscoveryRequestSchema, {
          typeUrl: T,
          versionInfo: init.versionInfo ?? "",
          responseNonce: init.responseNonce ?? "",
          errorDetail: init.error === undefined ? undefined : { code: 3, message: init.error },
        }),
      ),
    delta: (
      init: {
        nonce?: string;
        error?: string;
        subscribe?: string[];
        unsubscribe?: string[];
        initial?: Record<string, string>;
      } = {},
    ) =>
      client.send(
        create(DeltaDiscoveryRequestSchema, {
          typeUrl: T,
          responseNonce: init.nonce ?? "",
          resourceNamesSubscribe: init.subscribe ?? [],
          resourceNamesUnsubscribe: init.unsubscribe ?? [],
          initialResourceVersions: init.initial ?? {},
          errorDetail: init.error === undefined ? undefined : { code: 3, message: init.error },
        }),
      ),
    /** The next response (fails after 10 s: a bound for a response that must come, not a check for silence). */
    recvSotw: async () => (await next(client.recv.bind(client), 10_000)) as DiscoveryResponse,
    recvDelta: async () => (await next(client.recv.bind(client), 10_000)) as DeltaDiscoveryResponse,
    close: async () => {
      await zone.close();
      await running;
    },
  };
}

/** The next response; throws if none arrives within `ms`. */
async function next(
  recv: (signal?: AbortSignal) => Promise<MuxResponse>,
  ms: number,
): Promise<MuxResponse> {
  try {
    return await recv(AbortSignal.timeout(ms));
  } catch (error) {
    if (KdsError.is(error, "aborted"))
      throw new Error(`no response within ${ms} ms`, { cause: error });
    throw error;
  }
}
