/**
 * What the server knows about the connection a call came in on, beyond its
 * headers: the client certificate of a mutual-TLS connection. A server
 * adapter fills it in (`kds-mux/node` does, from the TLS socket) and hands
 * it to handlers as a Connect context value; a client cannot forge it.
 *
 * @module
 */
import { createContextKey, type ContextKey } from "@connectrpc/connect";

/** The client certificate a TLS connection presented. */
export interface PeerCertificate {
  /** True when it chains to a CA the server trusts for client certificates. */
  readonly authorized: boolean;
  /** Why it did not verify (when `authorized` is false). */
  readonly authorizationError?: string;
  /** The subject's common name (CN). */
  readonly commonName?: string;
  /** The SHA-256 fingerprint, for logs. */
  readonly fingerprint256?: string;
}

/** The connection a call came in on. */
export interface PeerInfo {
  /** The client certificate, when the connection is TLS and the client presented one. */
  readonly certificate?: PeerCertificate;
}

/** The Connect context value carrying {@link PeerInfo}; a server adapter sets it. */
export const peerInfoKey: ContextKey<PeerInfo> = /* @__PURE__ */ createContextKey<PeerInfo>({}, { description: "kds-mux peer info" });
