// Identity with real processes: a `kds-mux global` serving TLS (zone tokens
// and client certificates), `kds-mux zone` processes and the CLI, plus a few
// hand-made dials against the global process for the refusal codes.
import { Code } from "@connectrpc/connect";
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TokenAuthority } from "../../src/auth/token-authority.ts";
import { adminClient, tokenClient, type AdminTarget } from "../../src/cli/admin-client.ts";
import { eventually } from "../contract/harness.ts";
import { createCa } from "../support/certs.ts";
import { refusal, wireCode, zoneDialer } from "../support/zone-dials.ts";
import { KdsProcess, run } from "./process.ts";

/** A zone's Meshes; none yet while the zone has not learned the Mesh kind from the global's catalog (any other failure fails the test). */
async function meshes(client: ReturnType<typeof adminClient>): Promise<{ name: string }[]> {
  try {
    return (await client.get({ type: "Mesh" })).resources;
  } catch (error) {
    if (String(error).includes("unknown resource type")) return [];
    throw error;
  }
}

const dir = mkdtempSync(join(tmpdir(), "kds-mux-identity-"));
const file = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

describe("identity: zone tokens, TLS and mutual TLS (real processes)", { timeout: 180_000 }, () => {
  let global: KdsProcess;
  let muxUrl: string;
  let admin: AdminTarget;
  let caFile: string;
  let caPem: string;
  const zones: KdsProcess[] = [];
  let zonesCa: Awaited<ReturnType<typeof createCa>>;

  const zoneToken = async (zone: string, validForSeconds = 3600n): Promise<string> =>
    (await tokenClient(admin).generateZoneToken({ zone, validForSeconds })).token;
  /** A zone dialing the global process from this process (gRPC over TLS). */
  const dialer = (name: string, token?: string) => zoneDialer(muxUrl, caPem, name, { token });
  const connectedAt = async (zone: string): Promise<string | undefined> => {
    const insight = (await adminClient(admin).inspectZones({})).zones.find((z) => z.zone === zone);
    return insight?.online === true
      ? `${String(insight.connectedAt?.seconds)}:${String(insight.connectedAt?.nanos)}`
      : undefined;
  };

  beforeAll(async () => {
    const ca = await createCa("identity test CA");
    const server = await ca.issue({ commonName: "localhost", server: true });
    zonesCa = await createCa("identity zones CA");
    caPem = ca.cert;
    caFile = file("ca.pem", ca.cert);
    global = new KdsProcess([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "127.0.0.1:0",
      "--tls-cert",
      file("server.pem", server.cert),
      "--tls-key",
      file("server-key.pem", server.key),
      "--client-ca",
      file("zones-ca.pem", zonesCa.cert),
      "--store",
      "memory",
    ]);
    const listening = await global.waitFor(
      /listening on (https:\/\/127\.0\.0\.1:\d+) for zones.*admin API on (https:\/\/127\.0\.0\.1:\d+)/,
    );
    muxUrl = listening[1] as string;
    admin = { url: listening[2] as string, caCert: caPem };
    for (const name of ["zone-a", "zone-b", "zone-c", "zone-d"]) {
      await adminClient(admin).apply({
        resources: [{ type: "Zone", name, specJson: '{"enabled":true}' }],
      });
    }
    await adminClient(admin).apply({
      resources: [{ type: "Mesh", name: "default", specJson: '{"mtls":true}' }],
    });
  }, 180_000);

  afterAll(async () => {
    for (const z of zones) await z.stop();
    await global?.stop();
  });

  it("tells a zone without a token the command that creates one", async () => {
    const zone = new KdsProcess([
      "zone",
      "--name",
      "zone-a",
      "--global",
      muxUrl,
      "--ca-cert",
      caFile,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
    ]);
    try {
      await zone.waitFor(
        /presented no token[\s\S]*kds-mux generate zone-token --zone zone-a --server https:\/\/127\.0\.0\.1:\d+[\s\S]*retries in/,
      );
      expect(zone.output).not.toMatch(/connected to global/);
      expect(zone.output).not.toMatch(/not registered|disabled/); // nothing about the zone leaks before it proves its name
    } finally {
      expect(await zone.stop()).toBe(0);
    }
  });

  it("refuses forged, expired, revoked and another zone's tokens, each with its reason", async () => {
    const valid = await zoneToken("zone-a");
    // Forged: same header and claims, signed by another key that claims the same key id.
    const [header, payload] = valid.split(".");
    const forger = new TokenAuthority({ issuer: "global" });
    const forgedSignature = (await forger.issueZoneToken("zone-a")).token.split(".")[2];
    const forged = await refusal(
      dialer("zone-a", `${header}.${payload}.${forgedSignature}`).dial(),
    );
    expect(forged).toMatchObject({
      code: "unauthenticated",
      message: expect.stringContaining("signature does not verify"),
    });
    expect(wireCode(forged)).toBe(Code.Unauthenticated);
    // A token of another control plane names a key this global does not hold (or not with that key).
    const foreign = await refusal(
      dialer(
        "zone-a",
        (await new TokenAuthority({ issuer: "other" }).issueZoneToken("zone-a")).token,
      ).dial(),
    );
    expect(foreign.code).toBe("unauthenticated");
    // Not a token at all.
    expect(await refusal(dialer("zone-a", "not-a-token").dial())).toMatchObject({
      code: "unauthenticated",
      message: expect.stringContaining("not a JWT"),
    });

    // Another zone's token: zone-a's token presented as zone-b.
    const wrong = await refusal(dialer("zone-b", valid).dial());
    expect(wrong).toMatchObject({
      code: "permission_denied",
      message: expect.stringContaining(
        'proves zone "zone-a", but the stream names itself "zone-b"',
      ),
    });
    expect(wireCode(wrong)).toBe(Code.PermissionDenied);

    // Revoked, through the CLI, by the token itself.
    const revokedFile = file("revoked.token", await zoneToken("zone-a"));
    const revoked = await run([
      "revoke",
      "zone-token",
      "--token-file",
      revokedFile,
      "--server",
      admin.url,
      "--ca-cert",
      caFile,
    ]);
    expect(revoked.code, revoked.stderr).toBe(0);
    const refusedRevoked = await refusal(
      dialer("zone-a", readFileSync(revokedFile, "utf8")).dial(),
    );
    expect(refusedRevoked).toMatchObject({
      code: "unauthenticated",
      message: expect.stringContaining("was revoked"),
    });
    expect(wireCode(refusedRevoked)).toBe(Code.Unauthenticated);

    // Expired: valid for one second; dialed once the wall clock is past its expiry.
    const shortLived = await tokenClient(admin).generateZoneToken({
      zone: "zone-a",
      validForSeconds: 1n,
    });
    const expiresAt = Number(shortLived.expiresAt?.seconds) * 1000;
    await new Promise((r) => setTimeout(r, Math.max(0, expiresAt - Date.now()) + 1_100));
    const expired = await refusal(dialer("zone-a", shortLived.token).dial());
    expect(expired).toMatchObject({
      code: "unauthenticated",
      message: expect.stringMatching(/zone token expired at \d{4}-/),
    });

    // The valid token is admitted.
    const session = await dialer("zone-a", valid).dial();
    expect(session.peerId).toBe("global");
    await session.close();
  });

  it("lets only a valid token replace a live session, and ends it at once when its token is revoked", async () => {
    const tokenFile = file(
      "zone-a.token",
      (
        await run([
          "generate",
          "zone-token",
          "--zone",
          "zone-a",
          "--server",
          admin.url,
          "--ca-cert",
          caFile,
        ])
      ).stdout,
    );
    const zone = new KdsProcess([
      "zone",
      "--name",
      "zone-a",
      "--global",
      muxUrl,
      "--ca-cert",
      caFile,
      "--token-file",
      tokenFile,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
    ]);
    zones.push(zone);
    await zone.waitFor(/connected to global "global"/);
    await eventually(async () => (await connectedAt("zone-a")) !== undefined, "zone-a online");
    const since = await connectedAt("zone-a");

    // Impostors: no token, a token of zone-b, a forged one. None replaces the session.
    expect((await refusal(dialer("zone-a").dial())).code).toBe("unauthenticated");
    expect((await refusal(dialer("zone-a", await zoneToken("zone-b")).dial())).code).toBe(
      "permission_denied",
    );
    const [h, p] = (await zoneToken("zone-a")).split(".");
    expect((await refusal(dialer("zone-a", `${h}.${p}.${"A".repeat(86)}`).dial())).code).toBe(
      "unauthenticated",
    );
    expect(await connectedAt("zone-a")).toBe(since);
    expect(zone.output).not.toMatch(/session ended/);

    // A valid token does replace it.
    const replacement = await dialer("zone-a", await zoneToken("zone-a")).dial();
    await zone.waitFor(/session ended \(replaced\)/);
    await replacement.close();
    await zone.waitFor(/connected to global "global"[\s\S]*connected to global "global"/); // the real zone is back

    // Revoking its token ends its live session at once, and it stays out.
    const revoked = await run([
      "revoke",
      "zone-token",
      "--token-file",
      tokenFile,
      "--server",
      admin.url,
      "--ca-cert",
      caFile,
    ]);
    expect(revoked.code, revoked.stderr).toBe(0);
    await zone.waitFor(/session ended \(zone_revoked\)[^\n]*its zone token was revoked/);
    await zone.waitFor(/zone token was revoked \(token [0-9a-f-]+, at/);
    await eventually(async () => (await connectedAt("zone-a")) === undefined, "zone-a offline");
  });

  it("ends a zone's live session when the zone is disabled or deleted", async () => {
    const session = await dialer("zone-b", await zoneToken("zone-b")).dial();
    await adminClient(admin).apply({
      resources: [{ type: "Zone", name: "zone-b", specJson: '{"enabled":false}' }],
    });
    expect(await session.closed).toMatchObject({ code: "zone_revoked", initiator: "peer" });
    await adminClient(admin).apply({
      resources: [{ type: "Zone", name: "zone-b", specJson: '{"enabled":true}' }],
    });
    const again = await dialer("zone-b", await zoneToken("zone-b")).dial();
    await adminClient(admin).delete({ type: "Zone", name: "zone-b" });
    expect(await again.closed).toMatchObject({ code: "zone_revoked", initiator: "peer" });
  });

  it("serves no admin API on the zone port, and refuses Zone names that could never connect", async () => {
    const onMuxPort = await run(["get", "Mesh", "--server", muxUrl, "--ca-cert", caFile]);
    expect(onMuxPort.code).toBe(1);
    await expect(adminClient({ url: muxUrl, caCert: caPem }).listTypes({})).rejects.toMatchObject({
      code: Code.Unimplemented,
    });
    for (const name of ["a.b", "Zone_Upper.x"]) {
      await expect(
        adminClient(admin).apply({
          resources: [{ type: "Zone", name, specJson: '{"enabled":true}' }],
        }),
      ).rejects.toMatchObject({
        code: Code.InvalidArgument,
        rawMessage: expect.stringContaining("could never connect"),
      });
    }
    // The internal identity kinds are not visible through the admin API.
    await expect(adminClient(admin).get({ type: "SigningKey" })).rejects.toMatchObject({
      rawMessage: expect.stringContaining('unknown resource type "SigningKey"'),
    });
    expect((await adminClient(admin).listTypes({})).types.map((t) => t.kind)).not.toContain(
      "TokenRevocation",
    );
    expect((await adminClient(admin).listTypes({})).types.map((t) => t.kind)).not.toContain(
      "CertificateRevocation",
    );
  });

  it("runs zones over TLS and mutual TLS, on HTTP/2 and half-duplex", async () => {
    const zoneC = await zonesCa.issue({ commonName: "zone-c", client: true });
    const zoneD = await zonesCa.issue({ commonName: "zone-d", client: true });
    const started = [
      // mTLS over HTTP/2 (gRPC): no token, the certificate proves zone-c.
      new KdsProcess([
        "zone",
        "--name",
        "zone-c",
        "--global",
        muxUrl,
        "--ca-cert",
        caFile,
        "--client-cert",
        file("c.pem", zoneC.cert),
        "--client-key",
        file("c-key.pem", zoneC.key),
        "--admin-listen",
        "127.0.0.1:0",
        "--store",
        "memory",
      ]),
      // mTLS over half-duplex (HTTPS).
      new KdsProcess([
        "zone",
        "--name",
        "zone-d",
        "--global",
        muxUrl,
        "--transport",
        "half-duplex",
        "--ca-cert",
        caFile,
        "--client-cert",
        file("d.pem", zoneD.cert),
        "--client-key",
        file("d-key.pem", zoneD.key),
        "--admin-listen",
        "127.0.0.1:0",
        "--store",
        "memory",
      ]),
    ];
    zones.push(...started);
    // A token over half-duplex (HTTPS) too; its admin API bound to 0.0.0.0 needs an admin token.
    const adminTokenFile = join(dir, "zone-e-admin.token");
    await adminClient(admin).apply({
      resources: [{ type: "Zone", name: "zone-e", specJson: '{"enabled":true}' }],
    });
    const zoneE = new KdsProcess([
      "zone",
      "--name",
      "zone-e",
      "--global",
      muxUrl,
      "--transport",
      "half-duplex",
      "--ca-cert",
      caFile,
      "--token-file",
      file("e.token", await zoneToken("zone-e")),
      "--admin-listen",
      "0.0.0.0:0",
      "--admin-token-file",
      adminTokenFile,
      "--store",
      "memory",
    ]);
    zones.push(zoneE);
    for (const [zone, transport] of [
      [started[0], "grpc"],
      [started[1], "half-duplex"],
      [zoneE, "half-duplex"],
    ] as const) {
      await zone?.waitFor(new RegExp(`connected to global "global" over ${transport}`));
    }
    // A zone admitted by certificate: its session ends at the certificate's notAfter, shown in inspect zones.
    await eventually(
      async () => {
        const c = (await adminClient(admin).inspectZones({})).zones.find(
          (z) => z.zone === "zone-c",
        );
        return (
          c?.credential === "certificate" &&
          c.credentialExpiresAt !== undefined &&
          Number(c.credentialExpiresAt.seconds) * 1000 > Date.now()
        );
      },
      "zone-c's certificate expiry in inspect zones",
      20_000,
    );
    const zoneUrls = await Promise.all(
      started.map(
        async (z) =>
          (await z.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/))[1] as string,
      ),
    );
    for (const url of zoneUrls) {
      await eventually(
        async () => (await meshes(adminClient(url))).some((r) => r.name === "default"),
        `the mesh on ${url}`,
        20_000,
      );
    }
    // The zone's own admin API on 0.0.0.0 follows the global's rules.
    const eUrl = `http://127.0.0.1:${(await zoneE.waitFor(/admin API listening on http:\/\/0\.0\.0\.0:(\d+)/))[1] as string}`;
    await expect(adminClient(eUrl).get({ type: "Mesh" })).rejects.toMatchObject({
      code: Code.Unauthenticated,
    });
    const zoneAdmin = { url: eUrl, token: readFileSync(adminTokenFile, "utf8") };
    await eventually(
      async () => (await meshes(adminClient(zoneAdmin))).length > 0,
      "the mesh on zone-e",
      20_000,
    );
    expect(statSync(adminTokenFile).mode & 0o777).toBe(0o600);
  });
});

