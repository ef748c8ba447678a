// Reverse calls: the global calls Connect services a zone serves, inside the
// zone's own session. The endpoint's rules (streaming, credit, deadlines,
// cancellation, refusals) over an in-memory session pair, then `get --zone`
// and `inspect zone` end to end over every zone transport.
import { create } from "@bufbuild/protobuf";
import { StringValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type ConnectRouter } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { registerAdmin } from "../../src/admin/admin-service.ts";
import { serveGlobal } from "../../src/adapters/node/serve-global.ts";
import { KdsError } from "../../src/errors.ts";
import { AdminService } from "../../src/gen/kds/admin/v1/admin_pb.ts";
import {
  HalfDuplexService,
  PullResponseSchema,
  PushResponseSchema,
} from "../../src/gen/kds/mux/v1/half_duplex_pb.ts";
import { MultiplexService } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { insecureZoneAuthenticator } from "../../src/auth/zone-authenticator.ts";
import { GlobalServer } from "../../src/global/global-server.ts";
import { InMemoryZoneRegistry } from "../../src/global/zone-registry.ts";
import { silentLogger } from "../../src/log.ts";
import { CALLER_HEADER, callEndpoint } from "../../src/rpc/endpoint.ts";
import { reverseCallTransport } from "../../src/rpc/transport.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { memoryMuxTransport } from "../../src/transport/memory.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { ZoneControlPlane } from "../../src/zone/zone-control-plane.ts";
import { get, inspectZone } from "../../src/cli/resource-commands.ts";
import { eventually, startGlobal as startMuxGlobal } from "../contract/harness.ts";
import { dataplane } from "../sync/helpers.ts";
import { globalAdminBackend, zoneAdminBackend } from "../../src/admin/role-backends.ts";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** What the zone's test service saw. */
interface Seen {
  pulls: number;
  yielded: number;
  aborted: number;
  caller: string | null;
}

/** A zone serving a test implementation of HalfDuplexService (Pull is server-streaming, Push unary), plus a bidi method it must refuse. */
async function pair(options: { items?: number; hang?: boolean } = {}) {
  const seen: Seen = { pulls: 0, yielded: 0, aborted: 0, caller: null };
  const routes = (router: ConnectRouter): void => {
    router.service(HalfDuplexService, {
      async *pull(request, context) {
        seen.pulls++;
        seen.caller = context.requestHeader.get(CALLER_HEADER);
        context.signal.addEventListener("abort", () => seen.aborted++, { once: true });
        if (options.hang === true)
          await new Promise((resolve) =>
            context.signal.addEventListener("abort", resolve, { once: true }),
          );
        for (let i = 1; i <= (options.items ?? 3); i++) {
          seen.yielded++;
          yield create(PullResponseSchema, { linkId: request.linkId, seq: BigInt(i) });
        }
      },
      push: (request, context) => {
        seen.caller = context.requestHeader.get(CALLER_HEADER);
        if (request.linkId === "bad")
          throw new ConnectError("no such link", Code.NotFound, { "x-why": "test" });
        return create(PushResponseSchema, {
          ackedSeq: request.firstSeq + BigInt(request.frames.length),
        });
      },
    });
    router.service(MultiplexService, {
      streamMessage: async function* () {
        // This global's mux stream is never used: the test calls its reverse unary routes.
      },
    });
  };
  const t = await startMuxGlobal("memory", { zones: ["zone-1", "zone-2"] });
  const zone = new ZoneClient({
    name: "zone-1",
    transport: t.transport(),
    logger: silentLogger,
    reverseCalls: routes,
    reverseCallOptions: { window: 4 },
  });
  const session = await zone.dial();
  await eventually(
    () => t.global.session("zone-1") !== undefined,
    "the global has the zone's session",
  );
  cleanups.push(async () => {
    await session.close();
    await t.close();
  });
  return {
    global: t.global,
    zoneSession: session,
    seen,
    client: createClient(HalfDuplexService, t.global.zoneTransport("zone-1")),
  };
}

