// The PostgreSQL store's part of a restart storm (bench/restart-storm.ts), alone: a store
// opened anew on a database holding `zones` zones' Dataplanes (2 each) gets, for each zone,
// what a restarted global asks of it when the zone's session starts: two lists of the zone's
// resources of a zone-to-global kind and one lease write, the zones arriving at `rate` a second
// (0: all at once). Prints the wall time until every call answered, the calls' mean latency,
// and the CPU seconds of this process and of its PostgreSQL backends.
//
//   node --import ./bench/loader/register.mjs bench/storm-store.ts [zones=10000] [rate=1000]
//
// KDS_BENCH_DATABASE_URL (else KDS_TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres)
// names the server; a fresh database is created and dropped.
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import postgres from "postgres";
import { exampleTypes } from "../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../src/kinds/builtin-types.ts";
import { silentLogger } from "../src/log.ts";
import { PostgresStore } from "../src/store/postgres.ts";
import { dataplane } from "../test/store/fixtures.ts";

const ZONES = Number(process.argv[2] ?? 10_000);
const RATE = Number(process.argv[3] ?? 1_000);
const serverUrl =
  process.env.KDS_BENCH_DATABASE_URL ||
  process.env.KDS_TEST_DATABASE_URL ||
  "postgres://postgres@127.0.0.1:5432/postgres";

/** User plus system CPU seconds of process `pid` (Linux /proc; NaN elsewhere). */
function cpuSeconds(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return Number.NaN; // not Linux, or the server runs elsewhere
  }
}

const name = `kds_storm_store_${process.pid}`;
const admin = postgres(serverUrl, { max: 1, onnotice: () => undefined });
await admin.unsafe(`CREATE DATABASE "${name}"`);
const url = Object.assign(new URL(serverUrl), { pathname: `/${name}` }).href;
const types = createTypeRegistry(exampleTypes);
const zoneLabels = (zone: string) => ({ "kds.io/origin": "zone", "kds.io/zone": zone });
try {
  const filling = await PostgresStore.open(types, { url, logger: silentLogger });
  for (let first = 0; first < ZONES; first += 1_000) {
    await filling.apply(
      Array.from({ length: Math.min(1_000, ZONES - first) * 2 }, (_, i) => {
        const zone = `zone-${first + (i >> 1)}`;
        return {
          op: "put" as const,
          input: dataplane("default", `${zone}.dp-${i & 1}`, zoneLabels(zone)),
        };
      }),
    );
  }
  await filling.close();

  const store = await PostgresStore.open(types, { url, logger: silentLogger });
  const backends = async (): Promise<number> =>
    (
      await admin<{ pid: number }[]>`SELECT pid FROM pg_stat_activity WHERE datname = ${name}`
    ).reduce((n, r) => n + cpuSeconds(r.pid), 0);
  const pgBefore = await backends();
  const cpuBefore = process.cpuUsage();
  let listMs = 0;
  let putMs = 0;
  const timed = async <T>(p: () => Promise<T>, add: (ms: number) => void): Promise<T> => {
    const at = performance.now();
    const r = await p();
    add(performance.now() - at);
    return r;
  };
  const session = async (i: number): Promise<void> => {
    const zone = `zone-${i}`;
    await Promise.all([
      timed(
        () => store.list("Dataplane", { labels: zoneLabels(zone) }),
        (ms) => (listMs += ms),
      ),
      timed(
        () => store.list("Dataplane", { labels: zoneLabels(zone) }),
        (ms) => (listMs += ms),
      ),
      timed(
        () => store.put(dataplane("leases", `lease-${zone}`, {})),
        (ms) => (putMs += ms),
      ),
    ]);
  };
  const started = performance.now();
  const sessions: Promise<void>[] = [];
  for (let i = 0; i < ZONES; i++) {
    if (RATE > 0) {
      const due = started + (i * 1000) / RATE;
      const wait = due - performance.now();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    }
    sessions.push(session(i));
  }
  await Promise.all(sessions);
  const wallMs = performance.now() - started;
  const cpu = process.cpuUsage(cpuBefore);
  const pg = (await backends()) - pgBefore;
  await store.close();
  const summary = {
    zones: ZONES,
    rate: RATE,
    wallMs: Math.round(wallMs),
    listMeanMs: Number((listMs / (2 * ZONES)).toFixed(1)),
    putMeanMs: Number((putMs / ZONES).toFixed(1)),
    cpuSeconds: Number(((cpu.user + cpu.system) / 1e6).toFixed(2)),
    postgresCpuSeconds: Number(pg.toFixed(2)),
    loadAverage: loadavg().map((l) => Number(l.toFixed(2))),
  };
  console.log(JSON.stringify(summary));
} finally {
  await admin.unsafe(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  await admin.end({ timeout: 5 });
}
