/**
 * What the server knows about the connection a call came in on, beyond its
 * headers: the client certificate of a mutual-TLS connection. A server
 * adapter fills it in (`kds-mux/node` does, from the TLS socket) and hands
 * it to handlers as a Connect context value; a client cannot forge it.
 *
 * @module
 */
import { createContextKey, type ContextKey } from "@connectrpc/connect";

/**
 * The client certificate a TLS connection presented, as the server adapter
 * read it. The names are given in full (every CN, every SAN) so that
 * `certificateZone` can refuse a certificate that names more than one zone.
 */
export interface PeerCertificate {
  /** True when it chains to a CA the server trusts for client certificates. */
  readonly authorized: boolean;
  /** Why it did not verify (when `authorized` is false). */
  readonly authorizationError?: string;
  /** Every common name (CN) of the subject, in the certificate's order. */
  readonly commonNames?: readonly string[];
  /** Every URI subject alternative name, in the certificate's order. */
  readonly uris?: readonly string[];
  /** Every DNS subject alternative name, in the certificate's order. */
  readonly dnsNames?: readonly string[];
  /** The serial number in hex, as the TLS stack gives it (for revocation). */
  readonly serialNumber?: string;
  /** The SHA-256 fingerprint in hex, colons allowed (for revocation and logs). */
  readonly fingerprint256?: string;
  /** The end of its validity (notAfter): a session it admitted ends then. */
  readonly notAfter?: Date;
}

/** The connection a call came in on. */
export interface PeerInfo {
  /** The client certificate, when the connection is TLS and the client presented one. */
  readonly certificate?: PeerCertificate;
}

/** The Connect context value carrying {@link PeerInfo}; a server adapter sets it. */
export const peerInfoKey: ContextKey<PeerInfo> = /* @__PURE__ */ createContextKey<PeerInfo>(
  {},
  { description: "kds-mux peer info" },
);
