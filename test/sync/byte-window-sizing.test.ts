// A zone (hand-made frames, as another implementation) whose hello grants a
// response byte window of 64 KiB with a max_message_bytes of 4 MiB: the
// global sizes its responses by the smaller of the two, so every response
// fits the window and all 200 Meshes (about 200 KB) arrive on one session.
import { create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it } from "vitest";
import { MeshSpecSchema, exampleTypes } from "../../examples/example-kinds/index.ts";
import { catalogRequest, deltaRequest, hello, windowUpdate } from "../../src/conformance/frames.ts";
import type { Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { silentLogger } from "../../src/log.ts";
import { creditSize } from "../../src/mux/frame-size.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { memoryMuxTransport } from "../../src/transport/memory.ts";
import { AsyncQueue } from "../../src/util/async-queue.ts";

const WINDOW = 64 * 1024;
const MESH_TYPE = "type.googleapis.com/kds.example.v1.MeshSpec";

const stops: AbortController[] = [];
afterEach(() => {
  for (const s of stops.splice(0)) s.abort();
});

describe("responses sized by the peer's byte window", () => {
  it("a zone granting 64 KiB of response bytes and 4 MiB frames gets every response within 64 KiB, all 200 Meshes", async () => {
    const stop = new AbortController();
    stops.push(stop);
    const types = createTypeRegistry(exampleTypes);
    const store = new InMemoryStore(types);
    const global = new GlobalControlPlane({ types, store, id: "global", logger: silentLogger });
    global.start(stop.signal);
    await global.registerZone("zone-a");
    const description = "d".repeat(1000);
    await store.apply(
      Array.from({ length: 200 }, (_, i) => ({
        op: "put" as const,
        input: { kind: "Mesh", name: `m-${i}`, spec: create(MeshSpecSchema, { description }) },
      })),
    );
    const token = (await global.tokens.issueZoneToken("zone-a")).token;
    const outbound = new AsyncQueue<Frame>(4096);
    const inbound = await memoryMuxTransport(global.server).open({
      headers: new Headers({ "client-id": "zone-a", authorization: `Bearer ${token}` }),
      outbound,
      signal: stop.signal,
    });
    outbound.push(
      hello("zone-a", { responseWindowBytes: WINDOW, maxMessageBytes: 4 * 1024 * 1024 }),
    );
    outbound.push(catalogRequest("zone-a"));
    const sizes: number[] = [];
    const names = new Set<string>();
    const deadline = AbortSignal.timeout(30_000);
    for await (const frame of inbound) {
      if (deadline.aborted) break;
      const v = frame.value;
      if (v.case === "goaway") throw new Error(`the global ended the session: ${v.value.message}`);
      if (v.case === "response") {
        outbound.push(catalogRequest("zone-a", v.value.nonce, v.value.versionInfo));
        outbound.push(deltaRequest({ typeUrl: MESH_TYPE, resourceNamesSubscribe: ["*"] }));
        outbound.push(windowUpdate(0, 1, 0, creditSize(frame)));
      }
      if (v.case === "deltaResponse") {
        sizes.push(creditSize(frame));
        for (const r of v.value.resources) names.add(r.name);
        outbound.push(deltaRequest({ typeUrl: v.value.typeUrl, responseNonce: v.value.nonce }));
        outbound.push(windowUpdate(0, 1, 0, creditSize(frame)));
        if (names.size === 200) break;
      }
    }
    outbound.close();
    expect(names.size).toBe(200);
    expect(sizes.length).toBeGreaterThan(3);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(WINDOW);
  });
});
