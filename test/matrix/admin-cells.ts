// The runtime matrix's admin cells: `kds-mux global` and `kds-mux zone` run
// on Node, Deno and Bun (one process per runtime, role and listener kind), and
// the real CLI on Node (bin/kds-mux.mjs) manages each: apply, get, inspect
// zones, generate a token; /metrics, the status page and an admin call are
// read over HTTP/1.1 (what Prometheus and browsers speak) and HTTP/2. The
// zone dials the global of its runtime with the zone token the CLI made, and
// both sides must converge. Plaintext listeners serve h2c and HTTP/1.1 on
// one port; TLS ones offer h2 and http/1.1 by ALPN.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as http from "node:http";
import * as http2 from "node:http2";
import * as https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createCa } from "../support/certs.ts";

type Runtime = "node" | "deno" | "bun";
/** How a row reached the admin API: h2c and HTTP/1.1 on a plaintext listener, or TLS (h2 and http/1.1 by ALPN). */
export type AdminProtocol = "h2c" | "HTTP/1.1" | "TLS";

/** One row of the admin table: a runtime hosting a role, reached over one protocol. */
export interface AdminCell {
  readonly runtime: Runtime;
  readonly role: "global" | "zone";
  readonly protocol: AdminProtocol;
  /** The checks run, in order. */
  readonly checks: string[];
  readonly ok: boolean;
  /** Why it failed (the first failed check and its output). */
  readonly detail: string;
}

const root = fileURLToPath(new URL("../../", import.meta.url));
const cli = `${root}bin/kds-mux.mjs`;
const bin = (name: string): string => `${root}node_modules/.bin/${name}`;

/** `kds-mux ARGS` on `runtime`, its output collected. */
function kdsMux(runtime: Runtime, args: string[]): ChildProcess {
  const command: [string, string[]] =
    runtime === "node"
      ? [process.execPath, [cli, ...args]]
      : runtime === "deno"
        ? [bin("deno"), ["run", "-A", "--no-lock", cli, ...args]]
        : [bin("bun"), [cli, ...args]];
  return spawn(command[0], command[1], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
}

/** Waits for `pattern` in `child`'s output (both streams), at most `timeoutMs`. */
function waitFor(
  child: ChildProcess,
  pattern: RegExp,
  timeoutMs: number,
): Promise<RegExpExecArray> {
  return new Promise((resolve, reject) => {
    let output = "";
    const done = (error?: Error, match?: RegExpExecArray): void => {
      clearTimeout(timer);
      child.stdout?.off("data", onData);
      child.stderr?.off("data", onData);
      child.off("exit", onExit);
      if (match !== undefined) resolve(match);
      else reject(error);
    };
    const onData = (chunk: Buffer): void => {
      output += chunk.toString();
      const match = pattern.exec(output);
      if (match !== null) done(undefined, match);
    };
    const onExit = (code: number | null): void =>
      done(new Error(`exited (${String(code)}) before it listened: ${output.slice(-400)}`));
    const timer = setTimeout(
      () => done(new Error(`did not listen within ${timeoutMs} ms: ${output.slice(-400)}`)),
      timeoutMs,
    );
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", onExit);
  });
}

/** Runs the CLI on Node with `args` (and `stdin`); resolves with its exit code and output. */
function runCli(
  args: string[],
  stdin?: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [cli, ...args], {
      cwd: root,
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin?.end(stdin ?? "");
  });
}

interface Answer {
  readonly status: number;
  readonly version: string;
  readonly body: string;
}

