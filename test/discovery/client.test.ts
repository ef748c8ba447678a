// The discovery client's rules: ACK echoes the version and nonce; NACK carries
// the last accepted version and the reason, and the client keeps what it had.
import { create } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { DiscoveryClient } from "../../src/discovery/client.ts";
import {
  DeltaDiscoveryResponseSchema,
  DiscoveryResponseSchema,
  type DeltaDiscoveryRequest,
  type DiscoveryRequest,
} from "../../src/gen/kds/v1/discovery_pb.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import type { MuxRequest } from "../../src/mux/frames.ts";
import type { ClientStreamView } from "../../src/mux/views.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import type { ResourceStore } from "../../src/store/contract.ts";
import { FaultyStore } from "../support/faulty-store.ts";
import { StoreSink, mirrorMapping } from "../../src/sync/store-sink.ts";
import { toWire } from "../../src/sync/wire.ts";
import { sessionPair } from "../contract/harness.ts";
import { mesh } from "../sync/helpers.ts";
import { exampleTypes } from "../../examples/example-kinds/index.ts";

const types = createTypeRegistry(exampleTypes);
const meshType = types.get("Mesh");

async function meshWire(name: string, description: string) {
  const source = new InMemoryStore(types);
  return toWire(meshType, await source.put(mesh(name, description)));
}

function start(
  mode: "sotw" | "delta",
  options: {
    maxResponseResources?: number;
    store?: ResourceStore;
    /** Wraps the zone's client view (to watch or refuse what the client sends). */
    view?: (view: ClientStreamView) => ClientStreamView;
  } = {},
) {
  const { zone, global } = sessionPair();
  const store = options.store ?? new InMemoryStore(types);
  const rejected: string[] = [];
  const client = new DiscoveryClient({
    view: options.view?.(zone.client) ?? zone.client,
    typeUrls: [meshType.typeUrl],
    mode,
    sink: new StoreSink(store, types, mirrorMapping()),
    observer: { rejected: (_t, _v, e) => void rejected.push(e) },
    maxResponseResources: options.maxResponseResources,
  });
  const running = client.run(zone.signal);
  return {
    zone,
    global,
    store,
    rejected,
    running,
    close: async () => {
      await zone.close();
      await running;
    },
  };
}

