/**
 * What a node:tls connection tells about the client: its certificate, read
 * in full (every subject CN, every URI and DNS SAN, the serial and the
 * SHA-256 fingerprint) so that the core's `certificateZone` can refuse an
 * ambiguous certificate rather than pick one of its names.
 *
 * @module
 */
import type { TLSSocket } from "node:tls";
import type { PeerInfo } from "../../auth/peer.ts";

/**
 * The names in node:tls's `subjectaltname` string, by type ("DNS", "URI",
 * ...). Node separates entries with ", " and writes a value that holds a
 * comma, a quote or anything unusual as a JSON string, so a value can never
 * pass for two entries.
 */
export function subjectAltNames(text: string | undefined): Map<string, string[]> {
  const names = new Map<string, string[]>();
  if (text === undefined || text === "") return names;
  let i = 0;
  while (i < text.length) {
    const colon = text.indexOf(":", i);
    if (colon < 0) break; // a trailing fragment with no "TYPE:" holds no name
    const type = text.slice(i, colon);
    let value: string;
    if (text[colon + 1] === '"') {
      // A JSON string: find its closing quote (one not escaped by a backslash).
      let end = colon + 2;
      while (end < text.length && text[end] !== '"') end += text[end] === "\\" ? 2 : 1;
      value = JSON.parse(text.slice(colon + 1, end + 1)) as string;
      i = end + 1;
    } else {
      const comma = text.indexOf(", ", colon + 1);
      value = text.slice(colon + 1, comma < 0 ? text.length : comma);
      i = comma < 0 ? text.length : comma;
    }
    if (text.startsWith(", ", i)) i += 2;
    names.set(type, [...(names.get(type) ?? []), value]);
  }
  return names;
}

/** What the connection of `request` (or of a stream: its session's socket) tells about the client: its certificate, on TLS. */
export function peerInfo(request: { readonly socket?: unknown }): PeerInfo {
  const socket = request.socket as Partial<TLSSocket> | undefined;
  if (socket?.getPeerCertificate === undefined) return {};
  const cert = socket.getPeerCertificate(false);
  if (cert === null || cert === undefined || Object.keys(cert).length === 0) return {};
  const cn: string | string[] | undefined = cert.subject?.CN;
  const sans = subjectAltNames(cert.subjectaltname);
  const authorizationError = socket.authorizationError;
  return {
    certificate: {
      authorized: socket.authorized === true,
      authorizationError:
        authorizationError === undefined || authorizationError === null
          ? undefined
          : String(authorizationError),
      commonNames: cn === undefined ? [] : Array.isArray(cn) ? cn : [cn],
      uris: sans.get("URI") ?? [],
      dnsNames: sans.get("DNS") ?? [],
      serialNumber: cert.serialNumber,
      fingerprint256: cert.fingerprint256,
      notAfter: validTo(cert.valid_to),
    },
  };
}

/** A certificate's `valid_to` ("Mar  1 12:00:00 2027 GMT") as a date; undefined when it does not parse. */
function validTo(text: string | undefined): Date | undefined {
  if (text === undefined || text === "") return undefined;
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? undefined : date;
}
