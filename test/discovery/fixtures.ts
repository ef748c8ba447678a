// A scripted discovery peer: a DiscoveryServer on one side of a session pair,
// raw requests from the other side, and a source the test controls.
import { create, toBinary } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import { DeltaDiscoveryRequestSchema, DiscoveryRequestSchema, ResourceSchema, type DeltaDiscoveryResponse, type DiscoveryResponse } from "../../src/gen/kds/v1/discovery_pb.ts";
import { digestOf } from "../../src/discovery/digest.ts";
import { DiscoveryServer } from "../../src/discovery/server.ts";
import type { DiscoveryOptions, ServerObserver, Snapshot, SnapshotSource, WireResource } from "../../src/discovery/types.ts";
import type { MuxResponse } from "../../src/mux/frames.ts";
import { KdsError } from "../../src/errors.ts";
import { randomBytes, sessionPair } from "../contract/harness.ts";

export const T = "type.googleapis.com/test.Thing";

export function wire(key: string, version: string, bytes = 16): WireResource {
  const any = create(AnySchema, { typeUrl: "type.googleapis.com/test.Blob", value: randomBytes(bytes) });
  const resource = create(ResourceSchema, { name: key, version, resource: any });
  return { key, version, any, resource, anyBytes: toBinary(AnySchema, any).byteLength, resourceBytes: toBinary(ResourceSchema, resource).byteLength };
}

/** A source whose content the test sets. */
export class FakeSource implements SnapshotSource {
  readonly typeUrls = [T];
  readonly resources = new Map<string, WireResource>();
  readonly #listeners = new Set<(t: string, key?: string) => void>();
  snapshots = 0;

  set(key: string, version: string, bytes = 16): void {
    this.resources.set(key, wire(key, version, bytes));
    for (const l of this.#listeners) l(T, key);
  }

  delete(key: string): void {
    this.resources.delete(key);
    for (const l of this.#listeners) l(T, key);
  }

  snapshot(): Promise<Snapshot> {
    this.snapshots++;
    const sorted = [...this.resources.values()].sort((a, b) => (a.key < b.key ? -1 : 1));
    const byKey = new Map(sorted.map((r) => [r.key, r]));
    return Promise.resolve({ version: digestOf(sorted), resources: { get: (k: string) => byKey.get(k), [Symbol.iterator]: () => byKey.values() } });
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

/** Starts a DiscoveryServer on a session pair; the test speaks for the client. */
export function startServer(source: SnapshotSource, options: DiscoveryOptions = {}) {
  const { zone, global } = sessionPair({ requestWindow: 256, responseWindow: 256 }, { requestWindow: 256, responseWindow: 256 });
  const recorded: Recorded = { sent: 0, acked: [], nacked: [], stalled: [], oversized: [] };
  const observer: ServerObserver = {
    sent: () => void recorded.sent++,
    acked: (_t, v) => void recorded.acked.push(v),
    nacked: (_t, _v, e) => void recorded.nacked.push(e),
    stalled: (_t, n) => void recorded.stalled.push(n),
    oversized: (_t, k) => void recorded.oversized.push(k),
  };
  const server = new DiscoveryServer({ view: global.server, source, options, observer });
  const running = server.run(global.signal);
  const client = zone.client;
  return {
    recorded,
    zone,
    global,
    running,
    sotw: (init: { versionInfo?: string; responseNonce?: string; error?: string } = {}) =>
      client.send(
        create(DiscoveryRequestSchema, {
          typeUrl: T,
          versionInfo: init.versionInfo ?? "",
          responseNonce: init.responseNonce ?? "",
          errorDetail: init.error === undefined ? undefined : { code: 3, message: init.error },
        }),
      ),
    delta: (init: { nonce?: string; error?: string; subscribe?: string[]; unsubscribe?: string[]; initial?: Record<string, string> } = {}) =>
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
    recvSotw: async (ms = 10_000) => (await next(client.recv.bind(client), ms)) as DiscoveryResponse | undefined,
    recvDelta: async (ms = 10_000) => (await next(client.recv.bind(client), ms)) as DeltaDiscoveryResponse | undefined,
    close: async () => {
      await zone.close();
      await running;
    },
  };
}

/** The next response, or undefined if none arrives within `ms`. */
async function next(recv: (signal?: AbortSignal) => Promise<MuxResponse>, ms: number): Promise<MuxResponse | undefined> {
  try {
    return await recv(AbortSignal.timeout(ms));
  } catch (error) {
    if (KdsError.is(error, "aborted")) return undefined;
    throw error;
  }
}
