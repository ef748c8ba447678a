// Certificate rotation with real processes: a `kds-mux global` serving TLS
// while `kds-mux zone` processes (mutual TLS) are connected has its
// certificate files replaced by a certificate from another CA, after the
// zones' --ca-cert file gained that CA (each zone reloads it without
// reconnecting); its --client-ca gains a second CA for zones' client
// certificates. Every zone stays connected (the same session), a new
// handshake sees the new certificate (its fingerprint and serial), a new
// zone trusting only the new CA, with a client certificate only the new
// client CA signed, connects, a broken file is refused with a log line while
// the certificate before it is still served, and SIGHUP reads the files
// again. KDS_TEST_TLS_ZONES=50 runs the issue's 50 zones (3 by default).
import { X509Certificate } from "node:crypto";
import { mkdtempSync, renameSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminClient, type AdminTarget } from "../../src/cli/admin-client.ts";
import { createCa, type Pem } from "../support/certs.ts";
import { KdsProcess, until } from "./process.ts";

const ZONES = Number(process.env.KDS_TEST_TLS_ZONES ?? 3);
const dir = mkdtempSync(join(tmpdir(), "kds-mux-tls-reload-"));
const path = (name: string): string => join(dir, name);
/** Replaces `name` as a rotation tool does: a new file renamed over the old one. */
const replace = (name: string, text: string): void => {
  writeFileSync(path(`${name}.new`), text);
  renameSync(path(`${name}.new`), path(name));
};

/** The certificate a new TLS handshake with `port` sees (trusting `ca`). */
function servedCertificate(
  port: number,
  ca: string,
): Promise<{ fingerprint256: string; serialNumber: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(
      { host: "127.0.0.1", port, ca, servername: "localhost", ALPNProtocols: ["h2"] },
      () => {
        const cert = socket.getPeerCertificate();
        socket.destroy();
        resolve({ fingerprint256: cert.fingerprint256, serialNumber: cert.serialNumber });
      },
    );
    socket.once("error", reject);
    socket.setTimeout(10_000, () => socket.destroy(new Error("TLS handshake timed out")));
  });
}

/** Waits for `pattern` in what `proc` printed after `mark` (an earlier length of its output). */
async function waitAfter(
  proc: KdsProcess,
  mark: number,
  pattern: RegExp,
  timeoutMs = 20_000,
): Promise<string> {
  const text = await until(
    async () => proc.output.slice(mark),
    (t) => pattern.test(t),
    `${pattern} in the process's output`,
    timeoutMs,
  );
  return text;
}

const identity = (pem: string): { fingerprint256: string; serialNumber: string } => {
  const cert = new X509Certificate(pem);
  return { fingerprint256: cert.fingerprint256, serialNumber: cert.serialNumber };
};

