// When each side may send requests (docs/protocol.md): the global requests
// the zone's kinds only once the zone has settled the kind catalog, so a zone
// that serves nothing before it has squared the catalog with its kinds is
// never asked for a type it does not serve yet.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  DeltaDiscoveryRequestSchema,
  DiscoveryRequestSchema,
} from "../../src/gen/kds/v1/discovery_pb.ts";
import type { Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import type { ServerStreamView } from "../../src/mux/views.ts";
import type { MuxRequest } from "../../src/mux/frames.ts";
import { CatalogGate } from "../../src/sync/catalog-gate.ts";
import { KIND_CATALOG_TYPE_URL } from "../../src/sync/kind-catalog.ts";
import type { MuxTransport } from "../../src/transport/transport.ts";
import { eventually } from "../contract/harness.ts";
import { dataplane, startCluster } from "./helpers.ts";

/** The data frames of `frame` (a batch's inner frames, or the frame itself). */
function dataFrames(frame: Frame): Frame[] {
  return frame.value.case === "batch" ? frame.value.value.frames : [frame];
}

/** `inner`, logging every request frame either way, in the order they pass. */
function loggingRequests(inner: MuxTransport, log: string[]): MuxTransport {
  const note = (frame: Frame, from: "zone" | "global"): void => {
    for (const f of dataFrames(frame)) {
      if (f.value.case !== "request" && f.value.case !== "deltaRequest") continue;
      const r = f.value.value;
      const answer =
        r.responseNonce === "" ? "subscribe" : r.errorDetail === undefined ? "ack" : "nack";
      log.push(
        `${from} ${f.value.case} ${r.typeUrl === KIND_CATALOG_TYPE_URL ? "catalog" : r.typeUrl} ${answer}`,
      );
    }
  };
  return {
    name: `logging ${inner.name}`,
    async open(request) {
      const outbound = (async function* () {
        for await (const frame of request.outbound) {
          note(frame, "zone");
          yield frame;
        }
      })();
      const inbound = await inner.open({ ...request, outbound });
      return (async function* () {
        for await (const frame of inbound) {
          note(frame, "global");
          yield frame;
        }
      })();
    },
  };
}

describe("catalog ordering", () => {
  it("the global requests the zone's kinds only after the zone ACKed the catalog", async () => {
    const cluster = await startCluster("memory");
    const log: string[] = [];
    try {
      await cluster.global.registerZone("zone-1");
      const zone = cluster.startZone("zone-1", {
        transport: loggingRequests(cluster.transport(), log),
      });
      await zone.store.put(dataplane("default", "dp-1"));
      await eventually(
        async () =>
          (await cluster.global.store.get("Dataplane", "default", "zone-1.dp-1")) !== undefined,
        "the zone's resource reaches the global",
        20_000,
      );
      const ack = log.indexOf("zone request catalog ack");
      const firstGlobal = log.findIndex((line) => line.startsWith("global "));
      expect(ack, log.join("\n")).toBeGreaterThanOrEqual(0);
      expect(firstGlobal, log.join("\n")).toBeGreaterThan(ack);
      expect(
        log.filter((line) => line.startsWith("zone ")).slice(0, 2),
        "the zone's first requests are the catalog and its ACK",
      ).toEqual(["zone request catalog subscribe", "zone request catalog ack"]);
    } finally {
      await cluster.close();
    }
  });
});

/** A server view fed with `requests`, then waiting until `signal` aborts. */
function fedView(requests: MuxRequest[]): ServerStreamView {
  return {
    recv: async () => {
      const next = requests.shift();
      if (next === undefined) throw new Error("no more requests in this test");
      return next;
    },
    send: async () => undefined,
  };
}

describe("CatalogGate", () => {
  it("opens on the catalog's ACK, not on its request or another type's ACK", async () => {
    const gate = new CatalogGate();
    const view = gate.watch(
      fedView([create(DiscoveryRequestSchema, { typeUrl: KIND_CATALOG_TYPE_URL })]),
    );
    // Only ACKs reach the gate (from the session's observer): a NACK ends the session instead.
    await view.recv();
    gate.acked("type.googleapis.com/kds.example.v1.MeshSpec");
    const early = new AbortController();
    const settled = gate.settled(early.signal);
    setTimeout(() => early.abort(), 50);
    expect(await settled).toBe(false);
    gate.acked(KIND_CATALOG_TYPE_URL);
    expect(await gate.settled(new AbortController().signal)).toBe(true);
  });

  it("opens on a first request for another type (a zone that skips the catalog)", async () => {
    const gate = new CatalogGate();
    const view = gate.watch(
      fedView([
        create(DeltaDiscoveryRequestSchema, {
          typeUrl: "type.googleapis.com/kds.example.v1.MeshSpec",
          resourceNamesSubscribe: ["*"],
        }),
      ]),
    );
    await view.recv();
    expect(await gate.settled(new AbortController().signal)).toBe(true);
  });

  it("answers false at once on an ended session", async () => {
    expect(await new CatalogGate().settled(AbortSignal.abort())).toBe(false);
  });
});
