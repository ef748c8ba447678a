/**
 * Configuration of `kds-mux global` and `kds-mux zone` beyond flags: a YAML
 * file (`--config`) and environment variables, both derived from the flag
 * definitions themselves, so a flag added to a command is configurable with
 * no further code. For a flag `--idle-timeout` the file key is
 * `idle-timeout` and the environment variable `KDS_MUX_IDLE_TIMEOUT`; for a
 * negatable `--no-x` they are `x` (true or false) and `KDS_MUX_X`.
 * Precedence: flag, then environment, then file, then default.
 *
 * It works as a `preSubcommand` hook: before commander parses the
 * subcommand's flags, the file's and the environment's values are set with
 * the sources "config" and "env" (each through the option's own parser, so
 * a bad value is refused as a bad flag would be); the flags parsed after
 * them win. `--print-config` prints the result, secrets redacted, and exits.
 *
 * @module
 */
import { readFileSync } from "node:fs";
import { type Command, CommanderError, InvalidArgumentError, Option } from "commander";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { KdsError } from "../errors.ts";

/** Prefix of every environment variable of a flag. */
export const ENV_PREFIX = "KDS_MUX_";
/** The environment variable naming the configuration file (as `--config`). */
export const CONFIG_ENV = "KDS_MUX_CONFIG";

/** How one flag is named in the file and in the environment. */
export interface Setting {
  /** The file key: the long flag without `--` (without `--no-` for a negatable flag). */
  readonly key: string;
  /** The environment variable: `KDS_MUX_` and the key in upper snake case. */
  readonly env: string;
  /** The flag as written on the command line, e.g. `--idle-timeout`. */
  readonly flag: string;
  /** Commander's option. */
  readonly option: Option;
}

/** Where an effective value came from. */
export type SettingSource = "flag" | "environment" | "file" | "default";

/** One row of the effective configuration. */
export interface EffectiveSetting {
  readonly key: string;
  readonly env: string;
  /** The value as given (a boolean for a switch, a number where the file or the default has one); undefined when unset. */
  readonly value: string | number | boolean | undefined;
  readonly source: SettingSource | undefined;
  /** Whether `value` is shown redacted by {@link redactSetting}. */
  readonly secret: boolean;
}

const OWN_KEYS = new Set(["config", "print-config"]);

/** The setting of `option`, or undefined for a hidden flag, a short-only one and --config / --print-config themselves. */
export function settingOf(option: Option): Setting | undefined {
  if (option.hidden || option.long === undefined) return undefined;
  const flag = option.long;
  const name = flag.replace(/^--/, "");
  const key = option.negate ? name.replace(/^no-/, "") : name;
  if (OWN_KEYS.has(key)) return undefined;
  return { key, env: ENV_PREFIX + key.toUpperCase().replace(/-/g, "_"), flag, option };
}

/** Every setting of `command`, in the order of its flags. */
export function settingsOf(command: Command): Setting[] {
  return command.options.map(settingOf).filter((s): s is Setting => s !== undefined);
}

/** Whether a flag holds a secret (its name ends in token, password or secret; a `-file` naming one does not). */
export function isSecretKey(key: string): boolean {
  return /(^|-)(token|password|secret)$/.test(key);
}

/** `text` with the password of every URL in it replaced (postgres://user:pass@host → postgres://user:<redacted>@host). */
export function redactUrls(text: string): string {
  return text.replace(/([a-z][a-z0-9+.-]*:\/\/[^:/@\s,]*:)[^@/\s,]*@/gi, "$1<redacted>@");
}

/** The value of `setting` as shown by --print-config: a secret flag's whole value is hidden, any URL's password too. */
export function redactSetting(
  setting: Pick<EffectiveSetting, "key" | "value">,
): string | number | boolean | undefined {
  const { key, value } = setting;
  if (typeof value !== "string") return value;
  return isSecretKey(key) ? "<redacted>" : redactUrls(value);
}

const isSwitch = (option: Option): boolean => !option.required && !option.optional;

/** What commander calls a value's source, in our words. */
const SOURCES: Record<string, SettingSource> = {
  cli: "flag",
  env: "environment",
  config: "file",
  default: "default",
};

interface Resolution {
  /** Where each key's value came from, and its text. */
  readonly values: Map<
    string,
    { source: SettingSource; raw: string | number | boolean; where: string }
  >;
}

const resolutions = new WeakMap<Command, Resolution>();
/** The last resolution, for {@link explainSettings} (one command runs per process). */
let lastResolution: { settings: Setting[]; resolution: Resolution } | undefined;