/** A request over HTTP/1.1 (https: with ALPN http/1.1 only). */
function h1(
  url: string,
  path: string,
  ca: string | undefined,
  post?: { contentType: string; body: string },
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const target = new URL(path, url);
    const options = {
      method: post === undefined ? "GET" : "POST",
      headers: post === undefined ? {} : { "content-type": post.contentType },
      timeout: 20_000,
      agent: false as const,
      ...(target.protocol === "https:" ? { ca, ALPNProtocols: ["http/1.1"] } : {}),
    };
    const request = (target.protocol === "https:" ? https : http).request(
      target,
      options,
      (response) => {
        let body = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => (body += chunk));
        response.on("end", () =>
          resolve({ status: response.statusCode ?? 0, version: response.httpVersion, body }),
        );
        response.on("error", reject);
      },
    );
    request.on("timeout", () => request.destroy(new Error("no answer within 20 s")));
    request.on("error", reject);
    request.end(post?.body);
  });
}

/** A GET over HTTP/2 (h2c with prior knowledge for http:, h2 by ALPN for https:). */
function h2(url: string, path: string, ca: string | undefined): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url, ca === undefined ? {} : { ca });
    const fail = (error: Error): void => {
      session.destroy();
      reject(error);
    };
    session.on("error", fail);
    session.setTimeout(20_000, () => fail(new Error("no answer within 20 s")));
    const stream = session.request({ ":path": path });
    let status = 0;
    let body = "";
    stream.setEncoding("utf8");
    stream.on("response", (headers) => (status = Number(headers[":status"])));
    stream.on("data", (chunk: string) => (body += chunk));
    stream.on("end", () => {
      session.close();
      resolve({ status, version: "2.0", body });
    });
    stream.on("error", fail);
  });
}

/** A failed check: its name and what was seen. */
class CheckFailed extends Error {}

/** Runs the named checks of one row in order; the first failure ends the row. */
async function row(
  names: string[],
  steps: (check: (name: string, work: () => Promise<void>) => Promise<void>) => Promise<void>,
): Promise<{ checks: string[]; ok: boolean; detail: string }> {
  try {
    await steps(async (name, work) => {
      try {
        await work();
      } catch (error) {
        throw new CheckFailed(`${name}: ${error instanceof Error ? error.message : String(error)}`);
      }
    });
    return { checks: names, ok: true, detail: "" };
  } catch (error) {
    return {
      checks: names,
      ok: false,
      detail: (error instanceof Error ? error.message : String(error))
        .replace(/\s+/g, " ")
        .slice(0, 400),
    };
  }
}

/** Asserts a CLI run succeeded and its stdout matches `pattern`. */
function expectCli(
  r: { code: number | null; stdout: string; stderr: string },
  pattern: RegExp,
): void {
  if (r.code !== 0 || !pattern.test(r.stdout))
    throw new Error(`exit ${String(r.code)}; ${(r.stderr || r.stdout).trim().slice(0, 300)}`);
}

/** Asserts an HTTP answer is 200 in `version` with a body matching `pattern`. */
function expectPage(answer: Answer, version: string, pattern: RegExp): void {
  if (answer.status !== 200 || answer.version !== version || !pattern.test(answer.body))
    throw new Error(
      `HTTP ${answer.status} over ${answer.version}: ${answer.body.slice(0, 200).replace(/\s+/g, " ")}`,
    );
}

/** Polls `condition` (bounded in time and count) until it holds. */
async function eventually(what: string, condition: () => Promise<boolean>): Promise<void> {
  for (let attempt = 0; attempt < 150; attempt++) {
    if (await condition()) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`not within 30 s: ${what}`);
}

/** The admin call `method` of AdminService with a JSON `body` over HTTP/1.1 (Connect protocol). */
async function rpcOverH1(
  url: string,
  method: string,
  body: object,
  ca: string | undefined,
): Promise<Answer> {
  return h1(url, `/kds.admin.v1.AdminService/${method}`, ca, {
    contentType: "application/json",
    body: JSON.stringify(body),
  });
}

/** Whether `url`'s Get of `type` (over HTTP/1.1) lists a resource named `name`. */
async function lists(
  url: string,
  ca: string | undefined,
  query: { type: string; mesh?: string },
  name: string,
): Promise<boolean> {
  const answer = await rpcOverH1(url, "Get", query, ca);
  if (answer.status !== 200) return false;
  const resources = (JSON.parse(answer.body) as { resources?: { name?: string }[] }).resources;
  return (resources ?? []).some((r) => r.name === name);
}

