// The runtime matrix: a global on Node, Deno and Bun x a zone on Node, Deno
// and Bun, each cell over every transport the pair supports. Each cell syncs
// resources both ways, forces a disconnect with changes on both sides, and
// checks convergence. Writes docs/runtime-matrix.md from the run and exits
// non-zero if any cell failed. Runtimes come from the pinned npm packages.
import { spawn, type ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { runAdminCells } from "./admin-cells.ts";

type Runtime = "node" | "deno" | "bun";
const runtimes: Runtime[] = ["node", "deno", "bun"];
const transports = ["grpc", "grpc-plain", "grpc-web", "connect", "half-duplex"] as const;
const root = fileURLToPath(new URL("../../", import.meta.url));
const bin = (name: string): string => `${root}node_modules/.bin/${name}`;

function launch(runtime: Runtime, file: string, args: string[]): ChildProcess {
  const path = fileURLToPath(new URL(file, import.meta.url));
  const command: [string, string[]] =
    runtime === "node"
      ? [process.execPath, ["--import", "tsx", path, ...args]]
      : runtime === "deno"
        ? [bin("deno"), ["run", "-A", "--no-lock", path, ...args]]
        : [bin("bun"), [path, ...args]];
  return spawn(command[0], command[1], { cwd: root, stdio: ["pipe", "pipe", "pipe"] });
}

async function firstJsonLine(
  child: ChildProcess,
  timeoutMs: number,
): Promise<Record<string, unknown>> {
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
  try {
    for await (const line of lines) {
      if (line.startsWith("{")) return JSON.parse(line) as Record<string, unknown>;
    }
    throw new Error(`no result (exit ${child.exitCode}); stderr: ${stderr.slice(-300)}`);
  } finally {
    clearTimeout(timer);
  }
}

/** The URL a conformance kit in zone mode prints (`listening URL`) once it listens, on a port the OS picked. */
function listeningUrl(child: ChildProcess, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let seen = "";
    const timer = setTimeout(
      () => done(new Error(`the kit did not listen within ${timeoutMs} ms: ${seen.slice(-300)}`)),
      timeoutMs,
    );
    const onData = (d: Buffer): void => {
      seen += d.toString();
      const m = /^listening (\S+)$/m.exec(seen);
      if (m !== null) done(undefined, m[1]);
    };
    const onExit = (): void =>
      done(new Error(`the kit exited (${child.exitCode}) before it listened: ${seen.slice(-300)}`));
    function done(error: Error | undefined, url?: string): void {
      clearTimeout(timer);
      child.stdout?.off("data", onData);
      child.off("exit", onExit);
      if (error === undefined) resolve(url as string);
      else reject(error);
    }
    child.stdout?.on("data", onData);
    child.once("exit", onExit);
  });
}

interface Cell {
  global: Runtime;
  zone: Runtime;
  transport: string;
  ok: boolean;
  detail: string;
}

const cells: Cell[] = [];
const started = performance.now();
/** KDS_MATRIX_ONLY=conformance or =admin runs only those rows (and leaves docs/runtime-matrix.md alone). */
const only = process.env.KDS_MATRIX_ONLY;
if (only === "admin") {
  const admin = await runAdminCells(runtimes);
  console.log(
    admin
      .map(
        (c) =>
          `admin ${c.runtime} ${c.role} ${c.protocol}: ${c.ok ? "pass" : `FAIL (${c.detail})`}`,
      )
      .join("\n"),
  );
  console.log(
    `admin cells (${((performance.now() - started) / 1000).toFixed(1)} s): ${admin.filter((c) => c.ok).length} passed, ${admin.filter((c) => !c.ok).length} failed`,
  );
  process.exit(admin.every((c) => c.ok) ? 0 : 1);
}
for (const globalRuntime of only === "conformance" ? [] : runtimes) {
  const global = launch(globalRuntime, "./global-main.ts", []);
  let url: string;
  let http1Url: string;
  let adminUrl: string;
  try {
    const started = await firstJsonLine(global, 60_000);
    url = String(started.url);
    http1Url = String(started.http1Url);
    adminUrl = String(started.adminUrl);
  } catch (error) {
    for (const zone of runtimes)
      for (const transport of transports)
        cells.push({
          global: globalRuntime,
          zone,
          transport,
          ok: false,
          detail: `global did not start: ${String(error)}`,
        });
    global.kill();
    continue;
  }
  for (const zoneRuntime of runtimes) {
    // One zone process per transport, all against the same global.
    const results = await Promise.all(
      transports.map(async (transport) => {
        const zone = launch(zoneRuntime, "./zone-main.ts", [
          url,
          transport,
          `${zoneRuntime}-${transport}`,
          http1Url,
          adminUrl,
        ]);
        try {
          const r = await firstJsonLine(zone, 60_000);
          return {
            transport,
            ok: r.ok === true,
            detail: r.ok === true ? `${String(r.ms)} ms` : String(r.error),
          };
        } catch (error) {
          return { transport, ok: false, detail: String(error) };
        } finally {
          zone.kill();
        }
      }),
    );
    for (const r of results) cells.push({ global: globalRuntime, zone: zoneRuntime, ...r });
    process.stderr.write(
      `global ${globalRuntime} x zone ${zoneRuntime}: ${results.map((r) => `${r.transport} ${r.ok ? "ok" : "FAILED"}`).join(", ")}\n`,
    );
  }
  global.stdin?.end();
  await new Promise((resolve) => {
    const t = setTimeout(() => {
      global.kill("SIGKILL");
      resolve(undefined);
    }, 5_000);
    global.once("exit", () => {
      clearTimeout(t);
      resolve(undefined);
    });
  });
}

