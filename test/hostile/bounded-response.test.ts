// Issue 24, item 6, as the attacker did it: one zone's delta response names
// 380,000 Dataplanes that do not exist (removed_resources), against a global
// on PostgreSQL. It used to cost 56.8 s, one database read per name. Now:
// - a real `kds-mux global` (default maxResponseResources, 10,000) refuses it
//   with a NACK saying what to do, at once, while an honest zone process keeps
//   syncing through it;
// - a global that raises the bound past it (a library global, the same store
//   and sync code) handles it, reading the names in one batched read, and the
//   time is logged.
// The times are logged and asserted with generous bounds only (a loaded 2-core
// machine); the issue's 2 s goal is checked by reading the log.
import { create } from "@bufbuild/protobuf";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { serveGlobal } from "../../src/adapters/node/serve-global.ts";
import { fetchOnce } from "../../src/discovery/fetch-once.ts";
import {
  DeltaDiscoveryResponseSchema,
  type DeltaDiscoveryRequest,
} from "../../src/gen/kds/v1/discovery_pb.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { silentLogger } from "../../src/log.ts";
import type { Session } from "../../src/mux/views.ts";
import { noopMetrics } from "../../src/metrics.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { PostgresStore } from "../../src/store/postgres.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { KIND_CATALOG_TYPE_URL } from "../../src/sync/kind-catalog.ts";
import { toWire } from "../../src/sync/wire.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { KdsProcess, run, until } from "../cli/process.ts";
import { freshDatabase, type TestDatabase } from "../support/postgres.ts";
import { dataplane } from "../sync/helpers.ts";

/** Removals in the attacker's response: the issue's figure. */
const ABSENT = 380_000;
const DATAPLANE_TYPE_URL = createTypeRegistry(exampleTypes).get("Dataplane").typeUrl;

const dir = mkdtempSync(join(tmpdir(), "kds-mux-bounded-"));
const file = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

const databases: TestDatabase[] = [];
afterAll(async () => {
  for (const db of databases) await db.drop();
});

/** 380,000 distinct keys of Dataplanes nobody has: "d/" and five base-36 digits (about 3.4 MB of removed_resources). */
function absentKeys(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `d/${i.toString(36).padStart(5, "0")}`);
}

/** Fetches and ACKs the global's kind catalog on `session`: the global subscribes to a zone's kinds only after that. */
async function settleCatalog(session: Session, signal: AbortSignal): Promise<void> {
  await fetchOnce({
    view: session.client,
    typeUrl: KIND_CATALOG_TYPE_URL,
    signal,
    accept: () => undefined,
  });
}

/**
 * Plays the zone on `session`: settles the catalog, then answers the global's Dataplane subscription
 * with one delta response removing `removed`, and returns the global's answer
 * to it (ACK or NACK) and the ms from handing the response to the session to
 * reading that answer.
 */
async function sendRemovals(
  session: Session,
  removed: string[],
): Promise<{ ms: number; answer: DeltaDiscoveryRequest }> {
  const signal = AbortSignal.any([session.signal, AbortSignal.timeout(120_000)]);
  await settleCatalog(session, signal);
  for (;;) {
    const request = (await session.server.recv(signal)) as DeltaDiscoveryRequest;
    if (request.typeUrl === DATAPLANE_TYPE_URL && request.responseNonce === "") break; // the subscription
  }
  const started = performance.now();
  await session.server.send(
    create(DeltaDiscoveryResponseSchema, {
      typeUrl: DATAPLANE_TYPE_URL,
      systemVersionInfo: "attack",
      nonce: "attack",
      removedResources: removed,
    }),
    signal,
  );
  for (;;) {
    const answer = (await session.server.recv(signal)) as DeltaDiscoveryRequest;
    if (answer.typeUrl === DATAPLANE_TYPE_URL && answer.responseNonce === "attack")
      return { ms: Math.round(performance.now() - started), answer };
  }
}

