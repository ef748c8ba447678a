// The deployment examples in examples/deploy: the Kubernetes manifests of a
// global and a zone and the systemd unit parse; every flag and environment
// variable they give kds-mux exists in `kds-mux <command> --help` and in the
// configuration schema (the settings derived from the flags), and their
// values pass the flags' own parsers (`--print-config` with them exits 0);
// the shapes the issue asks for hold (3 global replicas, probes, preStop
// drain, the store URL from a Secret, a PodDisruptionBudget; 2 zone replicas
// with no leadership setting); and every probe path answers 200 on a running
// global and zone.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { settingsOf } from "../../src/cli/configuration.ts";
import { program } from "../../src/cli/main.ts";
import { run } from "../cli/process.ts";
import { startFleet, type LiveFleet } from "../docs/live.ts";

const folder = new URL("../../examples/deploy/", import.meta.url);
const read = (path: string): string => readFileSync(new URL(path, folder), "utf8");

type Json = Record<string, unknown>;
interface EnvVar {
  readonly name: string;
  readonly value?: string;
  readonly valueFrom?: { secretKeyRef?: { name: string; key: string }; fieldRef?: unknown };
}
interface Probe {
  readonly httpGet?: { path: string; port: string | number; scheme?: string };
}
interface Container {
  readonly name: string;
  readonly command?: string[];
  readonly args?: string[];
  readonly env?: EnvVar[];
  readonly ports?: { name?: string; containerPort: number }[];
  readonly livenessProbe?: Probe;
  readonly readinessProbe?: Probe;
  readonly startupProbe?: Probe;
  readonly lifecycle?: { preStop?: { exec?: { command: string[] } } };
}

/** The documents of a manifest file, as plain objects. */
function manifests(path: string): Json[] {
  return parseAllDocuments(read(path)).map((d) => {
    expect(d.errors, `${path} parses`).toEqual([]);
    return d.toJS() as Json;
  });
}

function only(docs: Json[], kind: string): Json {
  const found = docs.filter((d) => d.kind === kind);
  expect(found, `one ${kind}`).toHaveLength(1);
  return found[0] as Json;
}

function containerOf(deployment: Json): Container {
  const spec = deployment.spec as { template: { spec: { containers: Container[] } } };
  expect(spec.template.spec.containers).toHaveLength(1);
  return spec.template.spec.containers[0] as Container;
}

/** What one example gives kds-mux: its command (global or zone), flags and KDS_MUX_* variables with their values. */
interface Invocation {
  readonly command: "global" | "zone";
  readonly args: string[];
  readonly env: Record<string, string>;
}

/** The settings (flags and variables) of `kds-mux <command>`, from the program's own flag definitions. */
function schema(command: string): { flags: Set<string>; envs: Set<string> } {
  const sub = program().commands.find((c) => c.name() === command);
  if (sub === undefined) throw new Error(`kds-mux has no ${command} command`);
  const settings = settingsOf(sub);
  return {
    flags: new Set(settings.map((s) => s.flag)),
    envs: new Set(settings.map((s) => s.env)),
  };
}

/** A container's invocation; variables from other variables ($(NAME)), Secrets and fields get sample values. */
function invocation(c: Container): Invocation {
  expect(c.command).toEqual(["kds-mux"]);
  const [command, ...args] = c.args ?? [];
  expect(["global", "zone"]).toContain(command);
  const samples: Record<string, string> = {};
  const env: Record<string, string> = {};
  for (const v of c.env ?? []) {
    const value =
      v.value ??
      (v.valueFrom?.secretKeyRef !== undefined
        ? "postgres://kds:secret@127.0.0.1:5432/kds"
        : v.valueFrom?.fieldRef !== undefined
          ? v.name === "POD_IP"
            ? "10.0.0.7"
            : "kds-global-7d9c-x2x4q"
          : undefined);
    if (value === undefined) throw new Error(`${v.name} has neither a value nor a source`);
    const resolved = value.replace(/\$\(([A-Z_]+)\)/g, (_, name: string) => {
      const sample = samples[name];
      if (sample === undefined)
        throw new Error(`${v.name} refers to $(${name}), not defined before it`);
      return sample;
    });
    if (v.name.startsWith("KDS_MUX_")) env[v.name] = resolved;
    else samples[v.name] = resolved; // a helper for the others (the downward API)
  }
  return { command: command as "global" | "zone", args, env };
}

