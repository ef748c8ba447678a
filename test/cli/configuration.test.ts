// Configuration with real processes: --config files, KDS_MUX_* environment
// variables and flags, their precedence, refusals of bad files (exit 2,
// naming the file, the key and the expected form) and --print-config's
// redaction. A global really started from a file shows the file took effect.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { KdsProcess, run } from "./process.ts";

const dir = mkdtempSync(join(tmpdir(), "kds-mux-config-"));
const file = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

/** The --print-config line of `key` (value and source comment). */
const line = (stdout: string, key: string): string | undefined =>
  stdout.split("\n").find((l) => l.startsWith(`${key}:`) || l.startsWith(`# ${key}:`));

describe("configuration: --config, KDS_MUX_* and flags (real processes)", {
  timeout: 120_000,
}, () => {
  it("takes each setting from the flag, else the environment, else the file, else the default", async () => {
    const config = file(
      "precedence.yaml",
      [
        "idle-timeout: 90s",
        "hello-timeout: 20s",
        "auth-timeout: 7s",
        "name: from-file",
        "max-handshakes: 99",
        "insecure-no-zone-auth: true",
      ].join("\n"),
    );
    const env = {
      KDS_MUX_HELLO_TIMEOUT: "21s",
      KDS_MUX_AUTH_TIMEOUT: "8s",
      KDS_MUX_LOG_LEVEL: "warn",
    };
    const r = await run(
      ["global", "--config", config, "--auth-timeout", "9s", "--print-config"],
      "",
      env,
    );
    expect(r.code, r.stderr).toBe(0);
    expect(line(r.stdout, "idle-timeout")).toBe("idle-timeout: 90s  # file"); // file over default
    expect(line(r.stdout, "hello-timeout")).toBe("hello-timeout: 21s  # environment"); // environment over file
    expect(line(r.stdout, "auth-timeout")).toBe("auth-timeout: 9s  # flag"); // flag over environment and file
    expect(line(r.stdout, "log-level")).toBe("log-level: warn  # environment");
    expect(line(r.stdout, "request-timeout")).toBe("request-timeout: 10s  # default");
    expect(line(r.stdout, "max-handshakes")).toBe("max-handshakes: 99  # file");
    expect(line(r.stdout, "insecure-no-zone-auth")).toBe("insecure-no-zone-auth: true  # file");
    expect(line(r.stdout, "tls-cert")).toBe("# tls-cert:  (not set; KDS_MUX_TLS_CERT)");
    // The file may also come from KDS_MUX_CONFIG, and an environment switch can turn a file's switch off.
    const viaEnv = await run(["global", "--print-config"], "", {
      KDS_MUX_CONFIG: config,
      KDS_MUX_INSECURE_NO_ZONE_AUTH: "false",
    });
    expect(viaEnv.code, viaEnv.stderr).toBe(0);
    expect(line(viaEnv.stdout, "name")).toBe("name: from-file  # file");
    expect(line(viaEnv.stdout, "insecure-no-zone-auth")).toBe(
      "insecure-no-zone-auth: false  # environment",
    );
  });

  it("runs a global and a zone configured by files, the zone's required flags included", async () => {
    const globalConfig = file(
      "global.yaml",
      [
        "listen: 127.0.0.1:0",
        "admin-listen: 127.0.0.1:0",
        "store: memory",
        "name: filed-global",
        "insecure-no-zone-auth: true",
      ].join("\n"),
    );
    const global = new KdsProcess(["global", "--config", globalConfig]);
    try {
      const m = await global.waitFor(
        /global "filed-global" listening on (http:\/\/127\.0\.0\.1:\d+) for zones .*NOTHING \(insecure\)/,
      );
      const zoneConfig = file(
        "zone.yaml",
        [
          `global: ${m[1] as string}`,
          "name: filed-zone",
          "store: memory",
          "admin-listen: 127.0.0.1:0",
        ].join("\n"),
      );
      const zone = new KdsProcess(["zone", "--config", zoneConfig]);
      try {
        await zone.waitFor(/zone "filed-zone" admin API listening on http:\/\/127\.0\.0\.1:\d+/);
        // Without TLS files, SIGHUP (an operator asking for a reload) is logged, not fatal.
        global.child.kill("SIGHUP");
        await global.waitFor(/SIGHUP: no TLS files to reload/);
        expect(global.child.exitCode).toBeNull();
      } finally {
        expect(await zone.stop()).toBe(0);
      }
    } finally {
      expect(await global.stop()).toBe(0);
    }
  });

  it("refuses an unknown key, a value of the wrong type and a duration that is not one, naming the file, the key and the form, and starts nothing", async () => {
    const unknown = file("unknown.yaml", "listen: 127.0.0.1:0\nidle-timout: 90s\n");
    const wrongType = file("wrong-type.yaml", "idle-timeout: [1, 2]\n");
    const notSwitch = file("not-switch.yaml", "insecure-no-zone-auth: maybe\n");
    const notDuration = file("not-duration.yaml", "hello-timeout: soon\n");
    const notChoice = file("not-choice.yaml", "log-format: xml\n");
    const drain = file("drain.yaml", "drain-timeout: forever\n");
    const [a, b, c, d, e, f, g] = await Promise.all([
      run(["global", "--config", unknown, "--store", "memory"]),
      run(["global", "--config", wrongType, "--store", "memory"]),
      run(["global", "--config", notSwitch, "--store", "memory"]),
      run(["global", "--config", notDuration, "--store", "memory"]),
      run(["global", "--config", notChoice, "--store", "memory"]),
      run(["global", "--store", "memory"], "", { KDS_MUX_IDLE_TIMEOUT: "a while" }),
      run(["global", "--config", drain, "--store", "memory"]),
    ]);
    for (const r of [a, b, c, d, e, f, g]) {
      expect(r.code, r.stderr).toBe(2);
      expect(r.stdout + r.stderr).not.toMatch(/listening/);
    }
    expect(a.stderr).toContain(`--config ${unknown}: unknown key "idle-timout"`);
    expect(a.stderr).toMatch(/takes the keys .*idle-timeout/);
    expect(b.stderr).toContain(
      `--config ${wrongType}: key "idle-timeout": a list where one value belongs (expected <duration>, as for --idle-timeout)`,
    );
    expect(c.stderr).toContain(
      `--config ${notSwitch}: key "insecure-no-zone-auth": "maybe" is not true or false`,
    );
    expect(d.stderr).toContain(
      `--config ${notDuration}: key "hello-timeout": --hello-timeout "soon" is not a duration; use for example 60s, 2m or 500ms`,
    );
    expect(e.stderr).toMatch(new RegExp(`--config ${notChoice}: key "log-format": .*text, json`));
    expect(f.stderr).toContain(
      'environment variable KDS_MUX_IDLE_TIMEOUT: --idle-timeout "a while" is not a duration',
    );
    expect(g.stderr).toContain(
      `--config ${drain}: key "drain-timeout": --drain-timeout "forever" is not a duration`,
    );
    // A value checked only at start is traced back to the file that set it.
    const badListen = await run([
      "global",
      "--config",
      file("bad-listen.yaml", "listen: nowhere\nstore: memory\n"),
    ]);
    expect(badListen.code, badListen.stderr).toBe(2);
    expect(badListen.stderr).toMatch(
      /--listen "nowhere" must be HOST:PORT.*\(--listen was set by key "listen" of .*bad-listen\.yaml\)/,
    );
  });

  it("--print-config redacts database passwords and secret values, wherever they came from", async () => {
    const config = file("secrets.yaml", "store: postgres://kds:hunter2@127.0.0.1:5432/kds\n");
    const fromFile = await run(["global", "--config", config, "--print-config"]);
    expect(fromFile.code, fromFile.stderr).toBe(0);
    expect(line(fromFile.stdout, "store")).toBe(
      "store: postgres://kds:<redacted>@127.0.0.1:5432/kds  # file",
    );
    const fromEnv = await run(
      ["zone", "--name", "z", "--global", "https://u:pw@global.example:5685", "--print-config"],
      "",
      { KDS_MUX_STORE: "postgresql://a:s3cret@db/x" },
    );
    expect(fromEnv.code, fromEnv.stderr).toBe(0);
    expect(line(fromEnv.stdout, "store")).toBe(
      "store: postgresql://a:<redacted>@db/x  # environment",
    );
    expect(line(fromEnv.stdout, "global")).toBe(
      "global: https://u:<redacted>@global.example:5685  # flag",
    );
    expect(fromFile.stdout + fromEnv.stdout).not.toMatch(/hunter2|s3cret|:pw@/);
  });
});

