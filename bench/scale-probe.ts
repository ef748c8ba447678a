// Loaded into each global of the scale scenario (bench/scale.ts) with
// `node --import`, beside the compiled CLI it runs: it answers the bench over
// the IPC channel and does nothing else, so the global is the CLI's, as
// deployed. Messages (the bench sends, this replies):
//   {"memory": 1}          -> {"memory": {"heapBytes", "rssBytes"}} after GC
//   {"floorListen": b64}   -> {"floorListening": url}: a plain node:http2
//                             server here; each stream a zone process opens
//                             is held, and each floor write sends it the
//                             bytes b64 (one change's mux frame)
//   {"floorWrite": seq}    -> {"floorWritten": seq, "streams": n} once the
//                             bytes were written to every held stream
//   {"profile": file}      -> {"profiling": file}: a CPU profile of this
//                             global starts (bench/profile.ts)
//   {"profileStop": 1}     -> {"profileWritten": file} once it is written
//   {"gcStats": 1}         -> {"gcStats": {kind: {count, ms}}}: the garbage
//                             collections since start, by kind (minor, major,
//                             incremental, weakcb), from perf_hooks
// A global's own memory figures therefore include this file's few objects;
// the floor's server runs in the same process as the zones' global, as the
// fan-out's floor does (bench/fanout.ts).
import * as http2 from "node:http2";
import { constants as perfConstants, PerformanceObserver } from "node:perf_hooks";
import type { AddressInfo } from "node:net";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { profileOf } from "./profile.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

const floorStreams = new Set<http2.ServerHttp2Stream>();
let floorBytes = new Uint8Array(0);
let floorServer: http2.Http2Server | undefined;
/** The CPU profile being taken ({"profile"}), and its file. */
let profiling: { file: string; stop: Promise<(() => Promise<void>) | undefined> } | undefined;

/** GC kinds as perf_hooks numbers them. */
const gcKinds: Record<number, string> = {
  [perfConstants.NODE_PERFORMANCE_GC_MINOR]: "minor",
  [perfConstants.NODE_PERFORMANCE_GC_MAJOR]: "major",
  [perfConstants.NODE_PERFORMANCE_GC_INCREMENTAL]: "incremental",
  [perfConstants.NODE_PERFORMANCE_GC_WEAKCB]: "weakcb",
};
/** Collections so far, by kind: how many, and their pause in ms. */
const gcStats: Record<string, { count: number; ms: number }> = {};
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    const kind = gcKinds[(entry as unknown as { detail: { kind: number } }).detail.kind] ?? "other";
    gcStats[kind] ??= { count: 0, ms: 0 };
    const s = gcStats[kind];
    s.count++;
    s.ms += entry.duration;
  }
}).observe({ entryTypes: ["gc"] });

/** Replies to the bench; a closed channel means the bench is gone, and the process ends with it. */
function reply(message: unknown): void {
  process.send?.(message);
}

process.on("message", (message: Record<string, unknown>) => {
  if (message.memory !== undefined) {
    for (let i = 0; i < 3; i++) gc();
    const m = process.memoryUsage();
    reply({ memory: { heapBytes: m.heapUsed, rssBytes: m.rss } });
  } else if (typeof message.floorListen === "string") {
    floorBytes = new Uint8Array(Buffer.from(message.floorListen, "base64"));
    const server = http2.createServer();
    floorServer = server;
    server.on("stream", (stream) => {
      // A zone process that ends resets its streams: the end of the bench, not a fault to report.
      stream.on("error", () => undefined);
      stream.on("close", () => floorStreams.delete(stream));
      stream.respond({ ":status": 200 });
      floorStreams.add(stream);
    });
    server.listen({ port: 0, host: "127.0.0.1", backlog: 4096 }, () =>
      reply({ floorListening: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }),
    );
  } else if (typeof message.floorWrite === "number") {
    for (const stream of floorStreams) stream.write(floorBytes);
    reply({ floorWritten: message.floorWrite, streams: floorStreams.size });
  } else if (typeof message.profile === "string") {
    const file = message.profile;
    profiling = { file, stop: profileOf(file) };
    void profiling.stop.then(() => reply({ profiling: file }));
  } else if (message.profileStop !== undefined) {
    const taken = profiling;
    profiling = undefined;
    void (async () => {
      const stop = await taken?.stop;
      await stop?.();
      reply({ profileWritten: taken?.file ?? "" });
    })();
  } else if (message.gcStats !== undefined) {
    reply({ gcStats });
  } else if (message.floorClose !== undefined) {
    for (const stream of floorStreams) stream.destroy();
    floorServer?.close();
    reply({ floorClosed: true });
  }
});
// The channel must not keep the global alive on its own: the global ends as the CLI's does.
process.channel?.unref();
// The bench gone (killed, or a test runner that gave up on it): its instances go with it.
process.once("disconnect", () => process.exit(1));
