/**
 * The `kds-mux` command line.
 *
 * @module
 */
import { readFileSync } from "node:fs";
import { Command, CommanderError, Option } from "commander";
import { KdsError } from "../errors.ts";
import type { LogLevel } from "../log.ts";
import { parseDuration } from "./address.ts";
import { runDemo } from "./demo.ts";
import { cliLogger, type LogFormat } from "./logger.ts";
import type { OutputFormat } from "./format.ts";
import { apply, generateZone, get, inspectZone, inspectZones, outputFormats, remove, types } from "./resource-commands.ts";
import { runGlobal, runZone, zoneTransports } from "./serve-commands.ts";
import { dataDirOption, storeOption, type StoreChoice } from "./store-option.ts";
import { stopSignal } from "./signals.ts";

const logFormatOption = (): Option => new Option("--log-format <format>", "log lines as readable text or JSON lines").choices(["text", "json"]).default("text");
const logLevelOption = (): Option => new Option("--log-level <level>", "lowest level logged").choices(["debug", "info", "warn", "error"]).default("info");
const outputOption = (): Option => new Option("-o, --output <format>", "output format").choices([...outputFormats]).default("table");
const serverOption = (): Option => new Option("--server <url>", "admin API of a global or zone, e.g. http://127.0.0.1:5685").makeOptionMandatory();
const out = (text: string): void => void process.stdout.write(`${text}\n`);

function readInput(file: string): { name: string; text: string } {
  if (file === "-") return { name: "<stdin>", text: readFileSync(0, "utf8") };
  try {
    return { name: file, text: readFileSync(file, "utf8") };
  } catch (error) {
    throw new KdsError("invalid_argument", `cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  }
}

/** Builds the program (exported for tests and embedding). */
export function program(): Command {
  const cli = new Command()
    .name("kds-mux")
    .description("Sync resources between a global control plane and zones over one zone-dialed stream.")
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride();

  cli
    .command("global")
    .description("run a global control plane (mux and admin API on one address; state in --store, durable by default)")
    .option("--listen <host:port>", "address to listen on", "127.0.0.1:5685")
    .option("--name <name>", "this global's name", "global")
    .addOption(storeOption())
    .addOption(dataDirOption())
    .addOption(logFormatOption())
    .addOption(logLevelOption())
    .action(async (o: { listen: string; name: string; logFormat: LogFormat; logLevel: LogLevel } & StoreChoice) => {
      const stop = stopSignal();
      try {
        await runGlobal({ listen: o.listen, name: o.name, store: o.store, dataDir: o.dataDir, logger: cliLogger(o.logFormat, o.logLevel), signal: stop.signal });
      } finally {
        stop.dispose();
      }
    });

  cli
    .command("zone")
    .description("run a zone control plane that dials the global and serves its own admin API")
    .requiredOption("--name <name>", "the zone's name (registered on the global)")
    .requiredOption("--global <urls>", "the global's address, e.g. http://127.0.0.1:5685; several instances comma-separated (the zone fails over between them)")
    .addOption(new Option("--transport <kind>", "how to dial the global (HTTP/2; half-duplex uses unary and server-streaming calls only)").choices([...zoneTransports]).default("grpc"))
    .option("--listen <host:port>", "address of this zone's admin API", "127.0.0.1:5681")
    .addOption(storeOption())
    .addOption(dataDirOption())
    .addOption(logFormatOption())
    .addOption(logLevelOption())
    .action(async (o: { name: string; global: string; transport: string; listen: string; logFormat: LogFormat; logLevel: LogLevel } & StoreChoice) => {
      const stop = stopSignal();
      try {
        await runZone({ ...o, logger: cliLogger(o.logFormat, o.logLevel), signal: stop.signal });
      } finally {
        stop.dispose();
      }
    });

  const generate = cli.command("generate").description("print resources to pipe into apply");
  generate
    .command("zone")
    .description("print the Zone resource that registers a zone on the global")
    .requiredOption("--name <name>", "the zone's name")
    .addOption(new Option("-o, --output <format>", "output format").choices(["yaml", "json"]).default("yaml"))
    .action((o: { name: string; output: "yaml" | "json" }) => out(generateZone(o.name, o.output)));

  cli
    .command("apply")
    .description("create or replace resources from YAML or JSON files")
    .requiredOption("-f, --file <file...>", "resource file(s); - reads stdin")
    .addOption(serverOption())
    .action(async (o: { file: string[]; server: string }) => out(await apply(o.server, o.file.map(readInput))));

  cli
    .command("get")
    .description("list resources of a type, or show one")
    .argument("<type>", "resource type (kind), e.g. Mesh")
    .argument("[name]", "one resource")
    .option("--mesh <mesh>", "the mesh (mesh-scoped types)")
    .option("--zone <zone>", "ask this zone, through the global at --server, what it holds itself (local kinds included)")
    .addOption(outputOption())
    .addOption(serverOption())
    .action(async (type: string, name: string | undefined, o: { mesh?: string; zone?: string; output: OutputFormat; server: string }) =>
      out(await get(o.server, type, name, o.mesh, o.output, o.zone)),
    );

  cli
    .command("delete")
    .description("delete a resource")
    .argument("<type>", "resource type (kind)")
    .argument("<name>", "resource name")
    .option("--mesh <mesh>", "the mesh (mesh-scoped types)")
    .addOption(serverOption())
    .action(async (type: string, name: string, o: { mesh?: string; server: string }) => out(await remove(o.server, type, name, o.mesh)));

  cli
    .command("types")
    .description("list the registered resource types")
    .addOption(outputOption())
    .addOption(serverOption())
    .action(async (o: { output: OutputFormat; server: string }) => out(await types(o.server, o.output)));

  const inspect = cli.command("inspect").description("show sync status");
  inspect
    .command("zones")
    .description("zone status: online, connect time, per-type sent/ACK/NACK, last error, heartbeat round trip")
    .addOption(outputOption())
    .addOption(serverOption())
    .action(async (o: { output: OutputFormat; server: string }) => out(await inspectZones(o.server, o.output)));
  inspect
    .command("zone")
    .description("a zone's own view of its sync status, answered by the zone through the global at --server")
    .argument("<name>", "the zone")
    .addOption(outputOption())
    .addOption(serverOption())
    .action(async (name: string, o: { output: OutputFormat; server: string }) => out(await inspectZone(o.server, name, o.output)));

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
      process.stderr.write(`error: ${error.message}\n`);
      return error.code === "invalid_argument" ? 2 : 1;
    }
    process.stderr.write(`error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    return 1;
  }
}