/** The observability checks of one listener over one protocol. */
async function observeChecks(
  check: (name: string, work: () => Promise<void>) => Promise<void>,
  get: (path: string) => Promise<Answer>,
  version: string,
  label: string,
): Promise<void> {
  await check(`/metrics ${label}`, async () =>
    expectPage(await get("/metrics"), version, /^# HELP /m),
  );
  await check(`status page ${label}`, async () => expectPage(await get("/"), version, /<html/i));
  await check(`/status.json ${label}`, async () =>
    expectPage(await get("/status.json"), version, /"role"/),
  );
}

/** Stops `child` (SIGKILL: what is checked here ended before) and waits for it. */
async function stop(child: ChildProcess | undefined): Promise<void> {
  if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGKILL");
  await exited;
}

/** The rows of one runtime and listener kind: a global and a zone dialing it, each checked. */
async function runtimeRows(
  runtime: Runtime,
  tls: { cert: string; key: string; ca: string } | undefined,
  dir: string,
): Promise<AdminCell[]> {
  const tag = `${runtime}-${tls === undefined ? "plain" : "tls"}`;
  const zoneName = `admin-${tag}`;
  const meshName = `mesh-${tag}`;
  const tlsArgs = tls === undefined ? [] : ["--tls-cert", tls.cert, "--tls-key", tls.key];
  const caArgs = tls === undefined ? [] : ["--ca-cert", tls.ca];
  const ca = tls === undefined ? undefined : readFileSync(tls.ca, "utf8");
  const protocols: AdminProtocol[] = tls === undefined ? ["h2c", "HTTP/1.1"] : ["TLS"];
  const cliProtocol = tls === undefined ? "h2c" : "TLS";
  // Every CLI command over h2c; over TLS (the same calls on another connection) the ones the zone needs and apply and get, as each CLI run costs about a second of CPU.
  const everyCommand = tls === undefined;
  const cells: AdminCell[] = [];
  let global: ChildProcess | undefined;
  let zone: ChildProcess | undefined;
  const failAll = (role: "global" | "zone", detail: string): void => {
    for (const protocol of protocols)
      cells.push({ runtime, role, protocol, checks: [], ok: false, detail });
  };
  try {
    global = kdsMux(runtime, [
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--log-level",
      "info",
      ...tlsArgs,
    ]);
    let globalUrls: RegExpExecArray;
    try {
      globalUrls = await waitFor(
        global,
        /listening on (https?:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (https?:\/\/127\.0\.0\.1:\d+)/,
        90_000,
      );
    } catch (error) {
      failAll("global", `the global did not start: ${String(error)}`);
      failAll("zone", "no global to dial");
      return cells;
    }
    const zoneListener = globalUrls[1] as string;
    const globalAdmin = globalUrls[2] as string;
    const server = ["--server", globalAdmin, ...caArgs];
    const tokenFile = join(dir, `${tag}.token`);
    // What the zone needs first: its Zone resource and a zone token.
    const registered = await row(["apply", "generate zone-token"], async (check) => {
      await check("apply", async () =>
        expectCli(
          await runCli(
            ["apply", "-f", "-", ...server],
            `type: Zone\nname: ${zoneName}\nspec:\n  enabled: true\n---\ntype: Mesh\nname: ${meshName}\n`,
          ),
          /./,
        ),
      );
      await check("generate zone-token", async () => {
        const r = await runCli(["generate", "zone-token", "--zone", zoneName, ...server]);
        expectCli(r, /^[\w-]+\.[\w-]+\.[\w-]+\s*$/);
        writeFileSync(tokenFile, r.stdout.trim());
      });
    });
    if (!registered.ok) {
      cells.push({ runtime, role: "global", protocol: cliProtocol, ...registered });
      failAll("zone", `not started: ${registered.detail}`);
      return cells;
    }
    // The zone dials with the token the CLI made; the global's other checks run meanwhile (each CLI run is a process).
    zone = kdsMux(runtime, [
      "zone",
      "--name",
      zoneName,
      "--global",
      zoneListener,
      "--token-file",
      tokenFile,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--log-level",
      "info",
      ...tlsArgs,
      ...caArgs,
    ]);
    const zoneStarted = waitFor(
      zone,
      /admin API listening on (https?:\/\/127\.0\.0\.1:\d+)/,
      90_000,
    );
    // Observability (and, on plaintext, an admin call over HTTP/1.1) of a listener.
    const observeRows = async (role: "global" | "zone", url: string): Promise<void> => {
      if (tls === undefined) {
        const h2cRow = await row(["/metrics", "status page", "/status.json"], (check) =>
          observeChecks(check, (path) => h2(url, path, undefined), "2.0", "over h2c"),
        );
        const last = cells.filter((c) => c.role === role && c.protocol === "h2c").at(-1);
        if (last !== undefined) mergeInto(cells, last, h2cRow);
        const h1Row = await row(
          ["/metrics", "status page", "/status.json", "Get over HTTP/1.1 (Connect)"],
          async (check) => {
            await observeChecks(check, (path) => h1(url, path, undefined), "1.1", "over HTTP/1.1");
            await check("Get over HTTP/1.1 (Connect)", async () =>
              expectPage(
                await rpcOverH1(
                  url,
                  "Get",
                  { type: role === "global" ? "Mesh" : "Dataplane" },
                  undefined,
                ),
                "1.1",
                /"resources"|^\{\}$/,
              ),
            );
          },
        );
        cells.push({ runtime, role, protocol: "HTTP/1.1", ...h1Row });
      } else {
        const tlsRow = await row(["/metrics", "status page", "/status.json"], async (check) => {
          await observeChecks(check, (path) => h2(url, path, ca), "2.0", "over TLS h2");
          await observeChecks(check, (path) => h1(url, path, ca), "1.1", "over TLS HTTP/1.1");
        });
        const last = cells.filter((c) => c.role === role && c.protocol === "TLS").at(-1);
        if (last !== undefined) mergeInto(cells, last, tlsRow);
      }
    };
    const globalRest = async (): Promise<void> => {
      const rest = await row(["get", ...(everyCommand ? ["inspect zones"] : [])], (check) =>
        Promise.all([
          check("get", async () =>
            expectCli(await runCli(["get", "Mesh", ...server]), new RegExp(meshName)),
          ),
          everyCommand &&
            check("inspect zones", async () =>
              expectCli(await runCli(["inspect", "zones", ...server]), new RegExp(zoneName)),
            ),
        ]).then(() => undefined),
      );
      const cell: AdminCell = { runtime, role: "global", protocol: cliProtocol, ...registered };
      cells.push(cell);
      mergeInto(cells, cell, rest);
      await observeRows("global", globalAdmin);
    };
    const zoneRows = async (): Promise<void> => {
      let zoneAdmin: string;
      try {
        zoneAdmin = (await zoneStarted)[1] as string;
      } catch (error) {
        failAll("zone", `the zone did not start: ${String(error)}`);
        return;
      }
      const zoneServer = ["--server", zoneAdmin, ...caArgs];
      const dataplane = `dp-${tag}`;
      const zoneCli = await row(
        everyCommand
          ? ["apply", "get", "generate admin-token", "inspect zones", "sync both ways"]
          : ["apply", "get", "sync both ways"],
        async (check) => {
          await check("apply", async () =>
            expectCli(
              await runCli(
                ["apply", "-f", "-", ...zoneServer],
                `type: Dataplane\nmesh: default\nname: ${dataplane}\nspec:\n  address: 10.0.0.1\n`,
              ),
              /./,
            ),
          );
          await Promise.all([
            check("get", async () =>
              expectCli(
                await runCli(["get", "Dataplane", "--mesh", "default", ...zoneServer]),
                new RegExp(dataplane),
              ),
            ),
            // A zone signs its own admin tokens (zone tokens are the global's).
            everyCommand &&
              check("generate admin-token", async () =>
                expectCli(
                  await runCli([
                    "generate",
                    "admin-token",
                    "--name",
                    "matrix",
                    "--role",
                    "read-only",
                    ...zoneServer,
                  ]),
                  /^[\w-]+\.[\w-]+\.[\w-]+\s*$/,
                ),
              ),
            everyCommand &&
              check("inspect zones", async () =>
                expectCli(await runCli(["inspect", "zones", ...zoneServer]), new RegExp(zoneName)),
              ),
          ]);
          await check("sync both ways", async () => {
            await eventually(`the global's mesh ${meshName} reaches the zone`, () =>
              lists(zoneAdmin, ca, { type: "Mesh" }, meshName),
            );
            await eventually(`the zone's dataplane ${dataplane} reaches the global`, () =>
              lists(
                globalAdmin,
                ca,
                { type: "Dataplane", mesh: "default" },
                `${zoneName}.${dataplane}`,
              ),
            );
          });
        },
      );
      cells.push({ runtime, role: "zone", protocol: cliProtocol, ...zoneCli });
      await observeRows("zone", zoneAdmin);
    };
    await Promise.all([globalRest(), zoneRows()]);
    return cells;
  } finally {
    await Promise.all([stop(zone), stop(global)]);
  }
}

/** Appends `more`'s checks to `cell` (replacing it in `cells`), failing it when `more` failed. */
function mergeInto(
  cells: AdminCell[],
  cell: AdminCell,
  more: { checks: string[]; ok: boolean; detail: string },
): void {
  cells[cells.indexOf(cell)] = {
    ...cell,
    checks: [...cell.checks, ...more.checks],
    ok: cell.ok && more.ok,
    detail: [cell.detail, more.detail].filter((d) => d !== "").join("; "),
  };
}

/**
 * Runs every admin row: Node, Deno and Bun, each hosting a global and a zone
 * on a plaintext listener and on a TLS one, `parallel` runtimes at a time.
 */
export async function runAdminCells(
  runtimes: readonly Runtime[],
  parallel = 3,
): Promise<AdminCell[]> {
  const dir = mkdtempSync(join(tmpdir(), "kds-matrix-admin-"));
  try {
    const authority = await createCa("kds-matrix-admin-ca");
    const server = await authority.issue({ commonName: "localhost", server: true });
    const files = {
      cert: join(dir, "cert.pem"),
      key: join(dir, "key.pem"),
      ca: join(dir, "ca.pem"),
    };
    writeFileSync(files.cert, server.cert);
    writeFileSync(files.key, server.key, { mode: 0o600 });
    writeFileSync(files.ca, authority.cert);
    const jobs = runtimes.flatMap((runtime) => [
      () => runtimeRows(runtime, undefined, dir),
      () => runtimeRows(runtime, files, dir),
    ]);
    const results: AdminCell[][] = new Array(jobs.length);
    let next = 0;
    await Promise.all(
      Array.from({ length: Math.min(parallel, jobs.length) }, async () => {
        while (next < jobs.length) {
          const i = next++;
          results[i] = await (jobs[i] as () => Promise<AdminCell[]>)();
          for (const c of results[i])
            process.stderr.write(
              `admin ${c.runtime} ${c.role} ${c.protocol}: ${c.ok ? "ok" : `FAILED (${c.detail})`}\n`,
            );
        }
      }),
    );
    const order = (c: AdminCell): string =>
      `${runtimes.indexOf(c.runtime)}${c.role === "global" ? 0 : 1}${["h2c", "HTTP/1.1", "TLS"].indexOf(c.protocol)}`;
    return results.flat().sort((a, b) => order(a).localeCompare(order(b)));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
