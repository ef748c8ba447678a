// A long session: one zone receives N small responses over gRPC; heap and
// RSS (after GC) sampled along the way must stay flat.
import { createGrpcTransport } from "@connectrpc/connect-node";
import { create } from "@bufbuild/protobuf";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { serveGlobal } from "../src/adapters/node/serve-global.ts";
import { DiscoveryResponseSchema } from "../src/gen/kds/v1/discovery_pb.ts";
// The mux is measured without zone authentication (a token check happens once per connect, not per frame).
import { insecureZoneAuthenticator } from "../src/auth/zone-authenticator.ts";
import { GlobalServer } from "../src/global/global-server.ts";
import { InMemoryZoneRegistry } from "../src/global/zone-registry.ts";
import { silentLogger } from "../src/log.ts";
import { connectMuxTransport } from "../src/transport/connect.ts";
import { ZoneClient } from "../src/zone/zone-client.ts";
import { isMain } from "./fresh.ts";
import { untilSession } from "./session.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

export interface MemorySample {
  readonly messages: number;
  readonly heapMiB: number;
  readonly rssMiB: number;
}

export interface MemoryResult {
  readonly messages: number;
  readonly seconds: number;
  readonly samples: MemorySample[];
  /** Heap growth from the first sample (after warm-up) to the last. */
  readonly heapGrowthMiB: number;
  readonly rssGrowthMiB: number;
}

function sample(messages: number): MemorySample {
  for (let i = 0; i < 3; i++) gc();
  const m = process.memoryUsage();
  return { messages, heapMiB: m.heapUsed / 2 ** 20, rssMiB: m.rss / 2 ** 20 };
}

/** Streams `total` messages global -> zone through one session, sampling memory `samples` times. */
export async function memoryBench(total: number, samples = 10): Promise<MemoryResult> {
  const global = new GlobalServer({
    registry: new InMemoryZoneRegistry(["zone-1"]),
    authenticator: insecureZoneAuthenticator(),
    logger: silentLogger,
  });
  const served = await serveGlobal(global);
  try {
    const zone = await new ZoneClient({
      name: "zone-1",
      transport: connectMuxTransport(
        createGrpcTransport({ baseUrl: served.url, acceptCompression: [] }),
      ),
      logger: silentLogger,
    }).dial();
    const gs = await untilSession(global, "zone-1");
    const msg = create(DiscoveryResponseSchema, {
      typeUrl: "bench",
      resources: [{ typeUrl: "bench", value: new Uint8Array(64).fill(7) }],
    });
    const pump = async (count: number): Promise<void> => {
      const sender = (async () => {
        for (let i = 0; i < count; i++) await gs.server.send(msg);
      })();
      for (let i = 0; i < count; i++) await zone.client.recv();
      await sender;
    };
    await pump(Math.min(20_000, total / 10)); // warm-up
    const step = Math.floor(total / samples);
    const points: MemorySample[] = [sample(0)];
    const started = performance.now();
    for (let done = 0; done < total; done += step) {
      await pump(step);
      points.push(sample(done + step));
    }
    const seconds = (performance.now() - started) / 1000;
    await zone.close();
    const first = points[0] as MemorySample;
    const last = points.at(-1) as MemorySample;
    return {
      messages: total,
      seconds,
      samples: points,
      heapGrowthMiB: last.heapMiB - first.heapMiB,
      rssGrowthMiB: last.rssMiB - first.rssMiB,
    };
  } finally {
    await served.close();
  }
}

if (isMain(import.meta.url)) {
  const result = await memoryBench(Number(process.argv[2]));
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(0);
}
