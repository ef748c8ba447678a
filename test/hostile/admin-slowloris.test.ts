// Issue 24, item 4, as the attacker did it: a real `kds-mux global` whose admin listener is not on a
// loopback address (bound to 0.0.0.0, reached through 127.0.0.1), so every call needs an admin token,
// with 148 tokenless slow connections against its 128 slots: HTTP/2 requests that never finish, and
// HTTP/1.1 requests at one byte per 15 s (from the first byte, or after a quick request line), each
// opened again as soon as the global closes it. An operator's `get` must get a slot at once, by
// evicting the oldest unauthenticated connection, and /metrics must answer throughout. The global's
// authentication and request timeouts are set far beyond the attack (see HELD_TIMEOUT), so eviction
// is the only way a call can get in: the test checks that mechanism (evictions counted, nothing closed
// by a timeout), not a wall-clock figure (the issue's 2 s is logged beside the calls' times). The
// attack runs at the full size in `npm test`.
import { readFileSync } from "node:fs";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminClient, type AdminTarget } from "../../src/cli/admin-client.ts";
import { parseMetrics } from "../observe/scrape.ts";
import { KdsProcess, run } from "../cli/process.ts";
import { adminSlowloris, descriptors, rssMiB } from "./floods.ts";

/** The attack of the issue: 148 connections against 128 admin slots, one byte per 15 s. */
const SLOW_CONNECTIONS = 148;
const ADMIN_MAX_CONNECTIONS = 128;
const BYTE_EVERY_MS = 15_000;
/** The issue's acceptance figure for an operator's call during the attack (logged beside the calls' times). */
const CALL_TARGET_MS = 2_000;
/**
 * The global's --auth-timeout and --request-timeout here: far longer than the attack and the test, so
 * no attacking connection is closed by a timeout and a slot can only come from eviction at the cap.
 */
const HELD_TIMEOUT = "600s";
/**
 * What each call is held to: well below HELD_TIMEOUT, which a call that did not get a slot by eviction
 * would wait for (the test's own timeout ends it first). A call that got in by eviction took 0.1-0.2 s
 * on a quiet machine and more than 2 s at a load of 17-19 on 2 cores, which failed bounds of 2 s and
 * 5 s: the figure is for bench/, the mechanism for the test.
 */
const CALL_BOUND_MS = 60_000;
/** How long the attack is held at least: past one byte interval of the slow HTTP/1.1 connections. */
const ATTACK_MS = 20_000;
/**
 * How many operator calls (and scrapes) are made during the attack, 2 s apart. A count, not "until
 * ATTACK_MS": on a loaded machine the CLI call before them took 15 s once, which left fewer calls.
 */
const CALLS = 5;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Runs `work` and returns its result and how long it took. */
async function timed<T>(work: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const started = performance.now();
  const value = await work();
  return { value, ms: Math.round(performance.now() - started) };
}