/** The flags of `args` (`--x` and `--x=y`). */
const flagsOf = (args: readonly string[]): string[] =>
  args.filter((a) => a.startsWith("--")).map((a) => a.split("=")[0] as string);

/** Checks one invocation against --help and the schema, then runs --print-config with it. */
async function checkInvocation(where: string, inv: Invocation): Promise<void> {
  const help = await run([inv.command, "--help"]);
  expect(help.code).toBe(0);
  const { flags, envs } = schema(inv.command);
  for (const flag of flagsOf(inv.args)) {
    expect(help.stdout, `${where}: ${flag} in kds-mux ${inv.command} --help`).toMatch(
      new RegExp(`^\\s+${flag} `, "m"),
    );
    expect(flags.has(flag), `${where}: ${flag} in the configuration schema`).toBe(true);
  }
  for (const name of Object.keys(inv.env)) {
    expect(envs.has(name), `${where}: ${name} in the configuration schema`).toBe(true);
    const flag = `--${name.slice("KDS_MUX_".length).toLowerCase().replace(/_/g, "-")}`;
    expect(help.stdout, `${where}: ${name} is ${flag} in --help`).toMatch(
      new RegExp(`^\\s+${flag} `, "m"),
    );
  }
  const printed = await run([inv.command, ...inv.args, "--print-config"], undefined, inv.env);
  expect(printed.code, `${where}: --print-config: ${printed.stderr}`).toBe(0);
  for (const name of Object.keys(inv.env)) {
    const key = name.slice("KDS_MUX_".length).toLowerCase().replace(/_/g, "-");
    expect(printed.stdout, `${where}: ${key} taken from the environment`).toMatch(
      new RegExp(`^${key}: .*# environment$`, "m"),
    );
  }
}

/** The probe paths of a container, with the port each names. */
function probes(c: Container): { path: string; port: string | number }[] {
  return [c.livenessProbe, c.readinessProbe, c.startupProbe].flatMap((p) =>
    p?.httpGet === undefined ? [] : [{ path: p.httpGet.path, port: p.httpGet.port }],
  );
}

/** The systemd unit's ExecStart arguments after the executable, and its Environment= variables. */
function unit(text: string): {
  exec: string[];
  env: Record<string, string>;
  keys: Map<string, string>;
} {
  const keys = new Map<string, string>();
  const env: Record<string, string> = {};
  for (const line of text.split("\n")) {
    const m = line.match(/^([A-Za-z]+)=(.*)$/);
    if (m === null) continue;
    const [, key, value] = m as unknown as [string, string, string];
    if (key === "Environment") {
      const [name, ...rest] = value.split("=");
      env[name as string] = rest.join("=");
    } else keys.set(key, value);
  }
  const exec = (keys.get("ExecStart") ?? "").split(/\s+/);
  expect(exec[0]).toMatch(/\/kds-mux$/);
  return { exec: exec.slice(1), env, keys };
}

