/**
 * The `kds-mux` command line.
 *
 * @module
 */
import { otlpEndpointOption } from "./tracing.ts";
import { readFileSync } from "node:fs";
import { Command, CommanderError, Option } from "commander";
import { KdsError } from "../errors.ts";
import type { LogLevel } from "../log.ts";
import { parseDuration } from "./address.ts";
import {
  adminMaxConnectionsOption,
  authTimeoutOption,
  helloTimeoutOption,
  idleTimeoutOption,
  maxConnectionsOption,
  maxHandshakesOption,
  maxHandshakesPerZoneOption,
  requestTimeoutOption,
} from "./connection-flags.ts";
import { configurable, explainSettings } from "./configuration.ts";
import { withFlags } from "./option-flags.ts";
import { registerConformance } from "./conformance-command.ts";
import { runDemo } from "./demo.ts";
import { cliLogger, type LogFormat } from "./logger.ts";
import type { OutputFormat } from "./format.ts";
import type { AdminTarget } from "./admin-client.ts";
import {
  acceptReset,
  apply,
  generateZone,
  get,
  inspectZone,
  inspectZones,
  outputFormats,
  remove,
  types,
} from "./resource-commands.ts";
import { readPem } from "./secret-files.ts";
import {
  runGlobal,
  runZone,
  zoneTransports,
  type GlobalCommandOptions,
  type ZoneCommandOptions,
} from "./serve-commands.ts";
import { stopSignal } from "./signals.ts";
import { drainTimeoutOption } from "./drain.ts";
import {
  advertiseUrlOption,
  rebalanceIntervalOption,
  rebalanceMovesOption,
} from "./rebalance-flags.ts";
import { resetGuardOptions, zoneExpireAfterOption, zoneStaleAfterOption } from "./offline-flags.ts";
import { dataDirOption, leaseDurationOption, storeOption } from "./store-option.ts";
import { ZONE_STATES, type ZoneState } from "../observe/zone-health.ts";
import { tokenExpiryWarningOption } from "./token-expiry-flag.ts";
import { heartbeatIntervalOption, heartbeatTimeoutOption } from "./heartbeat-flags.ts";
import {
  generateAdminToken,
  generateZoneToken,
  revokeCertificate,
  revokeToken,
  rotateSigningKey,
  tokenOutput,
} from "./token-commands.ts";

const logFormatOption = (): Option =>
  new Option("--log-format <format>", "log lines as readable text or JSON lines")
    .choices(["text", "json"])
    .default("text");
const logLevelOption = (): Option =>
  new Option("--log-level <level>", "lowest level logged")
    .choices(["debug", "info", "warn", "error"])
    .default("info");
const outputOption = (): Option =>
  new Option("-o, --output <format>", "output format").choices([...outputFormats]).default("table");
const serverOption = (): Option =>
  new Option(
    "--server <url>",
    "admin API of a global or zone, e.g. http://127.0.0.1:5681",
  ).makeOptionMandatory();
const tokenOption = (): Option =>
  new Option(
    "--token <token>",
    "admin token (needed when the admin API is not bound to loopback)",
  ).env("KDS_MUX_TOKEN");
const caCertOption = (): Option =>
  new Option(
    "--ca-cert <file>",
    "PEM of the CA that signed the admin API's certificate (https)",
  ).env("KDS_MUX_CA_CERT");
const validForOption = (): Option =>
  new Option("--valid-for <duration>", "how long the token is valid, e.g. 720h, 30m").default(
    "720h",
  );

/** Options every admin command takes. */
interface AdminFlags {
  server: string;
  token?: string;
  caCert?: string;
}

/** Adds --server, --token and --ca-cert to an admin command. */
function adminCommand(command: Command): Command {
  return command.addOption(serverOption()).addOption(tokenOption()).addOption(caCertOption());
}

