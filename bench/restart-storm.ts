// Restart storm (issue 20): a lone global holding many zones is SIGKILLed
// and started again on the same PostgreSQL database and address. Measures
// how long until every zone has a session again and holds the Meshes, the
// handshakes refused meanwhile (kds_admissions_total{result="overloaded"},
// total and peak per second), and what was resent: Meshes the zones received
// again, Dataplanes the global received again.
//
//   node --import ./bench/loader/register.mjs bench/restart-storm.ts [zones=2000] [zone processes=2]
//
// The zones use the default reconnect backoff (1 s doubling to 60 s, full
// jitter) and run in child processes (test/support/zone-fleet.ts), one
// HTTP/2 connection each. KDS_BENCH_DATABASE_URL (else KDS_TEST_DATABASE_URL,
// else postgres://postgres@127.0.0.1:5432/postgres) names the server; a
// fresh database is created and dropped.
import { BENCH_LOADER } from "./fresh.ts";
import { spawn, type ChildProcessByStdio } from "node:child_process";
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import postgres from "postgres";
import type { FleetConfig, FleetZone } from "../test/support/zone-fleet.ts";

const ZONES = Number(process.argv[2] ?? 2000);
const PROCESSES = Number(process.argv[3] ?? 2);
const MESHES = 5;
const DATAPLANES = 2;
const bin = fileURLToPath(new URL("../bin/kds-mux.mjs", import.meta.url));
const serverUrl =
  process.env.KDS_BENCH_DATABASE_URL ||
  process.env.KDS_TEST_DATABASE_URL ||
  "postgres://postgres@127.0.0.1:5432/postgres";

function global(
  storeUrl: string,
  listen: string,
): {
  child: ChildProcessByStdio<null, Readable, Readable>;
  urls: Promise<{ mux: string; admin: string }>;
} {
  const child = spawn(
    process.execPath,
    [
      bin,
      "global",
      "--listen",
      listen,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      storeUrl,
      "--insecure-no-zone-auth",
      "--rebalance-interval",
      "0",
      "--log-level",
      "info",
    ],
    {
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let out = "";
  const urls = new Promise<{ mux: string; admin: string }>((resolve, reject) => {
    const seen = (d: Buffer): void => {
      out += d.toString();
      const m =
        /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/.exec(
          out,
        );
      if (m !== null) resolve({ mux: m[1] as string, admin: m[2] as string });
    };
    child.stdout.on("data", seen);
    child.stderr.on("data", (d: Buffer) => {
      seen(d);
      if (/ ERROR /.test(d.toString())) process.stderr.write(d);
    });
    child.once("exit", (code) =>
      reject(new Error(`the global exited (${code}) before listening:\n${out}`)),
    );
  });
  return { child, urls };
}

async function run(args: string[], input: string): Promise<void> {
  const child = spawn(process.execPath, [bin, ...args], { stdio: ["pipe", "inherit", "inherit"] });
  child.stdin.end(input);
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  if (code !== 0) throw new Error(`kds-mux ${args.join(" ")} exited ${code}`);
}

async function overloaded(admin: string): Promise<number> {
  try {
    const text = await (
      await fetch(`${admin}/metrics`, { signal: AbortSignal.timeout(5_000) })
    ).text();
    return Number(
      /kds_admissions_total\{[^}]*result="overloaded"[^}]*\} (\d+)/.exec(text)?.[1] ?? 0,
    );
  } catch {
    return Number.NaN; // the global is not up yet
  }
}

