// Certificates made in the test, with WebCrypto and @peculiar/x509 (no
// openssl binary needed): a CA, server certificates for localhost and
// 127.0.0.1, and client certificates naming a zone (by CN, or by URI and DNS
// SANs, or ambiguously, for the tests that refuse them).
import "reflect-metadata";
import * as x509 from "@peculiar/x509";

x509.cryptoProvider.set(crypto);

const algorithm = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;

/** A certificate with its key, as PEM. */
export interface Pem {
  readonly cert: string;
  readonly key: string;
}

/** A CA that signs certificates. */
export interface TestCa extends Pem {
  readonly name: string;
  /**
   * A certificate signed by this CA. `subject` replaces `CN=<commonName>`
   * (for example "CN=zone-b, CN=zone-a", two CNs); `uris` and `dnsNames`
   * are subject alternative names (a server certificate also gets
   * localhost and 127.0.0.1).
   */
  issue(options: {
    commonName: string;
    subject?: string;
    uris?: string[];
    dnsNames?: string[];
    server?: boolean;
    client?: boolean;
    validDays?: number;
  }): Promise<Pem>;
}

function pemKey(pkcs8: ArrayBuffer): string {
  const b64 = Buffer.from(pkcs8)
    .toString("base64")
    .replace(/(.{64})/g, "$1\n");
  return `-----BEGIN PRIVATE KEY-----\n${b64.trimEnd()}\n-----END PRIVATE KEY-----\n`;
}

let serial = 1;
const nextSerial = (): string => (serial++).toString(16).padStart(2, "0");

/** A new self-signed CA named `name`. */
export async function createCa(name: string): Promise<TestCa> {
  const keys = (await crypto.subtle.generateKey(algorithm, true, [
    "sign",
    "verify",
  ])) as CryptoKeyPair;
  const now = Date.now();
  const caCert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: nextSerial(),
    name: `CN=${name}`,
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + 86_400_000),
    signingAlgorithm: algorithm,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign,
        true,
      ),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return {
    name,
    cert: caCert.toString("pem"),
    key: pemKey(await crypto.subtle.exportKey("pkcs8", keys.privateKey)),
    async issue({
      commonName,
      subject,
      uris = [],
      dnsNames = [],
      server = false,
      client = false,
      validDays = 1,
    }) {
      const leaf = (await crypto.subtle.generateKey(algorithm, true, [
        "sign",
        "verify",
      ])) as CryptoKeyPair;
      const usages: string[] = [];
      if (server) usages.push(x509.ExtendedKeyUsage.serverAuth);
      if (client) usages.push(x509.ExtendedKeyUsage.clientAuth);
      const extensions: x509.Extension[] = [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension(usages, false),
        await x509.AuthorityKeyIdentifierExtension.create(keys.publicKey),
      ];
      const sans: x509.JsonGeneralName[] = [
        ...uris.map((value) => ({ type: "url" as const, value })),
        ...dnsNames.map((value) => ({ type: "dns" as const, value })),
      ];
      if (server)
        sans.push({ type: "dns", value: "localhost" }, { type: "ip", value: "127.0.0.1" });
      if (sans.length > 0) extensions.push(new x509.SubjectAlternativeNameExtension(sans));
      const cert = await x509.X509CertificateGenerator.create({
        serialNumber: nextSerial(),
        subject: subject ?? `CN=${commonName}`,
        issuer: caCert.subject,
        notBefore: new Date(Date.now() - 60_000),
        notAfter: new Date(Date.now() + validDays * 86_400_000),
        signingAlgorithm: algorithm,
        publicKey: leaf.publicKey,
        signingKey: keys.privateKey,
        extensions,
      });
      return {
        cert: cert.toString("pem"),
        key: pemKey(await crypto.subtle.exportKey("pkcs8", leaf.privateKey)),
      };
    },
  };
}
