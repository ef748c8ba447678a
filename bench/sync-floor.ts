// The floor of the 100k sync: what the same work costs with nothing of
// kds-mux in it. This process (the global's side, fresh as the sync's global
// is) builds the sync's N policies as delta-response frames of about 512 KiB
// (bench/floor-wire.ts; untimed, as the global holds its resources before a
// zone dials), then encodes them with protobuf-es, length-prefixed; a child
// process (the zone's side) fetches those bytes over plain node:http2 on
// loopback, with windows as large as the sync zone's, then decodes every
// frame, envelope and spec. floorMs = encodeMs + transferMs + decodeMs, each
// timed on its own (wall clock; the CPU times are beside them). Both sides
// first encode and decode 1,000 policies untimed, so the floor does not pay
// the JIT's warm-up: it is the best case.
//
//   node --import ./bench/loader/register.mjs bench/sync-floor.ts 100000
import { spawn } from "node:child_process";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { DEFAULT_HTTP2_WINDOW_BYTES } from "../src/adapters/node/http2-windows.ts";
import { PrefixedReader, decodePolicyFrame, encodeFrames, policyFrames } from "./floor-wire.ts";
import { childNodeArgs, isMain, BENCH_LOADER } from "./fresh.ts";

/** One floor measurement. */
export interface SyncFloorResult {
  readonly resources: number;
  /** Bytes sent (length-prefixed frames). */
  readonly bytes: number;
  /** protobuf-es encode of every frame (sender process; the frames built beforehand). */
  readonly encodeMs: number;
  readonly encodeCpuMs: number;
  /** The encoded bytes over node:http2, from the receiver's request until it holds the last byte. */
  readonly transferMs: number;
  /** protobuf-es decode of every frame, envelope and spec (receiver process). */
  readonly decodeMs: number;
  readonly decodeCpuMs: number;
  /** encodeMs + transferMs + decodeMs: the floor. */
  readonly floorMs: number;
}

const cpuMs = (u: NodeJS.CpuUsage): number => (u.user + u.system) / 1000;
const window = DEFAULT_HTTP2_WINDOW_BYTES;

/** Runs the floor for `n` resources (the receiver in a child process). */
export async function syncFloor(n: number): Promise<SyncFloorResult> {
  warmUp();
  const built = policyFrames(n);
  const t = performance.now();
  const cpu0 = process.cpuUsage();
  const frames = encodeFrames(built);
  const encodeCpuMs = cpuMs(process.cpuUsage(cpu0));
  const encodeMs = performance.now() - t;
  const bytes = frames.reduce((sum, f) => sum + f.byteLength, 0);

  const server = http2.createServer({ settings: { initialWindowSize: window } });
  server.on("session", (s) => s.setLocalWindowSize(window));
  server.on("stream", (stream) => {
    stream.respond({ ":status": 200 });
    let i = 0;
    const pump = (): void => {
      while (i < frames.length)
        if (!stream.write(frames[i++])) return void stream.once("drain", pump);
      stream.end();
    };
    pump();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const child = spawn(
    process.execPath,
    [
      ...childNodeArgs(),
      "--import",
      BENCH_LOADER,
      fileURLToPath(import.meta.url),
      "receive",
      url,
      String(n),
      String(bytes),
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  try {
    const line = await createInterface({ input: child.stdout })[Symbol.asyncIterator]().next();
    if (line.done === true) throw new Error("the floor's receiver ended early");
    const r = JSON.parse(line.value as string) as {
      transferMs: number;
      decodeMs: number;
      decodeCpuMs: number;
    };
    return {
      resources: n,
      bytes,
      encodeMs,
      encodeCpuMs,
      transferMs: r.transferMs,
      decodeMs: r.decodeMs,
      decodeCpuMs: r.decodeCpuMs,
      floorMs: encodeMs + r.transferMs + r.decodeMs,
    };
  } finally {
    if (child.exitCode === null) await new Promise((r) => child.once("exit", r));
    await new Promise<void>((r) => server.close(() => r()));
  }
}

/** Encodes and decodes 1,000 policies (JIT warm-up, untimed). */
function warmUp(): void {
  const reader = new PrefixedReader(64 * 1024 * 1024);
  for (const frame of encodeFrames(policyFrames(1_000)))
    for (const body of reader.push(frame)) decodePolicyFrame(body);
}

/** The receiver: fetches `bytes` bytes from `url`, then decodes them; prints one JSON line. */
async function receive(url: string, n: number, bytes: number): Promise<void> {
  warmUp();
  const session = http2.connect(url, { settings: { initialWindowSize: window } });
  await new Promise<void>((resolve, reject) => {
    session.once("connect", () => resolve());
    session.once("error", reject);
  });
  session.setLocalWindowSize(window);
  const chunks: Uint8Array[] = [];
  let received = 0;
  const t0 = performance.now();
  const stream = session.request({ ":path": "/floor", ":method": "GET" });
  await new Promise<void>((resolve, reject) => {
    stream.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      received += chunk.byteLength;
    });
    stream.once("end", resolve);
    stream.once("error", reject);
  });
  const transferMs = performance.now() - t0;
  if (received !== bytes) throw new Error(`received ${received} of ${bytes} bytes`);
  const t1 = performance.now();
  const cpu0 = process.cpuUsage();
  const reader = new PrefixedReader(64 * 1024 * 1024);
  let resources = 0;
  for (const chunk of chunks)
    for (const body of reader.push(chunk)) resources += decodePolicyFrame(body);
  const decodeCpuMs = cpuMs(process.cpuUsage(cpu0));
  const decodeMs = performance.now() - t1;
  if (resources !== n) throw new Error(`decoded ${resources} of ${n} resources`);
  session.close();
  process.stdout.write(`${JSON.stringify({ transferMs, decodeMs, decodeCpuMs })}\n`);
}

if (isMain(import.meta.url)) {
  const [first, ...rest] = process.argv.slice(2);
  if (first === "receive") {
    const [url, n, bytes] = rest as [string, string, string];
    await receive(url, Number(n), Number(bytes));
  } else process.stdout.write(`${JSON.stringify(await syncFloor(Number(first)))}\n`);
  process.exit(0);
}
