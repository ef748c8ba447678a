/**
 * The CLI's client of the admin API, with errors a person can act on. A
 * target carries the address and, when needed, the admin token (`--token`
 * or `KDS_MUX_TOKEN`) and the CA that signed the server's certificate
 * (`--ca-cert`, for https://).
 *
 * @module
 */
import { Code, ConnectError, createClient, type Client, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { KdsError } from "../errors.ts";
import { AdminService } from "../gen/kds/admin/v1/admin_pb.ts";
import { TokenService } from "../gen/kds/admin/v1/tokens_pb.ts";
import { fromConnectError } from "../connect-errors.ts";
import { connectionFailure, type ConnectionFailure } from "./connection-failure.ts";
import { sleep } from "../util/abort.ts";

/** Where and how the CLI calls an admin API. */
export interface AdminTarget {
  /** Base URL, for example http://127.0.0.1:5681. */
  readonly url: string;
  /** An admin token, sent as `authorization: Bearer`. */
  readonly token?: string;
  /** PEM of the CA that signed the server's certificate (https only). */
  readonly caCert?: string;
}

function targetOf(server: AdminTarget | string): AdminTarget {
  return typeof server === "string" ? { url: server } : server;
}

/** The Connect transport to `server`'s admin API. */
export function adminTransport(server: AdminTarget | string): Transport {
  const target = targetOf(server);
  let url: URL;
  try {
    url = new URL(target.url);
  } catch {
    throw new KdsError(
      "invalid_argument",
      `--server "${target.url}" is not a URL; use for example http://127.0.0.1:5681`,
    );
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new KdsError(
      "invalid_argument",
      `--server "${target.url}" must start with http:// or https://`,
    );
  }
  const token = target.token?.trim();
  return createConnectTransport({
    baseUrl: target.url,
    httpVersion: "2",
    nodeOptions: target.caCert === undefined ? undefined : { ca: target.caCert },
    interceptors:
      token === undefined || token === ""
        ? []
        : [
            (next) => (request) => {
              request.header.set("authorization", `Bearer ${token}`);
              return next(request);
            },
          ],
  });
}

/** A typed AdminService client for `server` (a base URL such as http://127.0.0.1:5681, or a target). */
export function adminClient(server: AdminTarget | string): Client<typeof AdminService> {
  return createClient(AdminService, adminTransport(server));
}

/** A typed TokenService client for `server`. */
export function tokenClient(server: AdminTarget | string): Client<typeof TokenService> {
  return createClient(TokenService, adminTransport(server));
}

/** Turns an admin call failure into a KdsError whose message says what to do. */
export function adminError(error: unknown, server: AdminTarget | string): KdsError {
  const url = targetOf(server).url;
  const answered = error instanceof ConnectError && error.metadata.get("kds-error-code") !== null;
  const failure = answered ? undefined : connectionFailure(error);
  if (failure !== undefined)
    return new KdsError("transport", failureMessage(failure, url), { cause: error });
  if (
    error instanceof ConnectError &&
    (error.code === Code.Unavailable ||
      error.code === Code.Unknown ||
      error.code === Code.Internal) &&
    !answered
  ) {
    return new KdsError(
      "transport",
      `cannot reach the admin API at ${url} (${error.rawMessage}); check that a kds-mux global or zone runs there and that --server is right (an https:// server needs --ca-cert unless a public CA signed it)`,
      {
        cause: error,
      },
    );
  }
  const kds = fromConnectError(error, url);
  return kds.code === "transport"
    ? kds
    : new KdsError(kds.code, kds.message.replace(/^\[[a-z_]+\] /, ""), { cause: error });
}

/** What the CLI says about a call to `url` that `failure` left unanswered. */
function failureMessage(failure: ConnectionFailure, url: string): string {
  switch (failure.kind) {
    case "not_connected":
      return `could not connect to the admin API at ${url} (${failure.reason}); check that a kds-mux global or zone runs there and that --server is right`;
    case "untrusted":
      return `connected to ${url}, but could not verify its TLS certificate (${failure.reason}); pass --ca-cert with the CA that signed it (the server's --tls-cert, when it signed itself)`;
    case "broken": {
      const check =
        failure.notSpoken === "http2"
          ? "it does not speak HTTP/2 there, as a kds-mux admin API does (h2c without TLS, h2 over TLS): check for a proxy or load balancer in between that speaks only HTTP/1.1, and that --server names an admin listener (kds-mux global or zone --admin-listen)"
          : failure.notSpoken === "tls"
            ? "it does not speak TLS there: use an http:// --server"
            : `check what serves that address: its runtime (the admin API speaks HTTP/2 on Node, Deno and Bun) and kds-mux version, and any proxy or load balancer in between (one that speaks only HTTP/1.1 breaks HTTP/2 sessions)${failure.silent === true && url.startsWith("http:") ? "; a TLS listener closes a plaintext connection this way: try https://" : ""}`;
      return `connected to ${url}, but the server ${failure.how}; ${check}`;
    }
  }
}

/** Runs an admin call, converting its failure. */
export async function call<T>(server: AdminTarget | string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw adminError(error, server);
  }
}

/** Pauses before a read's second and third attempts (see {@link read}). */
export const READ_RETRY_DELAYS_MS: readonly number[] = [100, 400];

/**
 * True for a call the server's side ended before answering without saying
 * why: a stream reset (`Canceled`) or a lost connection (`Unavailable`),
 * with no kds error code. An admin listener at its connection cap closes the
 * oldest connection that has not yet sent its credentials to make room for
 * each new one, so under a flood of connections a client's own connection
 * can go before its request is read.
 */
function endedUnanswered(error: unknown): boolean {
  return (
    error instanceof ConnectError &&
    (error.code === Code.Canceled || error.code === Code.Unavailable) &&
    error.metadata.get("kds-error-code") === null
  );
}

/**
 * Runs a read-only admin call, converting its failure as {@link call} does;
 * a call the server ended unanswered (see `endedUnanswered`) is made again,
 * at most twice ({@link READ_RETRY_DELAYS_MS}): reading twice changes
 * nothing. Writes go through {@link call}, never again on their own.
 */
export async function read<T>(server: AdminTarget | string, work: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await work();
    } catch (error) {
      const delay = READ_RETRY_DELAYS_MS[attempt];
      if (delay === undefined || !endedUnanswered(error)) throw adminError(error, server);
    }
    await sleep(READ_RETRY_DELAYS_MS[attempt] as number);
  }
}