describe(`certificate reload: ${ZONES} zones stay connected while the global's certificate is replaced (real processes)`, {
  timeout: 60_000 + ZONES * 6_000,
}, () => {
  let global: KdsProcess;
  let admin: AdminTarget;
  let zonePort: number;
  let adminPort: number;
  let oldCa: Awaited<ReturnType<typeof createCa>>;
  let newCa: Awaited<ReturnType<typeof createCa>>;
  let oldServer: Pem;
  // Zones prove their names with client certificates (mutual TLS): the global trusts --client-ca zones-ca.pem.
  let zonesCa: Awaited<ReturnType<typeof createCa>>;
  let newZonesCa: Awaited<ReturnType<typeof createCa>>;
  /** Writes a client certificate for `name` signed by `ca`; returns the zone's flags for it. */
  const clientCertificate = async (
    name: string,
    ca: Awaited<ReturnType<typeof createCa>>,
  ): Promise<string[]> => {
    const pem = await ca.issue({ commonName: name, client: true });
    writeFileSync(path(`${name}.pem`), pem.cert);
    writeFileSync(path(`${name}-key.pem`), pem.key);
    return ["--client-cert", path(`${name}.pem`), "--client-key", path(`${name}-key.pem`)];
  };
  const zones: KdsProcess[] = [];
  const connectedAt = async (): Promise<Map<string, string>> => {
    const all = (await adminClient(admin).inspectZones({})).zones;
    return new Map(
      all
        .filter((z) => z.online)
        .map((z) => [z.zone, `${String(z.connectedAt?.seconds)}.${String(z.connectedAt?.nanos)}`]),
    );
  };

  beforeAll(
    async () => {
      oldCa = await createCa("rotation old CA");
      newCa = await createCa("rotation new CA");
      zonesCa = await createCa("rotation zones CA");
      newZonesCa = await createCa("rotation new zones CA");
      replace("zones-ca.pem", zonesCa.cert);
      oldServer = await oldCa.issue({ commonName: "localhost", server: true });
      replace("server.pem", oldServer.cert);
      replace("server-key.pem", oldServer.key);
      writeFileSync(path("old-ca.pem"), oldCa.cert);
      writeFileSync(path("new-ca.pem"), newCa.cert);
      global = new KdsProcess([
        "global",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--store",
        "memory",
        "--tls-cert",
        path("server.pem"),
        "--tls-key",
        path("server-key.pem"),
        "--client-ca",
        path("zones-ca.pem"),
      ]);
      const m = await global.waitFor(
        /listening on https:\/\/127\.0\.0\.1:(\d+) for zones.*admin API on (https:\/\/127\.0\.0\.1:(\d+))/,
      );
      zonePort = Number(m[1]);
      adminPort = Number(m[3]);
      // Trusts both CAs, so the admin calls work before and after the rotation.
      admin = { url: m[2] as string, caCert: `${oldCa.cert}\n${newCa.cert}` };
      const names = Array.from({ length: ZONES }, (_, i) => `zone-${i}`);
      await adminClient(admin).apply({
        resources: [...names, "zone-new"].map((name) => ({
          type: "Zone",
          name,
          specJson: '{"enabled":true}',
        })),
      });
      // Started in batches of 10, so 50 node processes do not all compile at once on 2 cores.
      for (let i = 0; i < names.length; i += 10) {
        const batch = await Promise.all(
          names
            .slice(i, i + 10)
            .map(
              async (name) =>
                new KdsProcess([
                  "zone",
                  "--name",
                  name,
                  "--global",
                  `https://127.0.0.1:${zonePort}`,
                  "--ca-cert",
                  path("old-ca.pem"),
                  ...(await clientCertificate(name, zonesCa)),
                  "--admin-listen",
                  "127.0.0.1:0",
                  "--store",
                  "memory",
                ]),
            ),
        );
        zones.push(...batch);
        await Promise.all(
          batch.map((z) => z.waitFor(/connected to global "global" over grpc/, 120_000)),
        );
      }
    },
    120_000 + ZONES * 6_000,
  );

  afterAll(async () => {
    await Promise.all(zones.map((z) => z.stop()));
    await global?.stop();
  });

  it("serves a new certificate to new handshakes and keeps every zone's session", async () => {
    expect(await servedCertificate(zonePort, oldCa.cert)).toEqual(identity(oldServer.cert));
    const before = await until(connectedAt, (m) => m.size === ZONES, `${ZONES} zones online`);

    // As an operator would, the zones trust the new CA first: their --ca-cert file gains it, and each zone reloads it
    // (used from its next connection; the open one continues).
    const zoneMarks = zones.map((z) => z.output.length);
    replace("old-ca.pem", `${oldCa.cert}\n${newCa.cert}`);
    await Promise.all(
      zones.map((z, i) =>
        waitAfter(
          z,
          zoneMarks[i] ?? 0,
          /TLS reloaded for zone "zone-\d+"'s connection to the global \(a file changed\) from .*--ca-cert /,
        ),
      ),
    );

    // Rotate to a certificate from another CA: the key first, then the certificate (a mismatched moment in between is refused or settled).
    const newServer = await newCa.issue({ commonName: "localhost", server: true });
    let mark = global.output.length;
    // The global also starts trusting a second CA for zones' client certificates (the same reload: one poll sees all three files).
    replace("zones-ca.pem", `${zonesCa.cert}\n${newZonesCa.cert}`);
    replace("server-key.pem", newServer.key);
    replace("server.pem", newServer.cert);
    await waitAfter(
      global,
      mark,
      new RegExp(
        `TLS reloaded for the global's listeners \\(a file changed\\).*serial ${identity(newServer.cert).serialNumber}`,
      ),
    );
    // Both listeners hand new handshakes the new certificate.
    expect(await servedCertificate(zonePort, newCa.cert)).toEqual(identity(newServer.cert));
    expect(await servedCertificate(adminPort, newCa.cert)).toEqual(identity(newServer.cert));

    // A zone trusting only the new CA, with a client certificate from the new zones CA, connects now.
    const fresh = new KdsProcess([
      "zone",
      "--name",
      "zone-new",
      "--global",
      `https://127.0.0.1:${zonePort}`,
      "--ca-cert",
      path("new-ca.pem"),
      ...(await clientCertificate("zone-new", newZonesCa)),
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
    ]);
    zones.push(fresh);
    await fresh.waitFor(/connected to global "global" over grpc/);

    // Every zone is still on the session it had before the rotation, and none reconnected.
    const after = await connectedAt();
    for (const [zone, at] of before) expect(after.get(zone), zone).toBe(at);
    expect(after.has("zone-new")).toBe(true);
    for (const z of zones)
      expect(z.output.match(/connected to global "global"/g)?.length, z.output).toBe(1);
    console.log(
      `certificate reload: ${ZONES} zones kept their sessions through the rotation; the new zone connected with only the new CA and a client certificate of the new zones CA`,
    );

    // A broken certificate file is refused with a log line, and the certificate before it is still served.
    mark = global.output.length;
    replace(
      "server.pem",
      "-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n",
    );
    await waitAfter(
      global,
      mark,
      new RegExp(
        `TLS reload of the global's listeners refused \\(a file changed\\): .*--tls-cert .*server\\.pem.*still using the previous certificate \\(serial ${identity(newServer.cert).serialNumber}`,
      ),
    );
    expect(await servedCertificate(zonePort, newCa.cert)).toEqual(identity(newServer.cert));
    expect((await connectedAt()).size).toBe(ZONES + 1);

    // SIGHUP reads the files again: fixed, they hold what is served, so nothing changes; the process keeps running.
    mark = global.output.length;
    replace("server.pem", newServer.cert);
    global.child.kill("SIGHUP");
    await waitAfter(global, mark, /TLS reload of the global's listeners \(SIGHUP\): .* unchanged/);
    expect(global.output.slice(mark)).not.toMatch(/refused/);
    expect(await servedCertificate(zonePort, newCa.cert)).toEqual(identity(newServer.cert));
    expect(global.child.exitCode).toBeNull();
  });
});

describe("certificate reload: bad files at start (real process)", { timeout: 60_000 }, () => {
  it("refuses a certificate that does not parse, or a key of another certificate, naming the files", async () => {
    const ca = await createCa("start CA");
    const a = await ca.issue({ commonName: "localhost", server: true });
    const b = await ca.issue({ commonName: "localhost", server: true });
    writeFileSync(
      path("bad.pem"),
      "-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n",
    );
    writeFileSync(path("a.pem"), a.cert);
    writeFileSync(path("a-key.pem"), a.key);
    writeFileSync(path("b-key.pem"), b.key);
    const { run } = await import("./process.ts");
    const [bad, mismatched] = await Promise.all([
      run([
        "global",
        "--store",
        "memory",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--tls-cert",
        path("bad.pem"),
        "--tls-key",
        path("a-key.pem"),
      ]),
      run([
        "global",
        "--store",
        "memory",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--tls-cert",
        path("a.pem"),
        "--tls-key",
        path("b-key.pem"),
      ]),
    ]);
    expect(bad.code, bad.stderr).toBe(2);
    expect(bad.stderr).toMatch(
      /--tls-cert .*bad\.pem, --tls-key .*a-key\.pem: not usable TLS material/,
    );
    expect(mismatched.code, mismatched.stderr).toBe(2);
    expect(mismatched.stderr).toMatch(
      /not usable TLS material \(.*key values mismatch.*\); each file must hold PEM and the key must match the certificate/,
    );
    expect(bad.stdout + bad.stderr + mismatched.stdout + mismatched.stderr).not.toMatch(
      /listening/,
    );
  });
});
