// Child process of the fan-out benchmark: N zones dialing one global, each on
// its own HTTP/2 connection. Prints JSON lines: {"ready":N} once every zone
// mirrors the Mesh, then {"seq":k,"arrivals":[ms...]} for each change the
// parent makes (arrival times as performance.timeOrigin + performance.now()).
import { createGrpcTransport } from "@connectrpc/connect-node";
import { setMaxListeners } from "node:events";
import { silentLogger } from "../src/log.ts";
import { connectMuxTransport } from "../src/transport/connect.ts";
import { ZoneControlPlane } from "../src/zone/zone-control-plane.ts";

const [url, countText] = process.argv.slice(2);
const count = Number(countText);
const stop = new AbortController();
setMaxListeners(0, stop.signal);
const now = (): number => performance.timeOrigin + performance.now();
const arrivals = new Map<number, number[]>();
let ready = 0;

for (let i = 0; i < count; i++) {
  const zone = new ZoneControlPlane({
    name: `zone-${i}`,
    transport: connectMuxTransport(createGrpcTransport({ baseUrl: url as string, acceptCompression: [] })),
    logger: silentLogger,
    backoff: { baseMs: 100, capMs: 1_000 },
  });
  let seen = false;
  zone.store.watch((change) => {
    if (change.kind !== "Mesh" || change.op !== "put") return;
    void zone.store.get("Mesh", "", change.name).then((mesh) => {
      const description = (mesh?.spec as { description?: string } | undefined)?.description ?? "";
      if (!seen) {
        seen = true;
        if (++ready === count) process.stdout.write(`${JSON.stringify({ ready })}\n`);
      }
      const m = /^seq-(\d+)$/.exec(description);
      if (m === null) return;
      const seq = Number(m[1]);
      const list = arrivals.get(seq) ?? [];
      list.push(now());
      arrivals.set(seq, list);
      if (list.length === count) process.stdout.write(`${JSON.stringify({ seq, arrivals: list })}\n`);
    });
  }, stop.signal);
  void zone.run(stop.signal);
}
process.stdin.on("data", () => undefined);
process.stdin.on("end", () => {
  stop.abort();
  setTimeout(() => process.exit(0), 500);
});