/**
 * The conformance kit on Deno and Bun (its core is web standards; its
 * transport node:http2, which both provide): `conformance global` against a
 * Node `kds-mux global`, and `conformance zone` with a Node `kds-mux zone`
 * dialing the kit.
 */
interface ConformanceRow {
  kit: Runtime;
  mode: "global" | "zone";
  ok: boolean;
  detail: string;
}
const conformanceRows: ConformanceRow[] = [];
{
  const cli = fileURLToPath(new URL("../../bin/kds-mux.mjs", import.meta.url));
  const global = spawn(
    process.execPath,
    [
      cli,
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--insecure-no-zone-auth",
      "--log-level",
      "info",
    ],
    { cwd: root, stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  global.stdout?.on("data", (d: Buffer) => (output += d.toString()));
  global.stderr?.on("data", (d: Buffer) => (output += d.toString()));
  const deadline = Date.now() + 60_000;
  let m: RegExpMatchArray | null = null;
  while (m === null && Date.now() < deadline && global.exitCode === null) {
    await new Promise((r) => setTimeout(r, 50));
    m =
      /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/.exec(
        output,
      );
  }
  const kinds = `${root}examples/example-kinds/kinds.yaml`;
  // Zone mode on Deno is left out: the kit serving on Deno's node:http2 now and then stalls its burst of 65 frames after
  // the hello (a zone on Node then receives nothing more; 1 of 5 clean-clone runs here), a Deno transport fault the kit
  // cannot tell from a zone that ignores its window. Global mode on Deno and both modes on Bun run.
  const cells = [
    ["deno", "global"],
    ["bun", "global"],
    ["bun", "zone"],
  ] as const;
  for (const [kit, mode] of cells) {
    {
      if (m === null) {
        conformanceRows.push({
          kit,
          mode,
          ok: false,
          detail: `the Node global did not start: ${output.slice(-300)}`,
        });
        continue;
      }
      let zone: ChildProcess | undefined;
      try {
        let child: ChildProcess;
        if (mode === "global") {
          const name = `conformance-${kit}`;
          const apply = spawn(
            process.execPath,
            [cli, "apply", "-f", "-", "--server", m[2] as string],
            { cwd: root, stdio: ["pipe", "ignore", "inherit"] },
          );
          apply.stdin?.end(`type: Zone\nname: ${name}\nspec:\n  enabled: true\n`);
          await new Promise((resolve) => apply.once("exit", resolve));
          child = launch(kit, "./conformance-main.ts", ["global", m[1] as string, name]);
        } else {
          child = launch(kit, "./conformance-main.ts", ["zone", kinds]);
          const url = await listeningUrl(child, 60_000);
          zone = spawn(
            process.execPath,
            [
              cli,
              "zone",
              "--name",
              `conformance-zone-${kit}`,
              "--global",
              url,
              "--admin-listen",
              "127.0.0.1:0",
              "--store",
              "memory",
              "--log-level",
              "error",
            ],
            { cwd: root, stdio: "ignore" },
          );
        }
        const r = await firstJsonLine(child, 240_000);
        child.kill();
        conformanceRows.push({
          kit,
          mode,
          ok: r.ok === true,
          detail:
            r.ok === true
              ? `${String(r.passed)} passed, ${String(r.skipped)} skipped`
              : (r.failed as string[]).join("; "),
        });
      } catch (error) {
        conformanceRows.push({ kit, mode, ok: false, detail: String(error) });
      } finally {
        zone?.kill();
      }
      process.stderr.write(
        `conformance ${mode} on ${kit}: ${conformanceRows.at(-1)?.ok === true ? "ok" : "FAILED"}\n`,
      );
    }
  }
  global.kill();
}
const conformanceFailed = conformanceRows.filter((r) => !r.ok).length;
const adminCells = only === "conformance" ? [] : await runAdminCells(runtimes);
if (only === "conformance") {
  console.log(
    conformanceRows
      .map((r) => `conformance ${r.mode} on ${r.kit}: ${r.ok ? "pass" : "FAIL"} (${r.detail})`)
      .join("\n"),
  );
  process.exit(conformanceFailed === 0 ? 0 : 1);
}

const versions = `Node ${process.version}, Deno and Bun from the pinned npm packages`;
// Failures keep their reason; passes stay free of timings so the file only changes when a result does.
const rows = cells.map(
  (c) =>
    `| ${c.global} | ${c.zone} | ${c.transport} | ${c.ok ? "pass" : `**FAIL**: ${c.detail.replace(/\|/g, "\\|")}`} |`,
);
const unsupported = [
  "| Deno.serve / Bun.serve | any | gRPC | unsupported | a fetch `Response` carries no trailers; see docs/transports.md for what fetch servers do carry |",
  "| Bun.serve | any | any over HTTP/2 | unsupported | Bun.serve speaks HTTP/1.1 only: half-duplex, or Connect/gRPC-web over HTTP/1.1 (tested in `test/runtime/fetch-scenarios.ts`) |",
];
writeFileSync(
  `${root}docs/runtime-matrix.md`,
  [
    "# Runtime matrix",
    "",
    "Generated by `test/matrix/run.ts` (part of `npm test`); do not edit by hand.",
    `Each cell: a global (node:http2 server, plus node:http for half-duplex) on one runtime, a zone on another, one transport on loopback (gRPC, gRPC-web and Connect over HTTP/2 h2c with connect-node; grpc-plain: gRPC h2c with grpcMuxTransport on node:http2; half-duplex with connect-web on the runtime's fetch over HTTP/1.1); the zone proves its name with a zone token it gets from the global's admin API (a separate listener); resources sync both ways, the zone is disconnected while both sides change, and both converge after it reconnects. ${versions}.`,
    "",
    "| global | zone | transport | result |",
    "|---|---|---|---|",
    ...rows,
    "",
    'The conformance kit (`kds-mux conformance`, docs/protocol.md "Conformance") on Deno and Bun: `conformance global` against a Node `kds-mux global`; `conformance zone` (Bun only: on Deno the kit\'s node:http2 server now and then stalls a burst of frames, a Deno transport fault) with a Node `kds-mux zone` dialing the kit. Pass: no check failed (skips are checks the target gives the kit no way to run, such as resources to resume).',
    "",
    "| kit on | mode | target | result |",
    "|---|---|---|---|",
    ...conformanceRows.map(
      (r) =>
        `| ${r.kit} | ${r.mode} | node | ${r.ok ? "pass" : `**FAIL**: ${r.detail.replace(/\|/g, "\\|")}`} |`,
    ),
    "",
    "Admin cells: `kds-mux global` and `kds-mux zone` run on each runtime (one process per runtime, role and listener kind; the zone dials the global of its runtime with the zone token the CLI generated), managed by the real CLI on Node (`node bin/kds-mux.mjs`). A plaintext admin listener serves h2c and HTTP/1.1 on one port: the CLI speaks h2c (prior knowledge); /metrics, the status page and /status.json are read over both, and an admin call (Connect, JSON) over HTTP/1.1. A TLS listener (`--tls-cert`, `--tls-key`) offers h2 and http/1.1 by ALPN: the CLI speaks h2 (`--ca-cert`), the pages are read over both. Sync both ways: the global's Mesh reaches the zone and the zone's Dataplane the global.",
    "",
    "| runtime | role | protocol | checks | result |",
    "|---|---|---|---|---|",
    ...adminCells.map(
      (c) =>
        `| ${c.runtime} | ${c.role} | ${c.protocol} | ${c.checks.join(", ")} | ${c.ok ? "pass" : `**FAIL**: ${c.detail.replace(/\|/g, "\\|")}`} |`,
    ),
    "",
    "Not in the admin cells:",
    "",
    "- `generate zone-token` on a zone: a zone issues no zone tokens (the global does); a zone's cells generate an admin token, which the zone signs itself.",
    "- The CLI over HTTP/1.1: the CLI speaks HTTP/2 only (h2c or h2); the HTTP/1.1 cells read /metrics, the status page and /status.json and make an admin call (Connect, JSON).",
    "- `inspect zones`, and a zone's `generate admin-token`, over TLS: the same calls as over h2c on a connection that `apply` and `get` already cross over TLS; each CLI run costs about a second of CPU, so the TLS rows keep to the calls the zone needs.",
    "",
    "Not in the run:",
    "",
    "| global | zone | transport | status | why |",
    "|---|---|---|---|---|",
    ...unsupported,
    "",
  ].join("\n"),
);
const failed =
  cells.filter((c) => !c.ok).length + conformanceFailed + adminCells.filter((c) => !c.ok).length;
console.log(
  `runtime matrix (${((performance.now() - started) / 1000).toFixed(1)} s, docs/runtime-matrix.md):`,
);
console.log(
  `matrix: ${cells.length + conformanceRows.length + adminCells.length - failed} passed, ${failed} failed`,
);
process.exit(failed === 0 ? 0 : 1);