function target(o: AdminFlags): AdminTarget {
  return {
    url: o.server,
    token: o.token,
    caCert: o.caCert === undefined ? undefined : readPem(o.caCert, "--ca-cert"),
  };
}
const out = (text: string): void => void process.stdout.write(`${text}\n`);
/** Prints a token: no trailing newline unless stdout is a terminal (see {@link tokenOutput}). */
const outToken = (token: string): void =>
  void process.stdout.write(tokenOutput(token, process.stdout.isTTY === true));

function readInput(file: string): { name: string; text: string } {
  if (file === "-") return { name: "<stdin>", text: readFileSync(0, "utf8") };
  try {
    return { name: file, text: readFileSync(file, "utf8") };
  } catch (error) {
    throw new KdsError(
      "invalid_argument",
      `cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`,
      { cause: error },
    );
  }
}

/** Builds the program (exported for tests and embedding). */
export function program(): Command {
  const cli = new Command()
    .name("kds-mux")
    .description(
      "Sync resources between a global control plane and zones over one zone-dialed stream.",
    )
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride();

  type GlobalFlags = Omit<GlobalCommandOptions, "logger" | "signal"> & {
    logFormat: LogFormat;
    logLevel: LogLevel;
  };
  const globalCommand = cli.command("global");
  globalCommand
    .description(
      "run a global control plane: zones dial --listen (mux and half-duplex only), the admin API is on --admin-listen; state in --store, durable by default",
    )
    .option("--listen <host:port>", "zone-facing address (mux and half-duplex)", "127.0.0.1:5685")
    .option(
      "--admin-listen <host:port>",
      "admin API address; not loopback means every admin call needs an admin token",
      "127.0.0.1:5681",
    )
    .option(
      "--admin-token-file <file>",
      "with a non-loopback --admin-listen: write a first admin token (role admin) here",
    )
    .option("--tls-cert <file>", "PEM certificate chain: serve TLS on both listeners")
    .option("--tls-key <file>", "PEM private key of --tls-cert")
    .option(
      "--client-ca <file>",
      "PEM CA: a zone may prove its name with a client certificate it signed instead of a token (named by its SANs spiffe://<trust-domain>/zone/<name> or <name>, else its one CN; see docs/protocol.md)",
    )
    .option(
      "--insecure-no-zone-auth",
      "DEVELOPMENT ONLY: admit any client that names itself in client-id, without a token",
    )
    .option("--name <name>", "this global's name", "global")
    .option(
      "--kinds <file>",
      "kinds file: the kinds to sync and their descriptor set (default: the example kinds)",
    )
    .option(
      "--max-session-buffer-bytes <size>",
      "most inbound bytes one zone's session buffers unread (half per lane; at least 8MiB); a zone sending past it is ended (default 16MiB)",
    )
    .option(
      "--max-buffer-bytes <size>",
      "most inbound bytes all sessions buffer together; when full, the session holding the most is ended with RESOURCE_EXHAUSTED (default 256MiB)",
    )
    .addOption(storeOption())
    .addOption(dataDirOption())
    .addOption(maxConnectionsOption())
    .addOption(adminMaxConnectionsOption())
    .addOption(idleTimeoutOption())
    .addOption(helloTimeoutOption())
    .addOption(drainTimeoutOption())
    .addOption(rebalanceIntervalOption())
    .addOption(rebalanceMovesOption())
    .addOption(advertiseUrlOption())
    .addOption(zoneStaleAfterOption())
    .addOption(zoneExpireAfterOption())
    .addOption(tokenExpiryWarningOption())
    .addOption(heartbeatIntervalOption())
    .addOption(heartbeatTimeoutOption());
  for (const option of resetGuardOptions("global")) globalCommand.addOption(option);
  globalCommand
    .addOption(maxHandshakesOption())
    .addOption(maxHandshakesPerZoneOption())
    .addOption(authTimeoutOption())
    .addOption(requestTimeoutOption())
    .addOption(otlpEndpointOption())
    .addOption(logFormatOption())
    .addOption(logLevelOption())
    .action(async (o: GlobalFlags) => {
      const stop = stopSignal();
      try {
        const { logFormat, logLevel, ...flags } = o;
        await runGlobal({ ...flags, logger: cliLogger(logFormat, logLevel), signal: stop.signal });
      } finally {
        stop.dispose();
      }
    });

  type ZoneFlags = Omit<ZoneCommandOptions, "logger" | "signal" | "adminListen"> & {
    adminListen?: string;
    logFormat: LogFormat;
    logLevel: LogLevel;
  };
  const zoneCommand = cli.command("zone");
  zoneCommand
    .description("run a zone control plane that dials the global and serves its own admin API")
    // --name and --global are checked in the action, not by commander: it would ask them of `zone accept-reset` too.
    .option("--name <name>", "the zone's name (registered on the global; required)")
    .option(
      "--kinds <file>",
      "kinds file, checked against the global's kinds (default: learn them from the global)",
    )
    .addOption(storeOption())
    .addOption(dataDirOption())
    .addOption(leaseDurationOption())
    .addOption(heartbeatIntervalOption())
    .addOption(heartbeatTimeoutOption())
    .option(
      "--global <urls>",
      "the global's zone-facing address, e.g. https://global.example:5685; several instances comma-separated (the zone dials the first, and when one fails or asks it to move, another at random; required)",
    )
    .addOption(
      new Option(
        "--transport <kind>",
        "how to dial the global (HTTP/2; grpc is plain gRPC on node:http2, grpc-connect the same protocol through connect-node's client; half-duplex uses unary and server-streaming calls only)",
      )
        .choices([...zoneTransports])
        .default("grpc"),
    )
    .option(
      "--token-file <file>",
      "the zone token (kds-mux generate zone-token), re-read before every dial",
    )
    .option("--ca-cert <file>", "PEM CA that signed the global's certificate (https --global)")
    .option(
      "--client-cert <file>",
      "PEM client certificate for mutual TLS, instead of a token (naming the zone by its SANs spiffe://<trust-domain>/zone/<name> or <name>, else its one CN)",
    )
    .option("--client-key <file>", "PEM private key of --client-cert")
    .option(
      "--admin-listen <host:port>",
      "address of this zone's admin API (default 127.0.0.1:5682; a global's is 5681)",
    )
    .option(
      "--admin-token-file <file>",
      "with a non-loopback --admin-listen: write a first admin token (role admin) here",
    )
    .option("--tls-cert <file>", "PEM certificate chain: serve the admin API over TLS")
    .option("--tls-key <file>", "PEM private key of --tls-cert")
    .addOption(adminMaxConnectionsOption())
    .addOption(idleTimeoutOption())
    .addOption(authTimeoutOption())
    .addOption(requestTimeoutOption())
    .addOption(otlpEndpointOption())
    .addOption(logFormatOption())
    .addOption(logLevelOption());
  for (const option of resetGuardOptions("zone")) zoneCommand.addOption(option);
  zoneCommand.action(async (o: ZoneFlags) => {
    for (const [flag, value] of [
      ["--name <name>", o.name],
      ["--global <urls>", o.global],
    ] as const)
      if (value === undefined) zoneCommand.error(`error: required option '${flag}' not specified`);
    const stop = stopSignal();
    try {
      const { logFormat, logLevel, adminListen, ...flags } = o;
      await runZone({
        ...flags,
        adminListen: adminListen ?? "127.0.0.1:5682",
        logger: cliLogger(logFormat, logLevel),
        signal: stop.signal,
      });
    } finally {
      stop.dispose();
    }
  });

  adminCommand(
    zoneCommand
      .command("accept-reset")
      .description(
        "apply the deletions the reset guard holds for zone NAME (its first exchange after connecting would have deleted most of its resources on the global); on a zone's admin API, NAME is the zone itself and the deletions are of what the global sent it",
      )
      .argument("<name>", "the zone"),
  ).action(async (name: string, o: AdminFlags) => out(await acceptReset(target(o), name)));

  const generate = cli.command("generate").description("print resources to pipe into apply");
  generate
    .command("zone")
    .description("print the Zone resource that registers a zone on the global")
    .requiredOption("--name <name>", "the zone's name")
    .addOption(
      new Option("-o, --output <format>", "output format")
        .choices(["yaml", "json"])
        .default("yaml"),
    )
    .action((o: { name: string; output: "yaml" | "json" }) => out(generateZone(o.name, o.output)));
  adminCommand(
    generate
      .command("zone-token")
      .description(
        "print a token that proves a zone's name to the global (pass it to kds-mux zone --token-file)",
      )
      .requiredOption("--zone <name>", "the zone's name")
      .addOption(validForOption()),
  ).action(async (o: AdminFlags & { zone: string; validFor: string }) => {
    const r = await generateZoneToken(target(o), o.zone, parseDuration(o.validFor));
    outToken(r.token);
    process.stderr.write(`${r.note}\n`);
  });
  adminCommand(
    generate
      .command("admin-token")
      .description("print an admin token (pass it with --token or KDS_MUX_TOKEN)")
      .requiredOption(
        "--name <name>",
        "who holds it; every write made with it is logged with this name",
      )
      .addOption(
        new Option("--role <role>", "read-only: read everything; admin: also write")
          .choices(["read-only", "admin"])
          .makeOptionMandatory(),
      )
      .addOption(validForOption()),
  ).action(async (o: AdminFlags & { name: string; role: string; validFor: string }) => {
    const r = await generateAdminToken(target(o), o.name, o.role, parseDuration(o.validFor));
    outToken(r.token);
    process.stderr.write(`${r.note}\n`);
  });

  const revoke = cli.command("revoke").description("revoke tokens and zones' client certificates");
  adminCommand(
    revoke
      .command("zone-token")
      .description("revoke a zone token (its live session ends at once with goaway ZONE_REVOKED)")
      .option("--id <id>", "the token's id (printed when it was generated; its jti claim)")
      .option("--token-file <file>", "the token itself")
      .option("--zone <name>", "every token of this zone issued until now"),
  ).action(async (o: AdminFlags & { id?: string; tokenFile?: string; zone?: string }) =>
    out(await revokeToken(target(o), o)),
  );
  adminCommand(
    revoke
      .command("admin-token")
      .description("revoke an admin token")
      .option("--id <id>", "the token's id (printed when it was generated; its jti claim)")
      .option("--token-file <file>", "the token itself"),
  ).action(async (o: AdminFlags & { id?: string; tokenFile?: string }) =>
    out(await revokeToken(target(o), { id: o.id, tokenFile: o.tokenFile })),
  );
  adminCommand(
    revoke
      .command("certificate")
      .description(
        "revoke a zone's client certificate (mutual TLS) on the global: its live sessions end with goaway ZONE_REVOKED and it is refused from then on",
      )
      .option(
        "--serial <hex>",
        "its serial number, as openssl x509 -noout -serial prints it (unique per CA only: revokes that serial from every CA the global trusts)",
      )
      .option(
        "--fingerprint <sha256>",
        "its SHA-256 fingerprint, as openssl x509 -noout -fingerprint -sha256 prints it",
      )
      .option(
        "--cert-file <file>",
        "the certificate itself (PEM): revokes its SHA-256 fingerprint",
      ),
  ).action(async (o: AdminFlags & { serial?: string; fingerprint?: string; certFile?: string }) =>
    out(await revokeCertificate(target(o), o)),
  );

  const rotate = cli.command("rotate").description("rotate keys");
  adminCommand(
    rotate
      .command("signing-key")
      .description("create a new signing key that signs every token from now on")
      .option(
        "--retire-previous",
        "delete the older keys: tokens they signed stop working and sessions admitted with them end",
      ),
  ).action(async (o: AdminFlags & { retirePrevious?: boolean }) =>
    out(await rotateSigningKey(target(o), o.retirePrevious === true)),
  );

  cli
    .command("apply")
    .description("create or replace resources from YAML or JSON files")
    .requiredOption("-f, --file <file...>", "resource file(s); - reads stdin")
    .addOption(serverOption())
    .addOption(tokenOption())
    .addOption(caCertOption())
    .action(async (o: AdminFlags & { file: string[] }) =>
      out(await apply(target(o), o.file.map(readInput))),
    );

  cli
    .command("get")
    .description("list resources of a type, or show one")
    .argument("<type>", "resource type (kind), e.g. Mesh")
    .argument("[name]", "one resource")
    .option("--mesh <mesh>", "the mesh (mesh-scoped types)")
    .option(
      "--zone <zone>",
      "ask this zone, through the global at --server, what it holds itself (local kinds included)",
    )
    .addOption(outputOption())
    .addOption(serverOption())
    .addOption(tokenOption())
    .addOption(caCertOption())
    .action(
      async (
        type: string,
        name: string | undefined,
        o: AdminFlags & { mesh?: string; zone?: string; output: OutputFormat },
      ) => out(await get(target(o), type, name, o.mesh, o.output, o.zone)),
    );

  cli
    .command("delete")
    .description("delete a resource")
    .argument("<type>", "resource type (kind)")
    .argument("<name>", "resource name")
    .option("--mesh <mesh>", "the mesh (mesh-scoped types)")
    .addOption(serverOption())
    .addOption(tokenOption())
    .addOption(caCertOption())
    .action(async (type: string, name: string, o: AdminFlags & { mesh?: string }) =>
      out(await remove(target(o), type, name, o.mesh)),
    );

  cli
    .command("types")
    .description("list the registered resource types")
    .addOption(outputOption())
    .addOption(serverOption())
    .addOption(tokenOption())
    .addOption(caCertOption())
    .action(async (o: AdminFlags & { output: OutputFormat }) =>
      out(await types(target(o), o.output)),
    );

  const inspect = cli.command("inspect").description("show sync status");
  inspect
    .command("zones")
    .description(
      "zone status: state (healthy, degraded, stalled, offline) and why, online, connect time, per-type sent/ACK/NACK, last error, heartbeat round trip",
    )
    .addOption(outputOption())
    .addOption(
      new Option("--state <state>", "show only the zones in this state").choices([...ZONE_STATES]),
    )
    .addOption(serverOption())
    .addOption(tokenOption())
    .addOption(caCertOption())
    .action(async (o: AdminFlags & { output: OutputFormat; state?: ZoneState }) =>
      out(await inspectZones(target(o), o.output, o.state)),
    );
  inspect
    .command("zone")
    .description(
      "a zone's own view of its sync status, answered by the zone through the global at --server",
    )
    .argument("<name>", "the zone")
    .addOption(outputOption())
    .addOption(serverOption())
    .addOption(tokenOption())
    .addOption(caCertOption())
    .action(async (name: string, o: AdminFlags & { output: OutputFormat }) =>
      out(await inspectZone(target(o), name, o.output)),
    );

  cli
    .command("demo")
    .description("run a global and two zones on loopback and show resources flowing both ways")
    .option("--duration <duration>", "stop after this long (0 runs until Ctrl-C)", "30s")
    .addOption(logFormatOption())
    .action(async (o: { duration: string; logFormat: LogFormat }) => {
      const stop = stopSignal(parseDuration(o.duration));
      try {
        await runDemo({ signal: stop.signal, print: out, logger: cliLogger(o.logFormat, "warn") });
      } finally {
        stop.dispose();
      }
    });

  // --config, --print-config and KDS_MUX_* for every flag of global and zone (configuration.ts).
  configurable(cli, ["global", "zone"], (text) => void process.stdout.write(text));

  registerConformance(cli, { out, err: (text) => void process.stderr.write(`${text}\n`) });

  return cli;
}

/** Runs the CLI with `argv` (as process.argv); resolves with the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  try {
    await program().parseAsync([...argv]);
    return 0;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Commander already printed the problem (or the help / version).
      return error.exitCode === 0 ? 0 : 2;
    }
    if (error instanceof KdsError) {
      process.stderr.write(`error: ${explainSettings(withFlags(error.message))}\n`);
      return error.code === "invalid_argument" ? 2 : 1;
    }
    process.stderr.write(
      `error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    return 1;
  }
}
