/**
 * Revoked client certificates, kept in the control plane's store as internal
 * `CertificateRevocation` resources, so every instance sharing the store
 * refuses them and ends their sessions. A certificate is revoked by its
 * serial number (named `serial.<hex>`) or by its SHA-256 fingerprint (named
 * `sha256.<hex>`); both are kept as lower-case hex without colons, a serial
 * without leading zeros, so every spelling of one value is one revocation.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { KdsError } from "../errors.ts";
import {
  CertificateRevocationSpecSchema,
  type CertificateRevocationSpec,
} from "../gen/kds/v1/auth_pb.ts";
import type { ResourceStore } from "../store/contract.ts";
import { CERTIFICATE_REVOCATION_KIND } from "../kinds/builtin-types.ts";

/** How a certificate is named for revocation: its serial number or its SHA-256 fingerprint, in hex. */
export type CertificateTarget = { readonly serial: string } | { readonly fingerprint: string };

/** What a revocation check knows about a certificate (normalized hex, see {@link certificateKeys}). */
export interface RevocableCertificate {
  /** Its serial number. */
  readonly serial?: string;
  /** Its SHA-256 fingerprint. */
  readonly fingerprint?: string;
}

/** A certificate revocation as read from the store. */
export interface CertificateRevocation {
  /** Which of the certificate's values it names. */
  readonly by: "serial" | "sha256";
  /** That value, normalized hex. */
  readonly value: string;
  /** Its name in the store: "serial.<hex>" or "sha256.<hex>". */
  readonly name: string;
  /** When it was made. */
  readonly revokedAt: Date;
  /** Who made it. */
  readonly revokedBy: string;
}

const HEX = /^[0-9a-f]+$/;

function hexOf(text: string): string {
  return text.trim().replaceAll(":", "").toLowerCase();
}

/**
 * `serial` as lower-case hex without colons or leading zeros.
 *
 * @throws KdsError `invalid_argument` unless it is 1 to 64 hex digits (colons allowed)
 */
export function normalizeSerial(serial: string): string {
  const hex = hexOf(serial);
  if (!HEX.test(hex) || hex.length > 64) {
    throw new KdsError(
      "invalid_argument",
      `"${serial}" is not a certificate serial number: give it in hex, as "openssl x509 -noout -serial" prints it (colons and case do not matter)`,
    );
  }
  return hex.replace(/^0+(?=.)/, "");
}

/**
 * `fingerprint` as 64 lower-case hex digits.
 *
 * @throws KdsError `invalid_argument` unless it is a SHA-256 fingerprint in hex (colons allowed)
 */
export function normalizeFingerprint(fingerprint: string): string {
  const hex = hexOf(fingerprint);
  if (!HEX.test(hex) || hex.length !== 64) {
    throw new KdsError(
      "invalid_argument",
      `"${fingerprint}" is not a SHA-256 fingerprint: give its 64 hex digits, as "openssl x509 -noout -fingerprint -sha256" prints them (colons and case do not matter)`,
    );
  }
  return hex;
}

/**
 * A peer certificate's serial and fingerprint, normalized; a value the TLS
 * stack gave in a form that is not hex is left out (it can then match no
 * revocation by that value).
 */
export function certificateKeys(certificate: {
  readonly serialNumber?: string;
  readonly fingerprint256?: string;
}): RevocableCertificate {
  const lenient = (
    value: string | undefined,
    normalize: (v: string) => string,
  ): string | undefined => {
    if (value === undefined) return undefined;
    try {
      return normalize(value);
    } catch (error) {
      if (KdsError.is(error, "invalid_argument")) return undefined; // not hex: nothing a revocation (always hex) could name
      throw error;
    }
  };
  return {
    serial: lenient(certificate.serialNumber, normalizeSerial),
    fingerprint: lenient(certificate.fingerprint256, normalizeFingerprint),
  };
}

/** The store name of a revocation by an already normalized value: "serial.<hex>" or "sha256.<hex>". */
function revocationNameOf(by: CertificateRevocation["by"], value: string): string {
  return `${by}.${value}`;
}

/** Reads a stored certificate revocation's spec. */
export function certificateRevocationOf(spec: CertificateRevocationSpec): CertificateRevocation {
  const revokedAt = spec.revokedAt === undefined ? new Date(0) : timestampDate(spec.revokedAt);
  const [by, value] =
    spec.serial !== ""
      ? (["serial", spec.serial] as const)
      : (["sha256", spec.fingerprintSha256] as const);
  return { by, value, name: revocationNameOf(by, value), revokedAt, revokedBy: spec.revokedBy };
}

/** Whether `revocation` covers `certificate`. */
export function revokesCertificate(
  revocation: CertificateRevocation,
  certificate: RevocableCertificate,
): boolean {
  return (
    (revocation.by === "serial" ? certificate.serial : certificate.fingerprint) === revocation.value
  );
}

/** How a revocation names its certificate, for messages ("serial 3f", "SHA-256 fingerprint ab12…"). */
export function describeCertificateRevocation(revocation: CertificateRevocation): string {
  return revocation.by === "serial"
    ? `serial ${revocation.value}`
    : `SHA-256 fingerprint ${revocation.value}`;
}

/** Certificate revocations over a store (contract v2). */
export class CertificateRevocations {
  readonly #store: ResourceStore;
  readonly #now: () => Date;

  /**
   * @param store - the control plane's store; its types must include CertificateRevocation
   * @param now - the clock (tests inject one)
   */
  constructor(store: ResourceStore, now: () => Date = () => new Date()) {
    this.#store = store;
    this.#now = now;
  }

  /**
   * Revokes the certificate `target` names.
   *
   * @throws KdsError `invalid_argument` when the serial or fingerprint is not hex
   */
  async revoke(
    target: CertificateTarget,
    revokedBy: string,
    signal?: AbortSignal,
  ): Promise<CertificateRevocation> {
    const named =
      "serial" in target
        ? { serial: normalizeSerial(target.serial) }
        : { fingerprintSha256: normalizeFingerprint(target.fingerprint) };
    const spec = create(CertificateRevocationSpecSchema, {
      ...named,
      revokedAt: timestampFromDate(this.#now()),
      revokedBy,
    });
    const revocation = certificateRevocationOf(spec);
    await this.#store.put(
      { kind: CERTIFICATE_REVOCATION_KIND, name: revocation.name, spec },
      { signal },
    );
    return revocation;
  }

  /** The revocation covering `certificate`, if any (reads the store: every instance sees every revocation). */
  async find(
    certificate: RevocableCertificate,
    signal?: AbortSignal,
  ): Promise<CertificateRevocation | undefined> {
    const names = [
      ...(certificate.fingerprint === undefined
        ? []
        : [revocationNameOf("sha256", certificate.fingerprint)]),
      ...(certificate.serial === undefined ? [] : [revocationNameOf("serial", certificate.serial)]),
    ];
    for (const name of names) {
      const found = await this.#store.get(CERTIFICATE_REVOCATION_KIND, "", name, { signal });
      if (found !== undefined)
        return certificateRevocationOf(found.spec as CertificateRevocationSpec);
    }
    return undefined;
  }
}