describe("identity: an admin API bound to 0.0.0.0 (real process, reached through 127.0.0.1)", {
  timeout: 180_000,
}, () => {
  let global: KdsProcess;
  let url: string;
  let bootstrap: string;

  beforeAll(async () => {
    const tokenFile = join(dir, "bootstrap.token");
    global = new KdsProcess([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "0.0.0.0:0",
      "--admin-token-file",
      tokenFile,
      "--store",
      "memory",
    ]);
    const port = (await global.waitFor(/admin API on http:\/\/0\.0\.0\.0:(\d+)/))[1] as string;
    url = `http://127.0.0.1:${port}`;
    bootstrap = readFileSync(tokenFile, "utf8").trim();
  }, 180_000);

  afterAll(async () => {
    await global?.stop();
  });

  it("refuses a call without a token, and a read-only token's write; logs every write with who made it", async () => {
    const anonymous = await run(["get", "Mesh", "--server", url]);
    expect(anonymous.code).toBe(1);
    expect(anonymous.stderr).toMatch(
      /not bound to a loopback address, so every call needs an admin token/,
    );

    const readOnly = await run(
      ["generate", "admin-token", "--name", "auditor", "--role", "read-only", "--server", url],
      "",
    );
    expect(readOnly.code, readOnly.stderr).toBe(1); // the CLI itself needs a token here
    const viaEnv = await run(
      ["generate", "admin-token", "--name", "auditor", "--role", "read-only", "--server", url],
      "",
      { KDS_MUX_TOKEN: bootstrap },
    );
    expect(viaEnv.code, viaEnv.stderr).toBe(0);
    const auditor = viaEnv.stdout.trim();

    const read = await run(["get", "Mesh", "--server", url, "--token", auditor]);
    expect(read.code, read.stderr).toBe(0);
    const mesh = file("mesh.yaml", "type: Mesh\nname: default\nspec:\n  mtls: true\n");
    const write = await run(["apply", "-f", mesh, "--server", url, "--token", auditor]);
    expect(write.code).toBe(1);
    expect(write.stderr).toMatch(
      /"auditor" \(read-only token [0-9a-f-]+\) may only read; Apply writes/,
    );
    await expect(
      tokenClient({ url, token: auditor }).generateAdminToken({
        name: "escalate",
        role: "admin",
        validForSeconds: 60n,
      }),
    ).rejects.toMatchObject({ code: Code.PermissionDenied });

    const adminWrite = await run(["apply", "-f", mesh, "--server", url, "--token", bootstrap]);
    expect(adminWrite.code, adminWrite.stderr).toBe(0);
    await global.waitFor(
      /admin write by "bootstrap" \(admin token [0-9a-f-]+\): applied Mesh default/,
    );
    await global.waitFor(
      /admin write by "bootstrap" \(admin token [0-9a-f-]+\): issued read-only admin token [0-9a-f-]+ for "auditor"/,
    );
  });

  it("will not start a non-loopback admin listener without a place for the first admin token", async () => {
    const refused = await run(["global", "--listen", "127.0.0.1:0", "--admin-listen", "0.0.0.0:0"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/is not a loopback address.*--admin-token-file/);
  });
});
