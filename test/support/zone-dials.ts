// Dialing a global as a zone from the test process, and reading what a
// refused dial says: its KdsError and the Connect code it carried on the wire.
import { type Code, ConnectError } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { KdsError } from "../../src/errors.ts";
import { silentLogger } from "../../src/log.ts";
import { connectMuxTransport } from "../../src/transport/connect.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import type { Pem } from "./certs.ts";

/** The Connect code a refused dial carried on the wire. */
export function wireCode(error: unknown): Code | undefined {
  return error instanceof KdsError && error.cause instanceof ConnectError
    ? error.cause.code
    : undefined;
}

/** The KdsError `dial` was refused with; fails the test when it was admitted. */
export async function refusal(dial: Promise<unknown>): Promise<KdsError> {
  try {
    await dial;
  } catch (error) {
    if (error instanceof KdsError) return error;
    throw error;
  }
  throw new Error("the dial was admitted");
}

/** A zone named `name` dialing `url` (gRPC over TLS trusting `caPem`), with a token or a client certificate (mutual TLS). */
export function zoneDialer(
  url: string,
  caPem: string,
  name: string,
  credential: { token?: string; certificate?: Pem } = {},
): ZoneClient {
  const tls = {
    ca: caPem,
    ...(credential.certificate === undefined
      ? {}
      : { cert: credential.certificate.cert, key: credential.certificate.key }),
  };
  return new ZoneClient({
    name,
    token: credential.token,
    transport: connectMuxTransport(createGrpcTransport({ baseUrl: url, nodeOptions: tls }), {
      target: url,
    }),
    logger: silentLogger,
  });
}
