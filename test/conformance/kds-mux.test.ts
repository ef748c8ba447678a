// The conformance kit, run as `kds-mux conformance` in real processes,
// against a real `kds-mux global` (with zone tokens, so admission is checked
// in full, and a global resource, so resume is) and a real `kds-mux zone`
// pointed at the kit's listener: every check passes or is skipped for a
// stated reason, and the rules the issue names pass.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { CheckResult } from "../../src/conformance/index.ts";
import { KdsProcess, run } from "../cli/process.ts";

const dir = mkdtempSync(join(tmpdir(), "kds-conformance-"));
const processes: KdsProcess[] = [];
afterAll(async () => {
  for (const p of processes) await p.stop();
});

function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

/** The JSON report in a conformance run's output (progress lines go to stderr, the report to stdout). */
function report(stdout: string): { passed: boolean; results: CheckResult[] } {
  return JSON.parse(stdout.slice(stdout.indexOf("{"), stdout.lastIndexOf("}") + 1)) as {
    passed: boolean;
    results: CheckResult[];
  };
}

function outcomes(results: CheckResult[]): Record<string, string> {
  return Object.fromEntries(results.map((r) => [r.rule, r.outcome]));
}

describe("kds-mux conformance against kds-mux itself", { timeout: 300_000 }, () => {
  it("global mode: a real global passes every check (admission with tokens, overrun by one frame and by one byte, resume)", async () => {
    const global = new KdsProcess([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--log-level",
      "info",
    ]);
    processes.push(global);
    const m = await global.waitFor(
      /listening on (http:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (http:\/\/127\.0\.0\.1:\d+)/,
      120_000,
    );
    const [muxUrl, adminUrl] = [m[1] as string, m[2] as string];
    expect(
      (
        await run([
          "apply",
          "-f",
          file(
            "setup.yaml",
            "type: Zone\nname: conf-zone\nspec:\n  enabled: true\n---\ntype: Mesh\nname: conf-mesh\nspec:\n  mtls: true\n",
          ),
          "--server",
          adminUrl,
        ])
      ).code,
    ).toBe(0);
    const token = await run([
      "generate",
      "zone-token",
      "--zone",
      "conf-zone",
      "--server",
      adminUrl,
    ]);
    expect(token.code).toBe(0);
    const started = Date.now();
    const r = await run([
      "conformance",
      "global",
      "--target",
      muxUrl,
      "--zone",
      "conf-zone",
      "--token-file",
      file("conf-zone.token", token.stdout),
      "--json",
    ]);
    const { passed, results } = report(r.stdout);
    console.log(
      `conformance global against kds-mux global: ${results.length} checks in ${Date.now() - started} ms\n${results.map((x) => `  ${x.rule} ${x.outcome}: ${x.detail.slice(0, 140)}`).join("\n")}`,
    );
    expect(results.filter((x) => x.outcome === "fail")).toEqual([]);
    expect(passed).toBe(true);
    expect(r.code).toBe(0);
    const o = outcomes(results);
    for (const rule of [
      "admission.unauthenticated",
      "admission.permission-denied",
      "hello.byte-windows",
      "overrun.frame",
      "overrun.byte",
      "ping.pong",
      "resume.initial-versions",
      "unknown-type",
      "size.max-message-bytes",
      "size.elements",
      "refuse.version",
      "goaway.protocol-error-status",
      "goaway.graceful",
      "flow.returns-credit",
      "nonce.unique",
      "status.in-trailers",
      "nonce.first-request",
      "nonce.stale",
      "window.zero",
      "refuse.window-cap",
    ]) {
      expect(o[rule], rule).toBe("pass");
    }
  });

  it("zone mode: a real zone dialing the kit passes every check; a table without --json, exit 0", async () => {
    const kit = new KdsProcess([
      "conformance",
      "zone",
      "--listen",
      "127.0.0.1:0",
      "--kinds",
      "examples/example-kinds/kinds.yaml",
      "--wait",
      "60s",
    ]);
    processes.push(kit);
    const url = (
      await kit.waitFor(/listening on (http:\/\/127\.0\.0\.1:\d+)/, 120_000)
    )[1] as string;
    const zone = new KdsProcess([
      "zone",
      "--name",
      "conf-zone-2",
      "--global",
      url,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--log-level",
      "warn",
    ]);
    processes.push(zone);
    const code = await kit.exited;
    console.log(kit.output);
    expect(code).toBe(0);
    expect(kit.output).toMatch(/\d+ passed, 0 failed, \d+ skipped/);
    for (const rule of [
      "hello.byte-windows",
      "hello.peer-id",
      "hello.no-data-before-peer-hello",
      "ping.pong",
      "ack.echo",
      "nack.error-detail",
      "unknown-type",
      "overrun.frame",
      "flow.within-window",
    ]) {
      expect(kit.output).toMatch(
        new RegExp(`^${rule.replace(".", "\\.")}\\s+#[a-z-]+\\s+PASS`, "m"),
      );
    }
  });
});