describe("discovery client", () => {
  it("SotW: ACKs with the version and nonce; NACKs with the last accepted version and keeps its resources", async () => {
    const c = start("sotw");
    try {
      const subscribe = (await c.global.server.recv()) as DiscoveryRequest;
      expect(subscribe).toMatchObject({
        typeUrl: meshType.typeUrl,
        versionInfo: "",
        responseNonce: "",
      });
      const good = await meshWire("default", "v1");
      await c.global.server.send(
        create(DiscoveryResponseSchema, {
          typeUrl: meshType.typeUrl,
          versionInfo: "v1",
          nonce: "n1",
          resources: [good.any],
        }),
      );
      const ack = (await c.global.server.recv()) as DiscoveryRequest;
      expect(ack).toMatchObject({ versionInfo: "v1", responseNonce: "n1" });
      expect(ack.errorDetail).toBeUndefined();
      expect((await c.store.list("Mesh")).resources.map((r) => r.meta.name)).toEqual(["default"]);

      // A response with one good and one malformed resource is rejected whole.
      const other = await meshWire("other", "v2");
      const bad = create(AnySchema, {
        typeUrl: good.any.typeUrl,
        value: new Uint8Array([0xff, 0xff, 0xff]),
      });
      await c.global.server.send(
        create(DiscoveryResponseSchema, {
          typeUrl: meshType.typeUrl,
          versionInfo: "v2",
          nonce: "n2",
          resources: [other.any, bad],
        }),
      );
      const nack = (await c.global.server.recv()) as DiscoveryRequest;
      expect(nack.versionInfo).toBe("v1");
      expect(nack.responseNonce).toBe("n2");
      expect(nack.errorDetail?.code).toBe(3);
      expect(nack.errorDetail?.message).toMatch(/malformed resource envelope/);
      expect((await c.store.list("Mesh")).resources.map((r) => r.meta.name)).toEqual(["default"]);
      expect(c.rejected).toHaveLength(1);
    } finally {
      await c.close();
    }
  });

  it("delta: ACKs with the nonce; NACKs a resource whose name does not match and keeps its resources", async () => {
    const c = start("delta");
    try {
      const subscribe = (await c.global.server.recv()) as DeltaDiscoveryRequest;
      expect(subscribe.resourceNamesSubscribe).toEqual(["*"]);
      expect(subscribe.initialResourceVersions).toEqual({});
      const good = await meshWire("default", "v1");
      await c.global.server.send(
        create(DeltaDiscoveryResponseSchema, {
          typeUrl: meshType.typeUrl,
          nonce: "n1",
          resources: [good.resource],
        }),
      );
      const ack = (await c.global.server.recv()) as DeltaDiscoveryRequest;
      expect(ack).toMatchObject({ responseNonce: "n1" });
      expect(ack.errorDetail).toBeUndefined();

      const forged = (await meshWire("other", "x")).resource;
      forged.name = "somebody-else";
      await c.global.server.send(
        create(DeltaDiscoveryResponseSchema, {
          typeUrl: meshType.typeUrl,
          nonce: "n2",
          resources: [forged],
          removedResources: ["default"],
        }),
      );
      const nack = (await c.global.server.recv()) as DeltaDiscoveryRequest;
      expect(nack.responseNonce).toBe("n2");
      expect(nack.errorDetail?.message).toMatch(/sent under the name "somebody-else"/);
      expect((await c.store.list("Mesh")).resources.map((r) => r.meta.name)).toEqual(["default"]);
    } finally {
      await c.close();
    }
  });

  it("delta: an ACK the view takes at once leaves by trySend; one it refuses is sent, and both reach the peer", async () => {
    const used: string[] = [];
    let refuse = false;
    const c = start("delta", {
      view: (view) => ({
        send: (request: MuxRequest, signal?: AbortSignal) => {
          used.push(`send ${request.responseNonce}`);
          return view.send(request, signal);
        },
        trySend: (request: MuxRequest, signal?: AbortSignal) => {
          if (refuse) return false;
          const taken = view.trySend?.(request, signal) === true;
          used.push(`trySend ${request.responseNonce} ${taken}`);
          return taken;
        },
        recv: (signal?: AbortSignal) => view.recv(signal),
        recvTo: view.recvTo?.bind(view),
      }),
    });
    try {
      await c.global.server.recv(); // the subscription
      for (const [nonce, name] of [
        ["n1", "default"],
        ["n2", "other"],
      ] as const) {
        refuse = nonce === "n2";
        await c.global.server.send(
          create(DeltaDiscoveryResponseSchema, {
            typeUrl: meshType.typeUrl,
            nonce,
            resources: [(await meshWire(name, "v1")).resource],
          }),
        );
        const ack = (await c.global.server.recv()) as DeltaDiscoveryRequest;
        expect(ack).toMatchObject({ responseNonce: nonce });
        expect(ack.errorDetail).toBeUndefined();
      }
      // The subscription went by send (it is not an ACK); n1's ACK was taken at once, n2's was refused and sent.
      expect(used).toEqual(["send ", "trySend n1 true", "send n2"]);
      expect((await c.store.list("Mesh")).resources.map((r) => r.meta.name)).toEqual([
        "default",
        "other",
      ]);
    } finally {
      await c.close();
    }
  });

  it("delta: NACKs a response naming more than maxResponseResources resources plus removals, reading and writing nothing, and says what to do", async () => {
    const store = new FaultyStore(new InMemoryStore(types));
    const c = start("delta", { maxResponseResources: 100, store });
    try {
      await c.global.server.recv(); // the subscription
      const good = await meshWire("default", "v1");
      await c.global.server.send(
        create(DeltaDiscoveryResponseSchema, {
          typeUrl: meshType.typeUrl,
          nonce: "n1",
          resources: [good.resource],
        }),
      );
      expect(((await c.global.server.recv()) as DeltaDiscoveryRequest).errorDetail).toBeUndefined();
      const calls = (): number => [...store.calls.values()].reduce((a, b) => a + b, 0);
      const before = calls();
      const removedResources = Array.from({ length: 100 }, (_, i) => `absent-${i}`);
      await c.global.server.send(
        create(DeltaDiscoveryResponseSchema, {
          typeUrl: meshType.typeUrl,
          nonce: "n2",
          resources: [good.resource],
          removedResources,
        }),
      );
      const nack = (await c.global.server.recv()) as DeltaDiscoveryRequest;
      expect(nack.responseNonce).toBe("n2");
      expect(nack.errorDetail?.message).toMatch(
        /names 101 resources and removals \(1 \+ 100\), more than the 100 this side accepts in one delta response; nothing was applied/,
      );
      expect(nack.errorDetail?.message).toMatch(
        /Send at most 100 per response .* or raise maxResponseResources on this side/,
      );
      expect(calls()).toBe(before); // refused before any store call
      // At the bound it is taken, with one read for all 99 removals (no read per name).
      await c.global.server.send(
        create(DeltaDiscoveryResponseSchema, {
          typeUrl: meshType.typeUrl,
          nonce: "n3",
          resources: [],
          removedResources: [...removedResources.slice(0, 99), "default"],
        }),
      );
      const ack = (await c.global.server.recv()) as DeltaDiscoveryRequest;
      expect(ack).toMatchObject({ responseNonce: "n3" });
      expect(ack.errorDetail).toBeUndefined();
      expect(store.calls.get("getMany")).toBe(1);
      expect(store.calls.get("get")).toBeUndefined();
      expect((await c.store.list("Mesh")).resources).toEqual([]);
      expect(c.rejected).toHaveLength(1);
    } finally {
      await c.close();
    }
  });
  it("delta: NACKs a state-of-the-world response (the form it did not subscribe in) without calling its store, however many resources it names", async () => {
    const store = new FaultyStore(new InMemoryStore(types));
    const c = start("delta", { maxResponseResources: 10, store });
    try {
      await c.global.server.recv(); // the subscription
      const calls = (): number => [...store.calls.values()].reduce((a, b) => a + b, 0);
      const before = calls();
      const one = await meshWire("default", "v1");
      const resources = Array.from({ length: 50 }, () => one.any);
      await c.global.server.send(
        create(DiscoveryResponseSchema, {
          typeUrl: meshType.typeUrl,
          versionInfo: "v1",
          nonce: "s1",
          resources,
        }),
      );
      const nack = (await c.global.server.recv()) as DiscoveryRequest;
      expect(nack.$typeName).toBe("kds.v1.DiscoveryRequest"); // answered in the response's form
      expect(nack.responseNonce).toBe("s1");
      expect(nack.versionInfo).toBe("");
      expect(nack.errorDetail?.code).toBe(3);
      expect(nack.errorDetail?.message).toMatch(
        /state-of-the-world response .* this client subscribed to it in delta form; nothing was applied/,
      );
      // Even one resource is refused: the form is wrong, whatever the size.
      await c.global.server.send(
        create(DiscoveryResponseSchema, {
          typeUrl: meshType.typeUrl,
          versionInfo: "v2",
          nonce: "s2",
          resources: [one.any],
        }),
      );
      expect(((await c.global.server.recv()) as DiscoveryRequest).errorDetail?.message).toMatch(
        /subscribed to it in delta form/,
      );
      expect(calls()).toBe(before);
      expect((await c.store.list("Mesh")).resources).toEqual([]);
      expect(c.rejected).toHaveLength(2);
    } finally {
      await c.close();
    }
  });

  it("SotW: NACKs a response naming more than maxResponseResources resources without calling its store; takes one at the bound", async () => {
    const store = new FaultyStore(new InMemoryStore(types));
    const c = start("sotw", { maxResponseResources: 3, store });
    try {
      await c.global.server.recv(); // the subscription
      const calls = (): number => [...store.calls.values()].reduce((a, b) => a + b, 0);
      const before = calls();
      const wires = await Promise.all(["a", "b", "c", "d"].map((n) => meshWire(n, "v1")));
      await c.global.server.send(
        create(DiscoveryResponseSchema, {
          typeUrl: meshType.typeUrl,
          versionInfo: "v1",
          nonce: "n1",
          resources: wires.map((w) => w.any),
        }),
      );
      const nack = (await c.global.server.recv()) as DiscoveryRequest;
      expect(nack.responseNonce).toBe("n1");
      expect(nack.versionInfo).toBe("");
      expect(nack.errorDetail?.message).toMatch(
        /names 4 resources, more than the 3 this side accepts in one state-of-the-world response; nothing was applied/,
      );
      expect(nack.errorDetail?.message).toMatch(
        /use delta for a kind this large, or raise maxResponseResources on this side/,
      );
      expect(calls()).toBe(before);
      await c.global.server.send(
        create(DiscoveryResponseSchema, {
          typeUrl: meshType.typeUrl,
          versionInfo: "v2",
          nonce: "n2",
          resources: wires.slice(0, 3).map((w) => w.any),
        }),
      );
      const ack = (await c.global.server.recv()) as DiscoveryRequest;
      expect(ack).toMatchObject({ versionInfo: "v2", responseNonce: "n2" });
      expect(ack.errorDetail).toBeUndefined();
      expect((await c.store.list("Mesh")).resources.map((r) => r.meta.name).sort()).toEqual([
        "a",
        "b",
        "c",
      ]);
    } finally {
      await c.close();
    }
  });

  it("delta: checks the entry count before it looks at any resource of the response", async () => {
    const c = start("delta", { maxResponseResources: 2 });
    try {
      await c.global.server.recv(); // the subscription
      const good = await meshWire("default", "v1");
      const response = create(DeltaDiscoveryResponseSchema, {
        typeUrl: meshType.typeUrl,
        nonce: "n1",
        resources: [good.resource, good.resource, good.resource],
      });
      // Counts the array methods called on the resources (map, find, ...). The
      // mux reads elements by index to size the frame; that is not counted.
      const called: string[] = [];
      response.resources = new Proxy(response.resources, {
        get(target, key, receiver) {
          if (typeof key === "string" && key !== "length" && !/^\d+$/.test(key)) called.push(key);
          return Reflect.get(target, key, receiver);
        },
      });
      await c.global.server.send(response);
      const nack = (await c.global.server.recv()) as DeltaDiscoveryRequest;
      expect(nack.errorDetail?.message).toMatch(/names 3 resources and removals \(3 \+ 0\)/);
      expect(called).toEqual([]);
    } finally {
      await c.close();
    }
  });
});