/** Sets `raw` on `command` for `setting` through the option's own parser; `where` names its origin in errors. */
function assign(
  command: Command,
  setting: Setting,
  raw: unknown,
  source: "config" | "env",
  where: string,
): void {
  const { option } = setting;
  const attribute = option.attributeName();
  const form = isSwitch(option)
    ? "true or false"
    : `${/[<[][^>\]]+[>\]]/.exec(option.flags)?.[0] ?? "a value"}, as for ${setting.flag}`;
  const refuse = (why: string): KdsError =>
    new KdsError("invalid_argument", `${where}: ${why} (expected ${form})`);
  if (isSwitch(option)) {
    let on: boolean;
    if (typeof raw === "boolean") on = raw;
    else if (source === "env" && typeof raw === "string" && /^(true|1|false|0)$/i.test(raw.trim()))
      on = /^(true|1)$/i.test(raw.trim());
    else throw refuse(`${JSON.stringify(raw)} is not true or false`);
    // A negatable --no-x sets x itself; a plain switch is either on or unset.
    command.setOptionValueWithSource(attribute, option.negate ? on : on ? true : undefined, source);
    return;
  }
  if (typeof raw !== "string" && typeof raw !== "number")
    throw refuse(
      raw === null
        ? "it is empty"
        : Array.isArray(raw)
          ? "a list where one value belongs"
          : typeof raw === "object"
            ? "a mapping where one value belongs"
            : `${JSON.stringify(raw)} is not a value of this flag`,
    );
  const text = String(raw);
  let value: unknown = text;
  if (option.parseArg !== undefined) {
    try {
      value = option.parseArg(text, undefined);
    } catch (error) {
      if (error instanceof InvalidArgumentError) throw refuse(error.message);
      throw error;
    }
  }
  command.setOptionValueWithSource(attribute, value, source);
}