const name = `kds_storm_${process.pid}`;
const admin = postgres(serverUrl, { max: 1, onnotice: () => undefined });
await admin.unsafe(`CREATE DATABASE "${name}"`);
const storeUrl = Object.assign(new URL(serverUrl), { pathname: `/${name}` }).href;
const children: ChildProcessByStdio<Writable, Readable, null>[] = [];
let current: ReturnType<typeof global> | undefined;
try {
  current = global(storeUrl, "127.0.0.1:0");
  const first = await current.urls;
  const docs = [
    ...Array.from(
      { length: ZONES },
      (_, i) => `type: Zone\nname: zone-${i}\nspec:\n  enabled: true\n`,
    ),
    ...Array.from(
      { length: MESHES },
      (_, i) => `type: Mesh\nname: m-${i}\nspec:\n  description: v0\n`,
    ),
  ];
  await run(["apply", "-f", "-", "--server", first.admin], docs.join("---\n"));
  const per = Math.ceil(ZONES / PROCESSES);
  const fleets = Array.from({ length: PROCESSES }, (_, k) => {
    const config: FleetConfig = {
      urls: [first.mux],
      zones: Math.min(per, ZONES - k * per),
      first: k * per,
      meshes: MESHES,
      dataplanes: DATAPLANES,
      churnMs: 2 ** 30,
      backoff: "default",
    };
    const child = spawn(
      process.execPath,
      [
        "--max-old-space-size=2048",
        "--import",
        BENCH_LOADER,
        fileURLToPath(new URL("../test/support/zone-fleet.ts", import.meta.url)),
        JSON.stringify(config),
      ],
      { stdio: ["pipe", "pipe", "inherit"] },
    );
    children.push(child);
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    const next = async (key: string): Promise<Record<string, unknown>> => {
      for (;;) {
        const { value, done } = await lines.next();
        if (done === true) throw new Error(`a zone process ended before printing ${key}`);
        const parsed = JSON.parse(value as string) as Record<string, unknown>;
        if (key in parsed) return parsed;
      }
    };
    const report = async (): Promise<FleetZone[]> => {
      child.stdin.write("report\n");
      return Object.values((await next("report")).report as Record<string, FleetZone>);
    };
    return { next, report };
  });
  const syncStarted = performance.now();
  await Promise.all(fleets.map((f) => f.next("synced")));
  console.log(
    `restart storm: ${ZONES} zones synced in ${Math.round(performance.now() - syncStarted)} ms`,
  );
  const all = async (): Promise<FleetZone[]> =>
    (await Promise.all(fleets.map((f) => f.report()))).flat();
  const before = await all();
  const receivedBefore = before.reduce((n, z) => n + z.meshesReceived, 0);

  current.child.kill("SIGKILL");
  await new Promise((resolve) => current?.child.once("exit", resolve));
  const killedAt = performance.now();
  current = global(storeUrl, new URL(first.mux).host);
  const second = await current.urls;
  const upMs = Math.round(performance.now() - killedAt);
  let peakPerSecond = 0;
  let last = 0;
  let lastAt = performance.now();
  let back: FleetZone[] = [];
  for (;;) {
    const refused = await overloaded(second.admin);
    const now = performance.now();
    if (Number.isFinite(refused)) {
      peakPerSecond = Math.max(
        peakPerSecond,
        ((refused - last) * 1000) / Math.max(1, now - lastAt),
      );
      last = refused;
      lastAt = now;
    }
    back = await all();
    if (back.every((z) => z.connects >= 2 && Object.keys(z.meshes).length === MESHES)) break;
    if (now - killedAt > 300_000)
      throw new Error(
        `not every zone came back within 300 s: ${back.filter((z) => z.connects < 2).length} missing`,
      );
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  const resyncMs = Math.round(performance.now() - killedAt);
  const refusedTotal = await overloaded(second.admin);
  const meshesResent = back.reduce((n, z) => n + z.meshesReceived, 0) - receivedBefore;
  const inspect = spawn(
    process.execPath,
    [bin, "inspect", "zones", "--server", second.admin, "-o", "json"],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let json = "";
  inspect.stdout.on("data", (d: Buffer) => (json += d.toString()));
  await new Promise((resolve) => inspect.once("exit", resolve));
  const zones = JSON.parse(json) as {
    types: { kind: string; resourcesReceived?: number | string }[];
  }[];
  const dataplanesResent = zones.reduce(
    (n, z) => n + Number(z.types.find((t) => t.kind === "Dataplane")?.resourcesReceived ?? 0),
    0,
  );
  const total = ZONES * (MESHES + DATAPLANES);
  const summary = {
    zones: ZONES,
    zoneProcesses: PROCESSES,
    globalUpMs: upMs,
    resyncMs,
    refusedHandshakes: refusedTotal,
    refusedPeakPerSecond: Math.round(peakPerSecond),
    meshesResent,
    dataplanesResent,
    resentShare: (meshesResent + dataplanesResent) / total,
  };
  console.log(
    `restart storm: ${ZONES} zones; the global was listening again ${upMs} ms after SIGKILL; every zone back and synced after ${resyncMs} ms; ${refusedTotal} handshakes refused as overloaded (peak ${summary.refusedPeakPerSecond}/s); resent ${meshesResent} Meshes and ${dataplanesResent} Dataplanes of ${total} resources (${(summary.resentShare * 100).toFixed(2)}%)`,
  );
  console.log(JSON.stringify(summary));
} finally {
  for (const c of children) c.stdin.end();
  current?.child.kill("SIGKILL");
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  await admin.unsafe(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  await admin.end({ timeout: 5 });
}
