/**
 * `kds-mux conformance global|zone`: runs the conformance kit against a
 * global (the kit dials it as a zone) or a zone (the kit listens, plays the
 * global, and the zone dials it), prints the table (or JSON) and fails when
 * a check fails.
 *
 * @module
 */
import type { Command } from "commander";
import { createTypeRegistry } from "../kinds/builtin-types.ts";
import { conformanceDialer, listenForZone } from "../adapters/node/conformance-link.ts";
import { checkGlobal, checkZone, formatTable, type CheckResult } from "../conformance/index.ts";
import { KdsError } from "../errors.ts";
import { kindCatalog } from "../sync/kind-catalog.ts";
import { withFlags } from "./option-flags.ts";
import { parseDuration, parseListen } from "./address.ts";
import { loadKindsFile } from "./kinds-file.ts";
import { readPem, readTokenFile } from "./secret-files.ts";
import { stopSignal } from "./signals.ts";

/** Flags of `kds-mux conformance global`. */
export interface ConformanceGlobalFlags {
  target: string;
  zone: string;
  tokenFile?: string;
  caCert?: string;
  json?: boolean;
}

/** Flags of `kds-mux conformance zone`. */
export interface ConformanceZoneFlags {
  listen: string;
  kinds?: string;
  wait: string;
  json?: boolean;
}

/** Where the command writes: the table or JSON to `out`, progress and the listening address to `err`. */
export interface ConformanceIo {
  out(text: string): void;
  err(text: string): void;
  signal: AbortSignal;
}

/** Runs global mode; rejects with a KdsError naming the failed rules when a check fails. */
export async function conformanceGlobal(
  flags: ConformanceGlobalFlags,
  io: ConformanceIo,
): Promise<void> {
  const token = flags.tokenFile === undefined ? undefined : readTokenFile(flags.tokenFile);
  const dial = conformanceDialer({
    url: flags.target,
    caPem: flags.caCert === undefined ? undefined : readPem(flags.caCert, "--ca-cert"),
  });
  const results = await checkGlobal({
    dial,
    zone: flags.zone,
    token,
    signal: io.signal,
    progress: io.err,
  });
  finish("global", flags.target, results, flags.json === true, io);
}

/** Runs zone mode; rejects with a KdsError naming the failed rules when a check fails. */
export async function conformanceZone(
  flags: ConformanceZoneFlags,
  io: ConformanceIo,
): Promise<void> {
  const { host, port } = parseListen(flags.listen);
  const catalog =
    flags.kinds === undefined
      ? undefined
      : kindCatalog(createTypeRegistry(loadKindsFile(flags.kinds).types).list());
  const listener = await listenForZone(host, port, io.signal);
  try {
    io.err(
      `conformance: listening on ${listener.url}; start the zone under test with --global ${listener.url} (the kit ends each session itself, so the zone redials ${4} times)`,
    );
    const results = await checkZone({
      accept: listener.accept,
      catalog,
      dialWaitMs: parseDuration(flags.wait),
      signal: io.signal,
      progress: io.err,
    });
    finish("zone", listener.url, results, flags.json === true, io);
  } finally {
    await listener.close();
  }
}

function finish(
  mode: "global" | "zone",
  target: string,
  results: CheckResult[],
  json: boolean,
  io: ConformanceIo,
): void {
  io.out(
    json
      ? JSON.stringify(
          { mode, target, passed: results.every((r) => r.outcome !== "fail"), results },
          null,
          2,
        )
      : withFlags(formatTable(results)),
  );
  const failed = results.filter((r) => r.outcome === "fail");
  if (failed.length > 0) {
    throw new KdsError(
      "protocol_error",
      `the ${mode} under test failed ${failed.length} of ${results.length} conformance checks (${failed.map((r) => r.rule).join(", ")}); each row above names its section of docs/protocol.md`,
    );
  }
}

/** Adds `conformance global` and `conformance zone` to `cli`. */
export function registerConformance(
  cli: Command,
  io: { out(text: string): void; err(text: string): void },
): void {
  const conformance = cli
    .command("conformance")
    .description(
      "check an implementation of the other side against every MUST rule of docs/protocol.md",
    );
  conformance
    .command("global")
    .description("play a zone against a global: dial --target as --zone and check its answers")
    .requiredOption(
      "--target <url>",
      "the global's zone-facing address (its --listen), e.g. http://127.0.0.1:5685",
    )
    .requiredOption("--zone <name>", "a zone registered on the global, the kit dials as")
    .option(
      "--token-file <file>",
      "that zone's token (kds-mux generate zone-token), when the global authenticates zones",
    )
    .option("--ca-cert <file>", "PEM CA that signed the global's certificate (https --target)")
    .option("--json", "print the results as JSON")
    .action(async (o: ConformanceGlobalFlags) => {
      const stop = stopSignal();
      try {
        await conformanceGlobal(o, { ...io, signal: stop.signal });
      } finally {
        stop.dispose();
      }
    });
  conformance
    .command("zone")
    .description(
      "play the global for a zone: listen on --listen, point the zone's --global there, and check its sessions",
    )
    .option(
      "--listen <host:port>",
      "where the kit listens for the zone under test (h2c)",
      "127.0.0.1:5685",
    )
    .option(
      "--kinds <file>",
      "the kinds file of the global the zone expects (default: a catalog without kinds)",
    )
    .option(
      "--wait <duration>",
      "how long to wait for each dial of the zone (its reconnect backoff included)",
      "60s",
    )
    .option("--json", "print the results as JSON")
    .action(async (o: ConformanceZoneFlags) => {
      const stop = stopSignal();
      try {
        await conformanceZone(o, { ...io, signal: stop.signal });
      } finally {
        stop.dispose();
      }
    });
}