/** Reads the YAML configuration `file`: a mapping of keys to values (an empty file is an empty mapping). */
function readConfigFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new KdsError(
      "invalid_argument",
      `--config ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? String(error)})`,
      { cause: error },
    );
  }
  let parsed: unknown;
  try {
    parsed = parseYaml(text);
  } catch (error) {
    throw new KdsError(
      "invalid_argument",
      `--config ${file} is not valid YAML: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new KdsError(
      "invalid_argument",
      `--config ${file} must be a YAML mapping of flag names to values (for example "idle-timeout: 60s"), not a ${Array.isArray(parsed) ? "list" : typeof parsed}`,
    );
  }
  return parsed as Record<string, unknown>;
}

/** The value of `--config` among `args` (the subcommand's raw arguments), if given. */
function configArgument(args: readonly string[]): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === "--") return undefined;
    if (arg === "--config") return args[i + 1];
    if (arg.startsWith("--config=")) return arg.slice("--config=".length);
  }
  return undefined;
}

/**
 * Applies the configuration file and the environment to `command` before
 * its flags are parsed. `args`: the command's raw arguments; `env`: the
 * environment. Refuses (`invalid_argument`) an unknown key, a bad value or
 * an unreadable file, naming the file (or variable), the key and the
 * expected form.
 */
export function applyConfiguration(
  command: Command,
  args: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
): void {
  const settings = settingsOf(command);
  const values: Resolution["values"] = new Map();
  const file = configArgument(args) ?? env[CONFIG_ENV];
  if (file !== undefined && file !== "") {
    const entries = readConfigFile(file);
    const byKey = new Map(settings.map((s) => [s.key, s]));
    for (const [key, raw] of Object.entries(entries)) {
      const setting = byKey.get(key);
      if (setting === undefined) {
        const hint = byKey.has(key.replace(/^--/, ""))
          ? ` (write it without --: ${key.replace(/^--/, "")})`
          : byKey.has(kebab(key))
            ? ` (write it as ${kebab(key)})`
            : "";
        throw new KdsError(
          "invalid_argument",
          `--config ${file}: unknown key "${key}"${hint}; kds-mux ${command.name()} takes the keys ${settings.map((s) => s.key).join(", ")}`,
        );
      }
      const where = `--config ${file}: key "${key}"`;
      assign(command, setting, raw, "config", where);
      values.set(key, {
        source: "file",
        raw: typeof raw === "boolean" || typeof raw === "number" ? raw : String(raw),
        where: `key "${key}" of ${file}`,
      });
    }
  }
  for (const setting of settings) {
    const raw = env[setting.env];
    if (raw === undefined) continue;
    assign(command, setting, raw, "env", `environment variable ${setting.env}`);
    values.set(setting.key, {
      source: "environment",
      raw: isSwitch(setting.option) ? /^(true|1)$/i.test(raw.trim()) : raw,
      where: `environment variable ${setting.env}`,
    });
  }
  // Flags parsed next replace these; remember their text for --print-config.
  for (const setting of settings) {
    command.on(`option:${setting.option.name()}`, (raw: unknown) => {
      values.set(setting.key, {
        source: "flag",
        raw: isSwitch(setting.option) ? !setting.option.negate : String(raw),
        where: setting.flag,
      });
    });
  }
  const resolution = { values };
  resolutions.set(command, resolution);
  lastResolution = { settings, resolution };
}

const kebab = (key: string): string =>
  key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`).replace(/_/g, "-");

/** The effective configuration of `command` once parsed: every setting, with its value's text and source. */
export function effectiveConfiguration(command: Command): EffectiveSetting[] {
  const resolution = resolutions.get(command);
  return settingsOf(command).map((setting) => {
    const known = resolution?.values.get(setting.key);
    const secret = isSecretKey(setting.key);
    if (
      known !== undefined &&
      SOURCES[command.getOptionValueSource(setting.option.attributeName()) ?? ""] === known.source
    ) {
      return { key: setting.key, env: setting.env, value: known.raw, source: known.source, secret };
    }
    const value: unknown = command.getOptionValue(setting.option.attributeName());
    if (value === undefined)
      return { key: setting.key, env: setting.env, value: undefined, source: undefined, secret };
    const shown = setting.option.defaultValueDescription ?? value;
    return {
      key: setting.key,
      env: setting.env,
      value:
        typeof shown === "boolean" || typeof shown === "number" ? shown : String(shown as string),
      source: "default",
      secret,
    };
  });
}

/** The effective configuration as YAML a `--config` file accepts, secrets redacted, each value's source in a comment; unset keys are commented out. */
export function formatConfiguration(name: string, settings: readonly EffectiveSetting[]): string {
  const lines = [
    `# kds-mux ${name}: the effective configuration (a flag beats ${ENV_PREFIX}* environment variables, which beat the file, which beats the default)`,
  ];
  for (const setting of settings) {
    const value = redactSetting(setting);
    if (value === undefined) {
      lines.push(`# ${setting.key}:  (not set; ${setting.env})`);
      continue;
    }
    lines.push(
      `${stringifyYaml({ [setting.key]: value }).trimEnd()}  # ${setting.source ?? "default"}`,
    );
  }
  return `${lines.join("\n")}\n`;
}

/** Adds `--config` and `--print-config` to `command`. */
function addConfigurationFlags(command: Command): void {
  command
    .addOption(
      new Option(
        "--config <file>",
        `YAML file of flags: each key is a flag without -- (e.g. "idle-timeout: 60s"); every flag also reads ${ENV_PREFIX}<FLAG> (${ENV_PREFIX}IDLE_TIMEOUT); a flag beats the environment, which beats the file (also ${CONFIG_ENV})`,
      ),
    )
    .addOption(
      new Option(
        "--print-config",
        "print the effective configuration (secrets redacted) as a --config file and exit",
      ),
    );
}

/**
 * Makes the subcommands of `root` named `names` configurable: adds
 * `--config` and `--print-config` to each, and applies the file and the
 * environment before their flags are parsed (every flag, including flags
 * added after this call). `print` writes --print-config's output.
 */
export function configurable(
  root: Command,
  names: readonly string[],
  print: (text: string) => void,
  env: Readonly<Record<string, string | undefined>> = process.env,
): void {
  const commands = root.commands.filter((c) => names.includes(c.name()));
  for (const command of commands) {
    addConfigurationFlags(command);
    command.hook("preAction", (self) => {
      if (self.getOptionValue("printConfig") !== true) return;
      print(formatConfiguration(self.name(), effectiveConfiguration(self)));
      // Exits 0 without running the command (main() returns a CommanderError's code).
      throw new CommanderError(0, "kds-mux.printConfig", "configuration printed");
    });
  }
  root.hook("preSubcommand", (self, sub) => {
    if (!commands.includes(sub)) return;
    // Commander keeps the arguments it was given in rawArgs (not in its types); the subcommand's follow its name.
    const raw = (self as unknown as { rawArgs: readonly string[] }).rawArgs;
    const at = raw.indexOf(sub.name());
    applyConfiguration(sub, at < 0 ? [] : raw.slice(at + 1), env);
  });
}

/**
 * `message` (an error a command raised while starting), with the origin of
 * every flag it names that was set by the file or the environment, so
 * "--listen "x" must be HOST:PORT" also says "(set by key "listen" of kds-mux.yaml)".
 */
export function explainSettings(message: string): string {
  if (lastResolution === undefined) return message;
  const notes: string[] = [];
  for (const setting of lastResolution.settings) {
    const known = lastResolution.resolution.values.get(setting.key);
    if (known === undefined || known.source === "flag" || known.source === "default") continue;
    if (new RegExp(`${setting.flag}(?![\\w-])`).test(message))
      notes.push(`${setting.flag} was set by ${known.where}`);
  }
  return notes.length === 0 ? message : `${message} (${notes.join("; ")})`;
}
