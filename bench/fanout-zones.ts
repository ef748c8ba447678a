// Child process of the fan-out benchmark: N zones dialing one global, each on
// its own HTTP/2 connection. Prints JSON lines: {"ready":N} once every zone
// mirrors the Mesh, then {"seq":k,"arrivals":[ms...]} for each change the
// parent makes (arrival times as performance.timeOrigin + performance.now()).
import { createGrpcTransport } from "@connectrpc/connect-node";
import { setMaxListeners } from "node:events";
import { readFileSync } from "node:fs";
import { silentLogger } from "../src/log.ts";
import { connectMuxTransport } from "../src/transport/connect.ts";
import type { ResourceStore, StoreChange } from "../src/store/contract.ts";
import { ZoneControlPlane } from "../src/zone/zone-control-plane.ts";

const [url, countText, tokensFile] = process.argv.slice(2);
const tokens = JSON.parse(readFileSync(tokensFile as string, "utf8")) as string[];
const count = Number(countText);
const stop = new AbortController();
setMaxListeners(0, stop.signal);
/** Calls `onChange` for every Mesh change of `store` until the bench stops. */
async function follow(store: ResourceStore, onChange: (change: StoreChange) => void): Promise<void> {
  for await (const change of store.watch(0, { signal: stop.signal, kinds: ["Mesh"] })) onChange(change);
}

const now = (): number => performance.timeOrigin + performance.now();
const arrivals = new Map<number, number[]>();
let ready = 0;

for (let i = 0; i < count; i++) {
  const zone = new ZoneControlPlane({
    name: `zone-${i}`,
    token: tokens[i],
    transport: connectMuxTransport(createGrpcTransport({ baseUrl: url as string, acceptCompression: [] })),
    logger: silentLogger,
    backoff: { baseMs: 100, capMs: 1_000 },
  });
  let seen = false;
  void follow(zone.store, (change) => {
    if (change.op !== "put" || change.resource.kind !== "Mesh") return;
    {
      const description = (change.resource.spec as { description?: string } | undefined)?.description ?? "";
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
    }
  });
  void zone.run(stop.signal);
}
process.stdin.on("data", () => undefined);
process.stdin.on("end", () => {
  stop.abort();
  setTimeout(() => process.exit(0), 500);
});
