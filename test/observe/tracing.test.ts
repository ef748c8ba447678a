// One change traced from the global's store to a zone's ACK, in one process over gRPC on HTTP/2: the
// global's kds.change, kds.queue, kds.send and kds.encode spans and the zone's kds.receive and kds.apply
// spans share one trace, each where docs/observability.md ("Tracing") puts it. The SDK's in-memory
// exporter collects them.
import { trace } from "@opentelemetry/api";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SPAN_NAMES, formatTraceparent, parseTraceparent } from "../../src/observe/tracing.ts";
import { eventually } from "../contract/harness.ts";
import { mesh, startCluster } from "../sync/helpers.ts";

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

beforeAll(() => {
  trace.setGlobalTracerProvider(provider);
});
afterAll(async () => {
  trace.disable();
  await provider.shutdown();
});

const named = (spans: readonly ReadableSpan[], name: string): ReadableSpan[] =>
  spans.filter((s) => s.name === name);

describe("tracing a change", () => {
  it("puts the global's and the zone's spans of one change in one trace", async () => {
    const cluster = await startCluster("grpc");
    try {
      await cluster.global.registerZone("zone-1");
      const zone = cluster.startZone("zone-1");
      await eventually(
        async () => cluster.global.server.session("zone-1")?.peer !== undefined,
        "the zone connects",
      );
      // Both sides registered the SDK: the session agreed on the feature.
      expect(cluster.global.server.session("zone-1")?.peer?.features).toContain("trace-context");
      // A first change settles the first sync (the kind catalog, the empty sets); the second is the one looked at.
      await cluster.global.store.put(mesh("warm-up"));
      await eventually(
        async () => (await zone.store.get("Mesh", "", "warm-up")) !== undefined,
        "the first mesh reaches the zone",
      );
      await cluster.global.store.put(mesh("traced", "one change"));
      await eventually(
        async () => (await zone.store.get("Mesh", "", "traced")) !== undefined,
        "the mesh reaches the zone",
      );
      const tracedChange = (): ReadableSpan | undefined =>
        named(exporter.getFinishedSpans(), SPAN_NAMES.change).find(
          (s) => s.attributes["kds.key"] === "traced",
        );
      await eventually(async () => tracedChange() !== undefined, "the change span ends");
      const spans = exporter.getFinishedSpans();
      const change = tracedChange();
      expect(change, "a kds.change span for the mesh").toBeDefined();
      const traceId = change?.spanContext().traceId;
      const inTrace = spans.filter((s) => s.spanContext().traceId === traceId);
      const byName = (name: string): ReadableSpan => {
        const found = named(inTrace, name);
        expect(found, `one ${name} span in the change's trace`).toHaveLength(1);
        return found[0] as ReadableSpan;
      };
      const queue = byName(SPAN_NAMES.queue);
      const send = byName(SPAN_NAMES.send);
      const encode = byName(SPAN_NAMES.encode);
      const receive = byName(SPAN_NAMES.receive);
      const apply = byName(SPAN_NAMES.apply);
      const changeId = change?.spanContext().spanId;
      expect(change?.parentSpanContext).toBeUndefined();
      expect(queue.parentSpanContext?.spanId).toBe(changeId);
      expect(send.parentSpanContext?.spanId).toBe(changeId);
      expect(encode.parentSpanContext?.spanId).toBe(send.spanContext().spanId);
      // The zone's spans are children of the send span, whose context crossed the stream.
      expect(receive.parentSpanContext?.spanId).toBe(send.spanContext().spanId);
      expect(receive.parentSpanContext?.isRemote).toBe(true);
      expect(apply.parentSpanContext?.spanId).toBe(send.spanContext().spanId);
      expect(send.attributes["kds.zone"]).toBe("zone-1");
      expect(apply.attributes["kds.role"]).toBe("zone");
      expect(change?.attributes["kds.peers"]).toBe(1);
      // The change ends no earlier than the zone's ACK: after the apply span ended.
      const end = (s: ReadableSpan): number => s.endTime[0] * 1e9 + s.endTime[1];
      expect(end(change as ReadableSpan)).toBeGreaterThanOrEqual(end(apply));
      expect(end(send)).toBeGreaterThanOrEqual(end(apply));
    } finally {
      await cluster.close();
    }
  });
});

describe("a change sent to several zones", () => {
  it("ends at the last zone's ACK, and does not wait for a zone that will not be sent it", async () => {
    // zone-2 never receives meshes named private-*.
    const cluster = await startCluster("grpc", {
      filter: (zone, r) => !(zone === "zone-2" && r.meta.name.startsWith("private-")),
    });
    try {
      await cluster.global.registerZone("zone-1");
      await cluster.global.registerZone("zone-2");
      const zones = [cluster.startZone("zone-1"), cluster.startZone("zone-2")];
      await cluster.global.store.put(mesh("warm-up"));
      for (const zone of zones)
        await eventually(
          async () => (await zone.store.get("Mesh", "", "warm-up")) !== undefined,
          "the first mesh reaches the zone",
        );
      const changeOf = (key: string): ReadableSpan | undefined =>
        named(exporter.getFinishedSpans(), SPAN_NAMES.change).find(
          (s) => s.attributes["kds.key"] === key,
        );
      const end = (s: ReadableSpan): number => s.endTime[0] * 1e9 + s.endTime[1];

      await cluster.global.store.put(mesh("shared"));
      await eventually(async () => changeOf("shared") !== undefined, "the shared change ends");
      const shared = changeOf("shared") as ReadableSpan;
      const inShared = exporter
        .getFinishedSpans()
        .filter((s) => s.spanContext().traceId === shared.spanContext().traceId);
      const sends = named(inShared, SPAN_NAMES.send);
      expect(sends.map((s) => s.attributes["kds.zone"]).sort()).toEqual(["zone-1", "zone-2"]);
      expect(shared.attributes["kds.peers"]).toBe(2);
      for (const send of sends) expect(end(shared)).toBeGreaterThanOrEqual(end(send));

      await cluster.global.store.put(mesh("private-one"));
      await eventually(
        async () => changeOf("private-one") !== undefined,
        "the change zone-2 does not get ends all the same",
      );
      const only = changeOf("private-one") as ReadableSpan;
      const inOnly = exporter
        .getFinishedSpans()
        .filter((s) => s.spanContext().traceId === only.spanContext().traceId);
      expect(named(inOnly, SPAN_NAMES.send).map((s) => s.attributes["kds.zone"])).toEqual([
        "zone-1",
      ]);
      expect(only.attributes["kds.peers"]).toBe(2);
      expect(await zones[1]?.store.get("Mesh", "", "private-one")).toBeUndefined();
    } finally {
      await cluster.close();
    }
  });
});

describe("traceparent", () => {
  it("reads back what it writes, and refuses what W3C refuses", () => {
    const context = {
      traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
      spanId: "00f067aa0ba902b7",
      traceFlags: 1,
    };
    const written = formatTraceparent(context);
    expect(written).toBe("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    expect(parseTraceparent(written, "congo=t61rcWkgMzE")).toMatchObject({
      ...context,
      isRemote: true,
    });
    expect(parseTraceparent(written, "congo=t61rcWkgMzE")?.traceState?.get("congo")).toBe(
      "t61rcWkgMzE",
    );
    for (const bad of [
      "",
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
      `${written}-extra`,
      "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ])
      expect(parseTraceparent(bad), bad).toBeUndefined();
    // A later version is read by its first 55 characters.
    expect(parseTraceparent(`01${written.slice(2)}-more`)?.spanId).toBe(context.spanId);
  });
});
