// A zone token issued for 5 s, with real processes: the global ends the
// zone's session within 1 s of the token's expiry with goaway TOKEN_EXPIRED
// ("token expired"); the zone, whose token file was renewed meanwhile, reads
// it again, dials again and is back in sync with nothing lost either way.
// Prints the measured figures.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { tokenClient } from "../../src/cli/admin-client.ts";
import { KdsProcess, run, until } from "./process.ts";

const dir = mkdtempSync(join(tmpdir(), "kds-token-expiry-"));
const processes: KdsProcess[] = [];
afterAll(async () => {
  for (const p of processes) await p.stop();
  rmSync(dir, { recursive: true, force: true });
});

const names = async (
  kind: string,
  server: string,
  mesh?: string,
): Promise<string[] | undefined> => {
  const r = await run([
    "get",
    kind,
    ...(mesh === undefined ? [] : ["--mesh", mesh]),
    "--server",
    server,
    "-o",
    "json",
  ]);
  if (r.code !== 0) return undefined;
  return (JSON.parse(r.stdout) as { name: string }[]).map((x) => x.name).sort();
};

/** The `exp` claim of a JWT, in ms since the epoch. */
function expiryOf(token: string): number {
  const payload = JSON.parse(Buffer.from(token.split(".")[1] as string, "base64url").toString());
  return Number(payload.exp) * 1000;
}

describe("a zone token that expires", { timeout: 300_000 }, () => {
  it("ends the session at expiry with token expired; a renewed token file brings the zone back in sync, nothing lost", async (context) => {
    context.onTestFailed(() => {
      console.log(`--- global\n${processes[0]?.output}\n--- zone\n${processes[1]?.output}`);
    });
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
      90_000,
    );
    const [muxUrl, adminUrl] = [m[1] as string, m[2] as string];
    const meshes = Array.from({ length: 200 }, (_, i) => `type: Mesh\nname: mesh-${i}\nspec: {}\n`);
    expect(
      (
        await run(
          ["apply", "-f", "-", "--server", adminUrl],
          ["type: Zone\nname: zone-1\nspec:\n  enabled: true\n", ...meshes].join("---\n"),
        )
      ).code,
    ).toBe(0);

    const tokenFile = join(dir, "zone-1.token");
    // Tokens are issued through the admin API from this process (a CLI process per token would take a
    // second of the 5 s on a loaded machine).
    const tokens = tokenClient(adminUrl);
    const issue = (validForSeconds: number) =>
      tokens.generateZoneToken({ zone: "zone-1", validForSeconds: BigInt(validForSeconds) });
    // The zone starts on a long token A and syncs.
    const first = await issue(3600);
    writeFileSync(tokenFile, first.token);
    const zone = new KdsProcess([
      "zone",
      "--name",
      "zone-1",
      "--global",
      muxUrl,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--token-file",
      tokenFile,
      "--log-level",
      "info",
    ]);
    processes.push(zone);
    const zoneAdmin = (
      await zone.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/, 90_000)
    )[1] as string;
    await until(
      () => names("Mesh", zoneAdmin),
      (v) => v?.length === 200,
      "200 meshes in zone-1",
      60_000,
    );
    // A token issued for 5 s (from the start of a second: its expiry is whole seconds) goes into the file,
    // and token A is revoked: the zone dials again and is admitted on the 5 s token.
    await new Promise((r) => setTimeout(r, 1000 - (Date.now() % 1000)));
    const short = await issue(5);
    writeFileSync(tokenFile, short.token);
    const expiresAt = expiryOf(short.token);
    await tokens.revokeToken({ tokenId: first.tokenId });
    await global.waitFor(
      new RegExp(`zone "zone-1" connected \\(zone token ${short.tokenId}`),
      30_000,
    );
    const connectedBeforeExpiryMs = expiresAt - Date.now();
    expect(connectedBeforeExpiryMs).toBeGreaterThan(0);
    // The renewed token goes into the file before the 5 s one expires.
    const renewed = await issue(3600);
    writeFileSync(tokenFile, renewed.token);
    // Warned at once: 5 s is within the default 24 h.
    await global.waitFor(/zone "zone-1"'s zone token expires at/, 10_000);

    // The global ends the session at expiry.
    const ended = await global.waitFor(
      /zone "zone-1"'s zone token expired at [^;]*; global "[^"]*" ended its session \(token expired\)/,
      30_000,
    );
    const lateMs = Date.now() - expiresAt;
    await zone.waitFor(/the session ended \(token_expired\)/, 10_000);
    expect(lateMs).toBeLessThan(1_000);
    expect(ended[0]).toContain("token expired");
    // The zone read the renewed file and was admitted on it.
    await global.waitFor(
      new RegExp(`zone "zone-1" connected \\(zone token ${renewed.tokenId}`),
      30_000,
    );
    const reconnectedMs = Date.now() - expiresAt;

    // The zone's own resources, synced up on the renewed session.
    const dataplanes = Array.from(
      { length: 20 },
      (_, i) => `type: Dataplane\nmesh: default\nname: dp-${i}\nspec:\n  address: 10.0.0.${i}\n`,
    ).join("---\n");
    expect((await run(["apply", "-f", "-", "--server", zoneAdmin], dataplanes)).code).toBe(0);
    await until(
      () => names("Dataplane", adminUrl, "default"),
      (v) => v?.length === 20,
      "20 dataplanes on the global",
      60_000,
    );

    // A change made while the zone redials reaches it; nothing was lost either way.
    expect(
      (await run(["apply", "-f", "-", "--server", adminUrl], "type: Mesh\nname: after\nspec: {}\n"))
        .code,
    ).toBe(0);
    const back = await until(
      () => names("Mesh", zoneAdmin),
      (v) => v?.length === 201,
      "201 meshes in zone-1 after the renewal",
      60_000,
    );
    const backInSyncMs = Date.now() - expiresAt;
    expect(back).toEqual(await names("Mesh", adminUrl));
    expect(
      (await names("Dataplane", adminUrl, "default"))?.map((n) => n.replace(/^zone-1\./, "")),
    ).toEqual(await names("Dataplane", zoneAdmin, "default"));
    // The third session runs on the renewed token, and the global shows its expiry.
    const inspect = await run(["inspect", "zones", "--server", adminUrl, "-o", "json"]);
    const zones = JSON.parse(inspect.stdout) as {
      zone: string;
      credentialExpiry: { at: string; credential: string } | null;
    }[];
    expect(zones.find((z) => z.zone === "zone-1")?.credentialExpiry).toEqual({
      at: new Date(expiryOf(renewed.token)).toISOString(),
      credential: "token",
    });
    const metrics = await fetch(`${adminUrl}/metrics`).then((r) => r.text());
    const gauge = metrics.match(/^kds_zone_token_earliest_expiry_seconds(?:\{[^}]*\})? (\S+)$/m);
    expect(Number(gauge?.[1])).toBe(expiryOf(renewed.token) / 1000);
    console.log(
      `token expiry: connected ${connectedBeforeExpiryMs} ms before expiry; session end seen ${lateMs} ms after expiry; admitted on the renewed token ${reconnectedMs} ms after expiry; back in sync (201 meshes, 20 dataplanes, 0 lost) ${backInSyncMs} ms after expiry`,
    );
  });
});