describe("a zone response naming 380,000 absent resources (PostgreSQL global)", () => {
  it("a real kds-mux global refuses it at once with a NACK that says what to do; an honest zone keeps syncing", {
    timeout: 300_000,
  }, async () => {
    const db = await freshDatabase();
    databases.push(db);
    const global = new KdsProcess([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      db.url,
    ]);
    let honest: KdsProcess | undefined;
    let attacker: Session | undefined;
    try {
      const listening = await global.waitFor(
        /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
        90_000,
      );
      const muxUrl = listening[1] as string;
      const globalAdmin = listening[2] as string;
      const token = async (zone: string): Promise<string> => {
        const registered = await run(
          ["apply", "-f", "-", "--server", globalAdmin],
          (await run(["generate", "zone", "--name", zone])).stdout,
        );
        expect(registered.code, registered.stderr).toBe(0);
        const generated = await run([
          "generate",
          "zone-token",
          "--zone",
          zone,
          "--server",
          globalAdmin,
        ]);
        expect(generated.code, generated.stderr).toBe(0);
        return generated.stdout.trim();
      };
      const honestToken = file("honest.token", await token("zone-honest"));
      const attackerToken = await token("zone-big");

      honest = new KdsProcess([
        "zone",
        "--name",
        "zone-honest",
        "--global",
        muxUrl,
        "--token-file",
        honestToken,
        "--admin-listen",
        "127.0.0.1:0",
        "--store",
        "memory",
      ]);
      const honestAdmin = (
        await honest.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/, 90_000)
      )[1] as string;
      const synced = async (name: string): Promise<number> => {
        const started = performance.now();
        const yaml = `type: Dataplane\nname: ${name}\nmesh: default\nspec:\n  address: 10.0.0.9\n  service: web\n  port: 8080\n`;
        const applied = await run([
          "apply",
          "-f",
          file(`${name}.yaml`, yaml),
          "--server",
          honestAdmin,
        ]);
        expect(applied.code, applied.stderr).toBe(0);
        await until(
          () =>
            run([
              "get",
              "Dataplane",
              `zone-honest.${name}`,
              "--mesh",
              "default",
              "--server",
              globalAdmin,
              "-o",
              "json",
            ]),
          (r) => r.code === 0,
          `Dataplane zone-honest.${name} on the global`,
          60_000,
        );
        return Math.round(performance.now() - started);
      };
      const before = await synced("before");

      attacker = await new ZoneClient({
        name: "zone-big",
        token: attackerToken,
        transport: connectMuxTransport(createGrpcTransport({ baseUrl: muxUrl })),
        logger: silentLogger,
      }).dial();
      const attack = sendRemovals(attacker, absentKeys(ABSENT));
      const during = await synced("during");
      const { ms, answer } = await attack;
      const after = await synced("after");
      console.log(
        `380,000-removal response to a kds-mux global on PostgreSQL: answered in ${ms} ms (${answer.errorDetail === undefined ? "ACK" : "NACK"}); honest zone's Dataplane reached the global in ${before} ms before, ${during} ms during, ${after} ms after`,
      );

      expect(answer.errorDetail?.message).toMatch(
        /names 380000 resources and removals \(0 \+ 380000\), more than the 10000 this side accepts in one delta response; nothing was applied/,
      );
      expect(answer.errorDetail?.message).toMatch(/raise maxResponseResources/);
      expect(ms).toBeLessThan(30_000); // generous: the issue's goal is 2 s (see the log)
      expect(attacker.end).toBeUndefined(); // refused, not disconnected: the session goes on
      expect(global.child.exitCode).toBeNull();
    } finally {
      await attacker?.close();
      await honest?.stop();
      await global.stop();
    }
  });

  it("a global that raises maxResponseResources past it reads the 380,000 names in one batched read and ACKs", {
    timeout: 300_000,
  }, async () => {
    const db = await freshDatabase();
    databases.push(db);
    const types = createTypeRegistry(exampleTypes);
    const store = await PostgresStore.open(types, { url: db.url, logger: silentLogger });
    // Counts the store calls the global makes, by method.
    const calls = new Map<string, number>();
    const metrics = {
      ...noopMetrics,
      storeOperation: (op: string) => void calls.set(op, (calls.get(op) ?? 0) + 1),
    };
    const global = new GlobalControlPlane({
      types,
      store,
      logger: silentLogger,
      metrics,
      discovery: { maxResponseResources: 400_000 },
    });
    const stop = new AbortController();
    global.start(stop.signal);
    const served = await serveGlobal(global.server);
    let attacker: Session | undefined;
    try {
      await global.registerZone("zone-big");
      // A few copies the zone does own, among the names: those are deleted, the rest read as absent.
      const keys = absentKeys(ABSENT);
      const owned = [keys[0], keys[ABSENT / 2], keys[ABSENT - 1]] as string[];
      const token = (await global.tokens.issueZoneToken("zone-big")).token;
      attacker = await new ZoneClient({
        name: "zone-big",
        token,
        transport: connectMuxTransport(createGrpcTransport({ baseUrl: served.url })),
        logger: silentLogger,
      }).dial();
      const session = attacker;
      const signal = AbortSignal.any([session.signal, AbortSignal.timeout(120_000)]);
      // First deliver the three owned Dataplanes the honest way, then remove all 380,000 names in one response.
      const origin = new InMemoryStore(types);
      const resources = [];
      for (const key of owned)
        resources.push(
          toWire(types.get("Dataplane"), await origin.put(dataplane("d", key.slice(2)))).resource,
        );
      await settleCatalog(session, signal);
      for (;;) {
        const request = (await session.server.recv(signal)) as DeltaDiscoveryRequest;
        if (request.typeUrl === DATAPLANE_TYPE_URL && request.responseNonce === "") break;
      }
      await session.server.send(
        create(DeltaDiscoveryResponseSchema, {
          typeUrl: DATAPLANE_TYPE_URL,
          systemVersionInfo: "1",
          nonce: "owned",
          resources,
        }),
        signal,
      );
      for (;;) {
        const answer = (await session.server.recv(signal)) as DeltaDiscoveryRequest;
        if (answer.responseNonce !== "owned") continue;
        expect(answer.errorDetail).toBeUndefined();
        break;
      }
      expect((await store.list("Dataplane")).resources.map((r) => r.meta.name).sort()).toEqual(
        owned.map((k) => `zone-big.${k.slice(2)}`).sort(),
      );

      const getsBefore = calls.get("get") ?? 0;
      const getManysBefore = calls.get("getMany") ?? 0;
      const started = performance.now();
      await session.server.send(
        create(DeltaDiscoveryResponseSchema, {
          typeUrl: DATAPLANE_TYPE_URL,
          systemVersionInfo: "2",
          nonce: "attack",
          removedResources: keys,
        }),
        signal,
      );
      let answer: DeltaDiscoveryRequest;
      do answer = (await session.server.recv(signal)) as DeltaDiscoveryRequest;
      while (answer.responseNonce !== "attack");
      const ms = Math.round(performance.now() - started);
      console.log(
        `380,000-removal response to a library global on PostgreSQL with maxResponseResources 400,000: ACKed in ${ms} ms (3 of the names existed and were deleted)`,
      );
      expect(answer.errorDetail).toBeUndefined();
      expect((await store.list("Dataplane")).resources).toEqual([]);
      // One getMany for all 380,000 names (PostgreSQL reads them in 38 statements of 10,000, in one snapshot); no get per name.
      expect((calls.get("getMany") ?? 0) - getManysBefore).toBe(1);
      expect((calls.get("get") ?? 0) - getsBefore).toBeLessThan(10); // the global's own lease and token reads, not one per name
      expect(ms).toBeLessThan(60_000); // generous: the issue's goal is 2 s (see the log); one read per name took 56.8 s
    } finally {
      await attacker?.close();
      stop.abort();
      await served.close();
      await store.close();
    }
  });
});