describe("configuration: names and redaction (unit)", () => {
  it("docs/configuration.md lists every setting of global and zone with its variable", async () => {
    const { readFileSync } = await import("node:fs");
    const { program } = await import("../../src/cli/main.ts");
    const { settingsOf } = await import("../../src/cli/configuration.ts");
    const doc = readFileSync(new URL("../../docs/configuration.md", import.meta.url), "utf8");
    const missing: string[] = [];
    for (const command of program().commands.filter(
      (c) => c.name() === "global" || c.name() === "zone",
    )) {
      for (const s of settingsOf(command)) {
        const row = new RegExp(
          `^\\| \`${s.key}\` \\| \`${s.env}\` \\| [^|]*\\b${command.name()}\\b`,
          "m",
        );
        if (!row.test(doc))
          missing.push(
            `add to the table of docs/configuration.md: | \`${s.key}\` | \`${s.env}\` | ${command.name()} |`,
          );
      }
    }
    expect(missing).toEqual([]);
  });

  it("derives keys and variables from flags, and hides a secret flag's whole value", async () => {
    const { Option } = await import("commander");
    const { redactSetting, settingOf } = await import("../../src/cli/configuration.ts");
    expect(settingOf(new Option("--drain-timeout <duration>"))).toMatchObject({
      key: "drain-timeout",
      env: "KDS_MUX_DRAIN_TIMEOUT",
      flag: "--drain-timeout",
    });
    expect(settingOf(new Option("--no-rebalance"))).toMatchObject({
      key: "rebalance",
      env: "KDS_MUX_REBALANCE",
    });
    expect(settingOf(new Option("--listen <host:port>").hideHelp())).toBeUndefined();
    expect(redactSetting({ key: "token", value: "eyJ.secret" })).toBe("<redacted>");
    expect(redactSetting({ key: "db-password", value: "x" })).toBe("<redacted>");
    expect(redactSetting({ key: "token-file", value: "/run/zone.token" })).toBe("/run/zone.token");
    expect(redactSetting({ key: "global", value: "https://a:b@g1:5685,https://c:d@g2:5685" })).toBe(
      "https://a:<redacted>@g1:5685,https://c:<redacted>@g2:5685",
    );
  });
});