describe("deployment examples", { timeout: 180_000 }, () => {
  const global = manifests("kubernetes/global.yaml");
  const zone = manifests("kubernetes/zone.yaml");
  const globalContainer = containerOf(only(global, "Deployment"));
  const zoneContainer = containerOf(only(zone, "Deployment"));

  it("runs a global as 3 replicas with /livez and /readyz probes, a preStop drain, the store URL from a Secret and a PodDisruptionBudget", () => {
    const deployment = only(global, "Deployment") as {
      spec: { replicas: number; selector: { matchLabels: Json } };
    };
    expect(deployment.spec.replicas).toBe(3);
    expect(globalContainer.livenessProbe?.httpGet?.path).toBe("/livez");
    expect(globalContainer.readinessProbe?.httpGet?.path).toBe("/readyz");
    // The preStop hook starts the drain with SIGTERM to kds-mux and waits for it to exit.
    expect(globalContainer.lifecycle?.preStop?.exec?.command.join(" ")).toMatch(
      /kill -TERM 1 .*while kill -0 1/,
    );
    const store = globalContainer.env?.find((v) => v.name === "KDS_MUX_STORE");
    expect(store?.valueFrom?.secretKeyRef).toEqual({ name: "kds-global-store", key: "url" });
    const pdb = only(global, "PodDisruptionBudget") as {
      spec: { minAvailable: number; selector: { matchLabels: Json } };
    };
    expect(pdb.spec.selector.matchLabels).toEqual(deployment.spec.selector.matchLabels);
    expect(pdb.spec.minAvailable).toBe(2);
    // The grace period leaves room for the drain.
    const env = invocation(globalContainer).env;
    const drainS = Number.parseInt(env.KDS_MUX_DRAIN_TIMEOUT ?? "30s", 10);
    const grace = (
      deployment as unknown as {
        spec: { template: { spec: { terminationGracePeriodSeconds: number } } };
      }
    ).spec.template.spec.terminationGracePeriodSeconds;
    expect(grace).toBeGreaterThan(drainS);
  });

  it("runs a zone as 2 replicas on a PostgreSQL store from a Secret, with no leadership setting", () => {
    const deployment = only(zone, "Deployment") as { spec: { replicas: number } };
    expect(deployment.spec.replicas).toBe(2);
    const store = zoneContainer.env?.find((v) => v.name === "KDS_MUX_STORE");
    expect(store?.valueFrom?.secretKeyRef?.key).toBe("url");
    const inv = invocation(zoneContainer);
    expect(
      [...flagsOf(inv.args), ...Object.keys(inv.env)].filter((s) => /leader/i.test(s)),
    ).toEqual([]);
    expect(zoneContainer.readinessProbe?.httpGet?.path).toBe("/readyz");
  });

  it("names its probes' port as the admin listener's port", () => {
    for (const c of [globalContainer, zoneContainer]) {
      const admin = invocation(c).env.KDS_MUX_ADMIN_LISTEN ?? "";
      for (const probe of probes(c)) {
        const port = c.ports?.find((p) => p.name === probe.port || p.containerPort === probe.port);
        expect(`:${port?.containerPort}`, `${c.name} probe ${probe.path}`).toBe(
          admin.slice(admin.lastIndexOf(":")),
        );
      }
    }
  });

  it("uses only flags and variables that `--help` and the configuration schema have, with values their parsers take", async () => {
    await checkInvocation("kubernetes/global.yaml", invocation(globalContainer));
    await checkInvocation("kubernetes/zone.yaml", invocation(zoneContainer));
    const service = unit(read("systemd/kds-mux-global.service"));
    expect(service.exec[0]).toBe("global");
    const env = Object.fromEntries(
      Object.entries(service.env).filter(([name]) => name.startsWith("KDS_MUX_")),
    );
    expect(Object.keys(env).length).toBe(Object.keys(service.env).length);
    await checkInvocation("systemd/kds-mux-global.service", {
      command: "global",
      args: service.exec.slice(1),
      env,
    });
    // SIGTERM drains; systemd waits longer than the drain before SIGKILL.
    expect(service.keys.get("KillSignal")).toBe("SIGTERM");
    expect(Number.parseInt(service.keys.get("TimeoutStopSec") ?? "0", 10)).toBeGreaterThan(
      Number.parseInt(env.KDS_MUX_DRAIN_TIMEOUT ?? "30s", 10),
    );
  });

  it("checks the way it means to: an unknown flag or variable is caught", () => {
    const { flags, envs } = schema("global");
    expect(flags.has("--drain-timeout")).toBe(true);
    expect(flags.has("--drain-timout")).toBe(false);
    expect(envs.has("KDS_MUX_DRAIN_TIMEOUT")).toBe(true);
    expect(envs.has("KDS_MUX_LEADER_ELECTION")).toBe(false);
  });

  describe("on a running global and zone", () => {
    let fleet: LiveFleet;
    beforeAll(async () => {
      fleet = await startFleet({ zone: true });
    }, 180_000);
    afterAll(async () => {
      await fleet?.stop();
    });

    it("answers every probe path with 200", async () => {
      const targets = [
        { url: fleet.globalAdmin, paths: probes(globalContainer).map((p) => p.path) },
        { url: fleet.zoneAdmin as string, paths: probes(zoneContainer).map((p) => p.path) },
      ];
      for (const { url, paths } of targets) {
        expect(paths.length).toBeGreaterThanOrEqual(2);
        for (const path of new Set(paths)) {
          // /readyz turns 200 once the store answered its first check.
          let status = 0;
          for (let i = 0; i < 150 && status !== 200; i++) {
            status = (await fetch(`${url}${path}`, { signal: AbortSignal.timeout(10_000) })).status;
            if (status !== 200) await new Promise((r) => setTimeout(r, 200));
          }
          expect(status, `GET ${url}${path}`).toBe(200);
        }
      }
    });
  });
});
