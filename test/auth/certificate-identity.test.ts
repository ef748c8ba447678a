// Which zone a client certificate proves (certificateZone), how node:tls's
// SAN string is read (subjectAltNames), and certificate revocations in a
// store, without a network.
import { describe, expect, it } from "vitest";
import { subjectAltNames } from "../../src/adapters/node/peer-info.ts";
import { certificateZone } from "../../src/auth/certificate-identity.ts";
import {
  certificateKeys,
  normalizeFingerprint,
  normalizeSerial,
} from "../../src/auth/certificate-revocations.ts";
import type { PeerCertificate } from "../../src/auth/peer.ts";
import { TokenAuthority } from "../../src/auth/token-authority.ts";
import { TokenZoneAuthenticator } from "../../src/auth/zone-authenticator.ts";

const cert = (names: Omit<PeerCertificate, "authorized">): PeerCertificate => ({
  authorized: true,
  ...names,
});
const FINGERPRINT =
  "49:93:B2:7C:D7:0B:A4:96:FF:26:C2:53:CD:0D:BA:91:91:EF:43:B9:C4:3D:AE:CB:C5:00:B9:FA:C7:93:8D:5B";

describe("certificateZone", () => {
  it("takes the zone from the SANs when there are any, ignoring the CN", () => {
    expect(
      certificateZone(
        cert({ uris: ["spiffe://example.org/zone/zone-a"], commonNames: ["zone-b"] }),
        "zone-a",
      ),
    ).toBe("zone-a");
    expect(
      certificateZone(cert({ dnsNames: ["zone-a"], commonNames: ["zone-b", "zone-c"] }), "zone-a"),
    ).toBe("zone-a");
    expect(
      certificateZone(
        cert({ uris: ["spiffe://example.org/zone/zone-a"], dnsNames: ["Zone-A"] }),
        "zone-a",
      ),
    ).toBe("zone-a");
  });

  it("takes the zone from the one CN when there is no URI or DNS SAN", () => {
    expect(certificateZone(cert({ commonNames: ["zone-a"] }), "zone-a")).toBe("zone-a");
  });

  it("refuses an ambiguous certificate, naming the problem and what to do", () => {
    const refused = (c: PeerCertificate): unknown => {
      try {
        return certificateZone(c, "zone-a");
      } catch (error) {
        return error;
      }
    };
    expect(refused(cert({ commonNames: ["zone-b", "zone-a"] }))).toMatchObject({
      code: "unauthenticated",
      message: expect.stringMatching(
        /its subject holds 2 common names \(CN=zone-b, CN=zone-a\).*Issue the zone a certificate that names it.*or have it dial with a zone token and no client certificate/,
      ),
    });
    expect(refused(cert({ commonNames: [] }))).toMatchObject({
      code: "unauthenticated",
      message: expect.stringContaining("no URI or DNS SAN and no subject CN"),
    });
    expect(refused(cert({ commonNames: ["Zone A"] }))).toMatchObject({
      message: expect.stringContaining('its only CN, "Zone A", is not a zone name'),
    });
    expect(
      refused(cert({ uris: ["spiffe://example.org/zone/zone-a"], dnsNames: ["zone-b"] })),
    ).toMatchObject({
      message: expect.stringContaining(
        "its SANs name 2 zones (URI:spiffe://example.org/zone/zone-a, DNS:zone-b)",
      ),
    });
    // A SAN that names no zone makes the certificate ambiguous even when another names one (and the CN is not a fallback).
    expect(
      refused(cert({ dnsNames: ["zone-a", "zone-a.example.com"], commonNames: ["zone-a"] })),
    ).toMatchObject({
      message: expect.stringContaining("its SAN DNS:zone-a.example.com names no zone"),
    });
    expect(
      refused(
        cert({
          uris: ["spiffe://example.org/ns/default/sa/zone-a", "https://example.org/zone/zone-a/x"],
        }),
      ),
    ).toMatchObject({
      message: expect.stringContaining(
        "its SANs URI:spiffe://example.org/ns/default/sa/zone-a, URI:https://example.org/zone/zone-a/x name no zone",
      ),
    });
  });
});

