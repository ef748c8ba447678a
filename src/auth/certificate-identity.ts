/**
 * Which zone a client certificate proves: one rule, read from one place, so
 * that kds-mux and any other tool that checks the same certificate (a CA
 * front-end, a proxy written in Go) agree on the name.
 *
 * 1. If the certificate has URI or DNS subject alternative names (SANs),
 *    they name the zone and its subject CN is ignored (as RFC 6125 and Go's
 *    TLS stack do). Every one of them must name a zone, and all the same
 *    one: a URI SAN `spiffe://<trust-domain>/zone/<name>`, or a DNS SAN that
 *    is the zone name itself (one DNS label). Other SAN types (IP, email)
 *    are not read.
 * 2. Otherwise its subject must hold exactly one CN, the zone name.
 *
 * Anything else (a SAN that names no zone, SANs naming different zones, no
 * CN or several CNs such as `CN=zone-b, CN=zone-a`) is ambiguous and proves
 * nothing.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import { ZONE_NAME_PATTERN } from "../names.ts";
import type { PeerCertificate } from "./peer.ts";

/** The rule {@link certificateZone} applies, as refusals state it. */
export const CERTIFICATE_IDENTITY_RULE =
  'kds-mux reads a zone\'s name from the certificate\'s URI and DNS SANs (each "spiffe://<trust-domain>/zone/<name>" or the bare name "<name>", all naming the same zone) or, when it has none, from its one and only subject CN';

const SPIFFE_ZONE = /^spiffe:\/\/[^/?#]+\/zone\/([^/?#]+)$/;

/** The zone one SAN names, or undefined when it names none. */
function sanZone(kind: "URI" | "DNS", value: string): string | undefined {
  const name = kind === "URI" ? SPIFFE_ZONE.exec(value)?.[1] : value.toLowerCase();
  return name !== undefined && ZONE_NAME_PATTERN.test(name) ? name : undefined;
}

function ambiguous(zone: string, problem: string): KdsError {
  return new KdsError(
    "unauthenticated",
    `the client certificate presented for zone "${zone}" proves no zone: ${problem}. ${CERTIFICATE_IDENTITY_RULE}. Issue the zone a certificate that names it in exactly one of these ways, or have it dial with a zone token and no client certificate`,
  );
}

/**
 * The zone `certificate` proves, by the rule of this module. `zone` is the
 * name the stream claims (`client-id`), used only in messages.
 *
 * @throws KdsError `unauthenticated` when the certificate is ambiguous,
 *   saying what is wrong with it and what to issue instead
 */
export function certificateZone(certificate: PeerCertificate, zone: string): string {
  const sans = [
    ...(certificate.uris ?? []).map((value) => ({ kind: "URI" as const, value })),
    ...(certificate.dnsNames ?? []).map((value) => ({ kind: "DNS" as const, value })),
  ];
  if (sans.length > 0) {
    const named = sans.map((san) => ({ ...san, zone: sanZone(san.kind, san.value) }));
    const stray = named.filter((san) => san.zone === undefined);
    if (stray.length > 0) {
      throw ambiguous(
        zone,
        `its SAN${stray.length > 1 ? "s" : ""} ${stray.map((san) => `${san.kind}:${san.value}`).join(", ")} name${stray.length > 1 ? "" : "s"} no zone`,
      );
    }
    const zones = [...new Set(named.map((san) => san.zone as string))];
    if (zones.length > 1)
      throw ambiguous(
        zone,
        `its SANs name ${zones.length} zones (${named.map((san) => `${san.kind}:${san.value}`).join(", ")})`,
      );
    return zones[0] as string;
  }
  const cns = certificate.commonNames ?? [];
  if (cns.length === 0) throw ambiguous(zone, "it has no URI or DNS SAN and no subject CN");
  if (cns.length > 1)
    throw ambiguous(
      zone,
      `its subject holds ${cns.length} common names (${cns.map((cn) => `CN=${cn}`).join(", ")}), and tools disagree on which one counts`,
    );
  const cn = cns[0] as string;
  if (!ZONE_NAME_PATTERN.test(cn))
    throw ambiguous(
      zone,
      `its only CN, "${cn}", is not a zone name (1 to 63 lower-case letters, digits and '-')`,
    );
  return cn;
}
