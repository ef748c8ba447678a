// The node:http2 server helper over TLS, and the global's own controls.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serveGlobal } from "../../src/adapters/node/serve-global.ts";
import { GlobalServer } from "../../src/global/global-server.ts";
import { InMemoryZoneRegistry } from "../../src/global/zone-registry.ts";
import { silentLogger } from "../../src/log.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { eventually, request, response, startGlobal } from "../contract/harness.ts";

describe("serveGlobal over TLS", () => {
  let dir: string;
  let key: string;
  let cert: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "kds-mux-tls-"));
    execFileSync("openssl", [
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
      "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
      "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"),
    ], { stdio: "ignore" });
    key = readFileSync(join(dir, "key.pem"), "utf8");
    cert = readFileSync(join(dir, "cert.pem"), "utf8");
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("serves the mux over h2 with TLS", async () => {
    const global = new GlobalServer({ registry: new InMemoryZoneRegistry(["zone-1"]), logger: silentLogger });
    const served = await serveGlobal(global, { tls: { key, cert } });
    try {
      expect(served.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      const transport = createGrpcTransport({ baseUrl: served.url, nodeOptions: { ca: cert } });
      const zone = await new ZoneClient({ name: "zone-1", transport: connectMuxTransport(transport), logger: silentLogger }).dial();
      await eventually(() => global.session("zone-1") !== undefined, "session listed");
      const gs = global.session("zone-1");
      await zone.client.send(request("type.tls", "1"));
      expect((await gs?.server.recv())?.responseNonce).toBe("1");
      await zone.close();
    } finally {
      await served.close();
    }
  });

  it("is refused by a zone that does not trust the certificate", async () => {
    const global = new GlobalServer({ registry: new InMemoryZoneRegistry(["zone-1"]), logger: silentLogger });
    const served = await serveGlobal(global, { tls: { key, cert } });
    try {
      const zone = new ZoneClient({ name: "zone-1", transport: connectMuxTransport(createGrpcTransport({ baseUrl: served.url })), logger: silentLogger });
      await expect(zone.dial()).rejects.toMatchObject({ code: "transport" });
    } finally {
      await served.close();
    }
  });
});

describe("GlobalServer", () => {
  it("revokes a zone's session with a reason the zone can read", async () => {
    const t = await startGlobal("grpc");
    try {
      const zone = await new ZoneClient({ name: "zone-1", transport: t.transport(), logger: silentLogger }).dial();
      await eventually(() => t.global.session("zone-1") !== undefined, "session listed");
      expect(await t.global.revoke("zone-1")).toBe(true);
      const end = await zone.closed;
      expect(end).toMatchObject({ code: "zone_revoked", initiator: "peer", graceful: true });
      expect(await t.global.revoke("zone-1")).toBe(false);
    } finally {
      await t.close();
    }
  });

  it("calls onSession when a zone is ready and refuses zones once closed", async () => {
    const seen: string[] = [];
    const t = await startGlobal("memory", { onSession: (s) => void seen.push(s.peerId) });
    const zone = new ZoneClient({ name: "zone-2", transport: t.transport(), logger: silentLogger });
    const s = await zone.dial();
    await eventually(() => seen.length === 1, "onSession called");
    expect(seen).toEqual(["zone-2"]);
    await t.close();
    expect((await s.closed).code).toBe("shutdown");
    await expect(zone.dial()).rejects.toMatchObject({ code: "session_closed" });
  });

  it("rejects an invalid client-id and keeps serving", async () => {
    const t = await startGlobal("memory");
    try {
      const bad = new Headers({ "client-id": "Not A Zone" });
      await expect(t.global.accept(bad, (async function* () {})(), new AbortController().signal)).rejects.toMatchObject({ code: "invalid_argument" });
      const zone = await new ZoneClient({ name: "zone-1", transport: t.transport(), logger: silentLogger }).dial();
      await zone.server.send(response("x"));
      await zone.close();
    } finally {
      await t.close();
    }
  });
});