describe(`admin slowloris: ${SLOW_CONNECTIONS} tokenless slow connections on a token-protected admin listener (--admin-max-connections ${ADMIN_MAX_CONNECTIONS})`, {
  timeout: 300_000,
}, () => {
  let global: KdsProcess;
  let port: number;
  let admin: AdminTarget;

  const scrape = (token?: string): Promise<Response> =>
    fetch(`${admin.url}/metrics`, {
      headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
    });

  beforeAll(async () => {
    const tokenFile = join(mkdtempSync(join(tmpdir(), "kds-mux-slowloris-")), "admin.token");
    global = new KdsProcess([
      "global",
      ...[
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "0.0.0.0:0",
        "--admin-token-file",
        tokenFile,
        "--store",
        "memory",
      ],
      ...["--auth-timeout", HELD_TIMEOUT, "--request-timeout", HELD_TIMEOUT],
      ...["--admin-max-connections", String(ADMIN_MAX_CONNECTIONS)],
    ]);
    port = Number((await global.waitFor(/admin API on http:\/\/0\.0\.0\.0:(\d+)/, 120_000))[1]);
    admin = { url: `http://127.0.0.1:${port}`, token: readFileSync(tokenFile, "utf8").trim() };
    await adminClient(admin).apply({
      resources: [{ type: "Mesh", name: "default", specJson: '{"mtls":true}' }],
    });
  }, 180_000);

  afterAll(async () => {
    await global?.stop();
  });

  it(`an operator's get gets a slot by eviction (not by a timeout, held at ${HELD_TIMEOUT}; the issue's figure: ${CALL_TARGET_MS} ms) and /metrics answers while the attack holds the listener`, async () => {
    const pid = global.child.pid as number;
    const token = admin.token as string;
    // Before: the same calls on a quiet listener, for comparison.
    const quietGet = await timed(() => adminClient(admin).get({ type: "Mesh" }));
    const quietCli = await timed(() =>
      run(["get", "Mesh", "--server", admin.url, "--token", token]),
    );
    expect(quietCli.value.code, quietCli.value.stderr).toBe(0);
    const fdsBefore = descriptors(pid);
    const flood = adminSlowloris(port, SLOW_CONNECTIONS, BYTE_EVERY_MS);
    const gets: number[] = [];
    const scrapes: number[] = [];
    let cli: Awaited<ReturnType<typeof timed<Awaited<ReturnType<typeof run>>>>>;
    let peakFds = fdsBefore;
    let peakHeld = 0;
    const sampler = setInterval(() => {
      peakFds = Math.max(peakFds, descriptors(pid));
      peakHeld = Math.max(peakHeld, flood.open());
    }, 250);
    const started = performance.now();
    try {
      await sleep(3_000); // the attacker is established
      cli = await timed(() => run(["get", "Mesh", "--server", admin.url, "--token", token]));
      // Bounded by count: CALLS operator calls and scrapes, 2 s apart; the attack then lasts at least ATTACK_MS.
      for (let call = 0; call < CALLS; call++) {
        const got = await timed(() => adminClient(admin).get({ type: "Mesh" }));
        expect(got.value.resources.map((r) => r.name)).toContain("default");
        gets.push(got.ms);
        const scraped = await timed(async () => {
          const response = await scrape(token);
          return { status: response.status, text: await response.text() };
        });
        expect(scraped.value.status).toBe(200);
        expect(scraped.value.text).toContain("kds_connections_open");
        scrapes.push(scraped.ms);
        await sleep(2_000);
      }
      await sleep(Math.max(0, ATTACK_MS - (performance.now() - started)));
    } finally {
      flood.stop();
      clearInterval(sampler);
    }
    const anonymous = await scrape();
    expect(anonymous.status).toBe(401);
    const metrics = await parseMetrics(await (await scrape(token)).text());
    const evicted = metrics.value("kds_connections_evicted_total", { listener: "admin" });
    const unauthenticated = metrics.value("kds_connections_unauthenticated_closed_total", {
      listener: "admin",
    });
    const refused = metrics.value("kds_connections_refused_total", { listener: "admin" });
    console.log(
      `admin slowloris: ${SLOW_CONNECTIONS} tokenless connections at a time for ${Math.round(performance.now() - started)} ms (HTTP/2 never-finished ${flood.byKind.h2}, HTTP/1.1 1 byte per ${BYTE_EVERY_MS} ms from the start ${flood.byKind["h1-line"]}, ` +
        `after a quick request line ${flood.byKind["h1-head"]} opened in all; ${flood.connections} connections, ${flood.closedByGlobal} closed by the global, at most ${peakHeld} looked open to the attacker at once); ` +
        `global evicted ${evicted} at its cap of ${ADMIN_MAX_CONNECTIONS}, closed ${unauthenticated} after the authentication timeout (${HELD_TIMEOUT}), refused ${refused}; ` +
        `operator get (in-process) ${gets.join(", ")} ms (quiet: ${quietGet.ms} ms; the issue's figure ${CALL_TARGET_MS} ms); kds-mux get (CLI process) ${cli.ms} ms (quiet: ${quietCli.ms} ms); /metrics ${scrapes.join(", ")} ms; ` +
        `global descriptors ${fdsBefore} before, peak ${peakFds}; RSS ${rssMiB(pid)} MiB`,
    );
    expect(cli.value.code, cli.value.stderr).toBe(0);
    expect(cli.value.stdout).toContain("default");
    // The CLI's time is mostly starting a process (and compiling TypeScript in a checkout), which
    // swings by seconds on a loaded machine whatever the listener does: it is logged, not bounded. The
    // bound is on the calls themselves, made in this process against the attacked listener.
    expect(gets).toHaveLength(CALLS);
    for (const ms of gets) expect(ms).toBeLessThan(CALL_BOUND_MS);
    for (const ms of scrapes) expect(ms).toBeLessThan(CALL_BOUND_MS);
    // Every slot the calls got came from eviction: no attacking connection reached a timeout.
    expect(evicted).toBeGreaterThan(0);
    expect(unauthenticated).toBe(0);
    expect(global.output).toMatch(
      /the admin listener holds 128 connections \(--admin-max-connections\): closing the oldest unauthenticated one/,
    );
  });
});