describe("subjectAltNames (node:tls's SAN string)", () => {
  it("reads every DNS and URI name, including quoted values that hold a comma", () => {
    const sans = subjectAltNames(
      'DNS:zone-a, URI:spiffe://example.org/zone/zone-a, IP Address:127.0.0.1, URI:"spiffe://x/zone/a, DNS:zone-b", DNS:zone-c',
    );
    expect(sans.get("DNS")).toEqual(["zone-a", "zone-c"]);
    expect(sans.get("URI")).toEqual([
      "spiffe://example.org/zone/zone-a",
      "spiffe://x/zone/a, DNS:zone-b",
    ]);
    expect(sans.get("IP Address")).toEqual(["127.0.0.1"]);
    expect(subjectAltNames(undefined).size).toBe(0);
    // As Node 20+ prints a certificate whose SANs try to pass for several (node:crypto's X509Certificate.subjectAltName for a DirName
    // "CN=x, O=y", a DNS "zone-a, DNS:zone-b", a URI 'spiffe://t/zone/a", URI:x', an email and a DNS "zone-c"): each stays one name.
    const forged = subjectAltNames(
      'DirName:"O=y\\u002cCN=x", DNS:"zone-a\\u002c DNS:zone-b", URI:"spiffe://t/zone/a\\"\\u002c URI:x", email:a@b, DNS:zone-c',
    );
    expect(forged.get("DNS")).toEqual(["zone-a, DNS:zone-b", "zone-c"]);
    expect(forged.get("URI")).toEqual(['spiffe://t/zone/a", URI:x']);
    expect(forged.get("DirName")).toEqual(["O=y,CN=x"]);
    expect(forged.get("email")).toEqual(["a@b"]);
  });
});

describe("certificate expiry", () => {
  it("carries the certificate's notAfter as the identity's expiry (the session ends then)", async () => {
    const auth = new TokenZoneAuthenticator(new TokenAuthority({ issuer: "global" }), {
      certificates: true,
    });
    const notAfter = new Date("2027-03-01T12:00:00Z");
    const identity = await auth.authenticate({
      zone: "zone-a",
      headers: new Headers(),
      peer: { certificate: cert({ commonNames: ["zone-a"], serialNumber: "0B", notAfter }) },
    });
    expect(identity).toMatchObject({ proof: "certificate", expiresAt: notAfter });
  });
});

describe("certificate revocation", () => {
  it("normalizes serials and fingerprints so every spelling is one revocation, and refuses what is not hex", () => {
    expect(normalizeSerial("00:0A:ff")).toBe("aff");
    expect(normalizeSerial("0")).toBe("0");
    expect(normalizeFingerprint(FINGERPRINT)).toBe(FINGERPRINT.replaceAll(":", "").toLowerCase());
    expect(() => normalizeSerial("zz")).toThrow(/not a certificate serial number: give it in hex/);
    expect(() => normalizeFingerprint("abcd")).toThrow(
      /not a SHA-256 fingerprint: give its 64 hex digits/,
    );
    expect(certificateKeys({ serialNumber: "03", fingerprint256: "not hex" })).toEqual({
      serial: "3",
      fingerprint: undefined,
    });
  });

  it("refuses a revoked certificate by serial or fingerprint, and re-checks a live identity", async () => {
    const tokens = new TokenAuthority({ issuer: "global" });
    const auth = new TokenZoneAuthenticator(tokens, { certificates: true });
    const a = cert({ commonNames: ["zone-a"], serialNumber: "0A", fingerprint256: FINGERPRINT });
    const identity = await auth.authenticate({
      zone: "zone-a",
      headers: new Headers(),
      peer: { certificate: a },
    });
    expect(identity).toMatchObject({
      proof: "certificate",
      certificateSerial: "a",
      certificate: normalizeFingerprint(FINGERPRINT),
    });
    await tokens.revokeCertificate({ serial: "00:0a" }, "test"); // another spelling of 0A
    await expect(
      auth.authenticate({ zone: "zone-a", headers: new Headers(), peer: { certificate: a } }),
    ).rejects.toMatchObject({
      code: "unauthenticated",
      message: expect.stringMatching(
        /client certificate was revoked \(serial a, at .*\); issue the zone a new certificate, or have it dial with a zone token and no client certificate/,
      ),
    });
    await expect(auth.revalidate(identity)).rejects.toMatchObject({ code: "unauthenticated" });
    const b = cert({
      commonNames: ["zone-a"],
      serialNumber: "0B",
      fingerprint256: "00".repeat(32),
    });
    await auth.authenticate({ zone: "zone-a", headers: new Headers(), peer: { certificate: b } });
    await tokens.revokeCertificate({ fingerprint: "00".repeat(32) }, "test");
    await expect(
      auth.authenticate({ zone: "zone-a", headers: new Headers(), peer: { certificate: b } }),
    ).rejects.toMatchObject({ message: expect.stringContaining("SHA-256 fingerprint 0000") });
  });
});