describe("reverse call endpoint", () => {
  it("carries a unary call and its error, with the caller named by the session, not by the caller", async () => {
    const { client, seen } = await pair();
    expect(
      (
        await client.push(
          { linkId: "l", firstSeq: 5n, frames: [] },
          { headers: { [CALLER_HEADER]: "zone-2" } },
        )
      ).ackedSeq,
    ).toBe(5n);
    expect(seen.caller).toBe("global");
    const error = await client.push({ linkId: "bad" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.NotFound);
    expect((error as ConnectError).rawMessage).toBe("no such link");
    expect((error as ConnectError).metadata.get("x-why")).toBe("test");
  });

  it("streams a server-streaming call in order through a window smaller than the stream", async () => {
    const { client } = await pair({ items: 50 });
    const seqs: bigint[] = [];
    for await (const r of client.pull({ linkId: "x" })) seqs.push(r.seq);
    expect(seqs).toEqual(Array.from({ length: 50 }, (_, i) => BigInt(i + 1)));
  });

  it("holds a fast callee to the window while the caller does not read (bounded buffers)", async () => {
    const { client, seen } = await pair({ items: 1000 });
    const abort = new AbortController();
    const stream = client.pull({ linkId: "x" }, { signal: abort.signal })[Symbol.asyncIterator]();
    expect((await stream.next()).value?.seq).toBe(1n);
    // The callee runs ahead of the reader by at most the window (4 data frames) plus the few
    // messages Connect's own handler pipeline holds; without credit it would produce all 1000
    // in this time (the session is in memory).
    await eventually(() => seen.yielded >= 4, "the callee fills the window");
    await new Promise((r) => setTimeout(r, 200));
    expect(seen.yielded).toBeLessThanOrEqual(1 + 4 + 6);
    abort.abort(); // Connect's iterators have no return(): a caller stops a stream through its signal
    await eventually(() => seen.aborted === 1, "the callee sees the cancel");
  });

  it("ends a call past its deadline on both sides", async () => {
    const { client, seen } = await pair({ hang: true });
    const error = await (async () => {
      for await (const _ of client.pull({ linkId: "x" }, { timeoutMs: 150 })) void _;
    })().catch((e: unknown) => e);
    expect((error as ConnectError).code).toBe(Code.DeadlineExceeded);
    await eventually(() => seen.aborted === 1, "the zone's handler is cancelled by the deadline");
  });

  it("cancels a call when the caller aborts", async () => {
    const { client, seen } = await pair({ hang: true });
    const abort = new AbortController();
    const done = (async () => {
      for await (const _ of client.pull({ linkId: "x" }, { signal: abort.signal })) void _;
    })().catch((e: unknown) => e);
    await eventually(() => seen.pulls === 1, "the call reached the zone");
    abort.abort();
    expect(((await done) as ConnectError).code).toBe(Code.Canceled);
    await eventually(() => seen.aborted === 1, "the zone's handler is cancelled");
  });

  it("refuses bidi methods and paths the zone does not serve", async () => {
    const { global } = await pair();
    const mux = createClient(MultiplexService, global.zoneTransport("zone-1"));
    const bidi = await (async () => {
      const none = (async function* () {
        // No frame: the route is refused before any is read.
      })();
      for await (const _ of mux.streamMessage(none)) void _;
    })().catch((e: unknown) => e);
    expect((bidi as ConnectError).code).toBe(Code.Unimplemented);
    const admin = createClient(AdminService, global.zoneTransport("zone-1"));
    const missing = await admin.listTypes({}).catch((e: unknown) => e);
    expect((missing as ConnectError).code).toBe(Code.Unimplemented);
  });

  it("fails a call to a zone without a session with zone_offline, naming the zone", async () => {
    const { global } = await pair();
    const error = await createClient(HalfDuplexService, global.zoneTransport("zone-2"))
      .push({})
      .catch((e: unknown) => e);
    expect((error as ConnectError).code).toBe(Code.Unavailable);
    expect((error as ConnectError).metadata.get("kds-error-code")).toBe("zone_offline");
    expect((error as ConnectError).rawMessage).toContain('zone "zone-2" is offline');
  });

  it("gives a zone nothing to call: the global refuses its calls, so it cannot reach another zone", async () => {
    const { zoneSession } = await pair();
    const asZone = createClient(
      AdminService,
      reverseCallTransport(callEndpoint(zoneSession).httpClient),
    );
    const error = await asZone.get({ type: "Dataplane", zone: "zone-2" }).catch((e: unknown) => e);
    expect((error as ConnectError).code).toBe(Code.PermissionDenied);
    expect((error as ConnectError).rawMessage).toContain(
      'global "global" serves no calls over the mux',
    );
  });
});

// ---------------------------------------------------------------------------
// get --zone and inspect zone, end to end.

const noteType = {
  kind: "Note",
  schema: StringValueSchema,
  direction: "local" as const,
  scope: "cluster" as const,
};

async function cluster(kind: "grpc" | "grpc-web" | "connect" | "half-duplex") {
  const stop = new AbortController();
  const global = new GlobalControlPlane({
    types: createTypeRegistry(exampleTypes),
    logger: silentLogger,
  });
  global.start(stop.signal);
  // The half-duplex zone speaks HTTP/1.1 as a browser would; the CLI's admin client speaks h2c on the same port.
  const served = await serveGlobal(global.server, {
    httpVersion: kind === "half-duplex" ? "both" : "2",
    routes: (router) => registerAdmin(router, globalAdminBackend(global)),
  });
  await global.registerZone("zone-1");
  await global.registerZone("zone-2");
  const { createConnectTransport, createGrpcTransport, createGrpcWebTransport } = await import(
    "@connectrpc/connect-node"
  );
  const { createConnectTransport: createWebTransport } = await import("@connectrpc/connect-web");
  const { connectMuxTransport } = await import("../../src/transport/connect.ts");
  const { halfDuplexMuxTransport } = await import("../../src/transport/half-duplex/client.ts");
  const transport = () => {
    switch (kind) {
      case "grpc":
        return connectMuxTransport(createGrpcTransport({ baseUrl: served.url }));
      case "grpc-web":
        return connectMuxTransport(
          createGrpcWebTransport({ baseUrl: served.url, httpVersion: "2" }),
        );
      case "connect":
        return connectMuxTransport(
          createConnectTransport({ baseUrl: served.url, httpVersion: "2" }),
        );
      case "half-duplex":
        return halfDuplexMuxTransport(
          createWebTransport({ baseUrl: served.url, useBinaryFormat: true }),
        );
    }
  };
  const zones: ZoneControlPlane[] = [];
  const running: Promise<void>[] = [];
  for (const name of ["zone-1", "zone-2"]) {
    const zone: ZoneControlPlane = new ZoneControlPlane({
      name,
      token: async () => (await global.tokens.issueZoneToken(name)).token,
      transport: transport(),
      types: createTypeRegistry([...exampleTypes, noteType]),
      logger: silentLogger,
      reverseCalls: (router) => registerAdmin(router, zoneAdminBackend(zone)),
    });
    zones.push(zone);
    running.push(zone.run(stop.signal));
  }
  cleanups.push(async () => {
    stop.abort();
    await Promise.all(running);
    await served.close();
  });
  await eventually(
    () =>
      global.server.session("zone-1") !== undefined &&
      global.server.session("zone-2") !== undefined,
    "both zones connected",
  );
  return {
    global,
    url: served.url,
    zones: zones as [ZoneControlPlane, ZoneControlPlane],
    stop: async (i: 0 | 1) => zones[i]?.client.session?.close(),
  };
}

describe.each(["grpc", "grpc-web", "connect", "half-duplex"] as const)(
  "get --zone over %s",
  (kind) => {
    it("lists what the zone holds itself, local kinds included, and shows the zone's own view of its sync", async () => {
      const { global, url, zones } = await cluster(kind);
      await zones[0].store.put({
        kind: "Note",
        name: "only-in-zone-1",
        spec: create(StringValueSchema, { value: "local" }),
      });
      await zones[1].store.put({
        kind: "Note",
        name: "only-in-zone-2",
        spec: create(StringValueSchema, { value: "local" }),
      });
      await zones[0].store.put(dataplane("default", "web-1"));
      await eventually(
        async () => (await global.store.get("Dataplane", "default", "zone-1.web-1")) !== undefined,
        "the dataplane synced up",
      );

      const notes = JSON.parse(await get(url, "Note", undefined, undefined, "json", "zone-1")) as {
        name: string;
        spec: string;
      }[];
      expect(notes).toEqual([
        expect.objectContaining({ type: "Note", name: "only-in-zone-1", spec: "local" }),
      ]);
      const dataplanes = JSON.parse(
        await get(url, "Dataplane", "web-1", "default", "json", "zone-1"),
      ) as { name: string }[];
      expect(dataplanes.map((d) => d.name)).toEqual(["web-1"]); // the zone's own name, not the global's zone-1.web-1
      expect(JSON.parse(await get(url, "Note", undefined, undefined, "json", "zone-2"))).toEqual([
        expect.objectContaining({ name: "only-in-zone-2" }),
      ]);

      const view = JSON.parse(await inspectZone(url, "zone-1", "json")) as {
        zone: string;
        online: boolean;
        types: { kind: string; direction: string }[];
      }[];
      expect(view).toHaveLength(1);
      expect(view[0]).toMatchObject({ zone: "zone-1", online: true });
      expect(view[0]?.types.map((t) => t.kind)).toContain("Dataplane");

      // Zone-1 cannot reach zone-2 (or the global): the only calls inside its session go from the global to it.
      const zoneSession = zones[0].client.session;
      expect(zoneSession).toBeDefined();
      const fromZone = createClient(
        AdminService,
        reverseCallTransport(
          callEndpoint(zoneSession as NonNullable<typeof zoneSession>).httpClient,
        ),
      );
      const refused = await fromZone.get({ type: "Note", zone: "zone-2" }).catch((e: unknown) => e);
      expect((refused as ConnectError).code).toBe(Code.PermissionDenied);

      // A zone that goes offline gets a clear error naming it.
      await zones[1].client.session?.close();
      await eventually(() => global.server.session("zone-2") === undefined, "zone-2 is offline");
      const offline = await get(url, "Note", undefined, undefined, "json", "zone-2").catch(
        (e: unknown) => e,
      );
      expect(offline).toBeInstanceOf(KdsError);
      expect((offline as KdsError).code).toBe("zone_offline");
      expect((offline as KdsError).message).toContain('zone "zone-2" is offline');
    }, 60_000);
  },
);

describe("get --zone against a zone's admin API", () => {
  it("says to send the request to the global's admin API", async () => {
    const global = new GlobalServer({
      registry: new InMemoryZoneRegistry(["zone-1"]),
      authenticator: insecureZoneAuthenticator(),
      logger: silentLogger,
    });
    const zone = new ZoneControlPlane({
      name: "zone-1",
      transport: memoryMuxTransport(global),
      logger: silentLogger,
    });
    const served = await serveGlobal(global, {
      routes: (router) => registerAdmin(router, zoneAdminBackend(zone)),
    });
    cleanups.push(() => served.close());
    const error = await get(served.url, "Dataplane", undefined, undefined, "json", "zone-2").catch(
      (e: unknown) => e,
    );
    expect((error as KdsError).message).toContain("send the request to the global's admin API");
  });
});
