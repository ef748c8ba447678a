/**
 * The CLI's client of the admin API, with errors a person can act on.
 *
 * @module
 */
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { KdsError } from "../errors.ts";
import { AdminService } from "../gen/kds/admin/v1/admin_pb.ts";
import { fromConnectError } from "../transport/connect-errors.ts";

/** A typed AdminService client for `server` (a base URL such as http://127.0.0.1:5685). */
export function adminClient(server: string): Client<typeof AdminService> {
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw new KdsError("invalid_argument", `--server "${server}" is not a URL; use for example http://127.0.0.1:5685`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new KdsError("invalid_argument", `--server "${server}" must start with http:// or https://`);
  }
  return createClient(AdminService, createConnectTransport({ baseUrl: server, httpVersion: "2" }));
}

/** Turns an admin call failure into a KdsError whose message says what to do. */
export function adminError(error: unknown, server: string): KdsError {
  if (error instanceof ConnectError && (error.code === Code.Unavailable || error.code === Code.Unknown || error.code === Code.Internal) && error.metadata.get("kds-error-code") === null) {
    return new KdsError("transport", `cannot reach the admin API at ${server} (${error.rawMessage}); check that a kds-mux global or zone runs there and that --server is right`, {
      cause: error,
    });
  }
  const kds = fromConnectError(error, server);
  return kds.code === "transport" ? kds : new KdsError(kds.code, kds.message.replace(/^\[[a-z_]+\] /, ""), { cause: error });
}

/** Runs an admin call, converting its failure. */
export async function call<T>(server: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw adminError(error, server);
  }
}
