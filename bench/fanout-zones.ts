// Child process of the fan-out benchmark (bench/fanout.ts): zones `from` to
// `from + count - 1`, zone i dialing urls[i mod urls.length], every
// `zonesPerConnection` zones of one url sharing one HTTP/2 connection (one
// Connect transport). Prints JSON lines: {"ready", "startedAt", "readyAt",
// "connections"} once every zone mirrors the Mesh, then {"seq", "arrivals"}
// for each change the parent makes (times as performance.timeOrigin +
// performance.now(), comparable across processes on one machine).
import { createGrpcTransport } from "@connectrpc/connect-node";
import { setMaxListeners } from "node:events";
import { readFileSync } from "node:fs";
import { silentLogger } from "../src/log.ts";
import { connectMuxTransport } from "../src/transport/connect.ts";
import type { MuxTransport } from "../src/transport/transport.ts";
import type { ResourceStore, StoreChange } from "../src/store/contract.ts";
import { ZoneControlPlane } from "../src/zone/zone-control-plane.ts";

const { urls, from, count, zonesPerConnection, tokensFile } = JSON.parse(process.argv[2] as string) as {
  urls: string[];
  from: number;
  count: number;
  zonesPerConnection: number;
  tokensFile: string;
};
const tokens = JSON.parse(readFileSync(tokensFile, "utf8")) as string[];
const stop = new AbortController();
setMaxListeners(0, stop.signal);
/** Calls `onChange` for every Mesh change of `store` until the bench stops. */
async function follow(store: ResourceStore, onChange: (change: StoreChange) => void): Promise<void> {
  for await (const change of store.watch(0, { signal: stop.signal, kinds: ["Mesh"] })) onChange(change);
}

const now = (): number => performance.timeOrigin + performance.now();
const arrivals = new Map<number, number[]>();
const transports = new Map<string, MuxTransport>();
let ready = 0;
const startedAt = now();

for (let i = from; i < from + count; i++) {
  const u = i % urls.length;
  const key = `${u}:${Math.floor(i / (urls.length * zonesPerConnection))}`;
  let transport = transports.get(key);
  if (transport === undefined) {
    transport = connectMuxTransport(createGrpcTransport({ baseUrl: urls[u] as string, acceptCompression: [] }));
    transports.set(key, transport);
  }
  const zone = new ZoneControlPlane({ name: `zone-${i}`, token: tokens[i], transport, logger: silentLogger, backoff: { baseMs: 100, capMs: 2_000 } });
  let seen = false;
  void follow(zone.store, (change) => {
    if (change.op !== "put" || change.resource.kind !== "Mesh") return;
    const description = (change.resource.spec as { description?: string } | undefined)?.description ?? "";
    if (!seen) {
      seen = true;
      if (++ready === count) process.stdout.write(`${JSON.stringify({ ready, startedAt, readyAt: now(), connections: transports.size })}\n`);
    }
    const m = /^seq-(\d+)$/.exec(description);
    if (m === null) return;
    const seq = Number(m[1]);
    const list = arrivals.get(seq) ?? [];
    list.push(now());
    arrivals.set(seq, list);
    if (list.length === count) process.stdout.write(`${JSON.stringify({ seq, arrivals: list })}\n`);
  });
  void zone.run(stop.signal);
}
// Progress while connecting (10,000 zones take a while on a loaded machine).
const progress = setInterval(() => {
  if (ready === count) clearInterval(progress);
  else process.stderr.write(`fan-out: zones ${from}-${from + count - 1}: ${ready} of ${count} connected after ${Math.round((now() - startedAt) / 1000)} s\n`);
}, 30_000);
process.stdin.on("data", () => undefined);
process.stdin.on("end", () => {
  stop.abort();
  clearInterval(progress);
  setTimeout(() => process.exit(0), 500);
});
