/**
 * Who may call an admin API, and what they may do. An admin listener bound
 * to a loopback address trusts its (local) clients, as kumactl is trusted on
 * the control plane's host; bound to any other address, every call needs an
 * admin token, whose role (`read-only` or `admin`) decides whether it may
 * write. The {@link adminInterceptor} enforces it on Connect routes and
 * hands the caller ({@link AdminPrincipal}) to handlers, which log every
 * write with it.
 *
 * @module
 */
import { createContextKey, type ContextKey, type Interceptor } from "@connectrpc/connect";
import { KdsError } from "../errors.ts";
import { toConnectError } from "../connect-errors.ts";
import type { TokenAuthority } from "./token-authority.ts";
import { bearerToken, type AdminRole } from "./tokens.ts";

/** Who makes an admin call. */
export interface AdminPrincipal {
  /** A name for logs: the token's holder, or "local". */
  readonly name: string;
  /** What it may do. */
  readonly role: AdminRole;
  /** What proved it: a loopback listener's trust, or an admin token. */
  readonly via: "loopback" | "token";
  /** The admin token's id (via "token"). */
  readonly tokenId?: string;
}

/** How an admin call is authorized. */
export interface AdminAuthorizer {
  /** The caller of a call with `headers`; throws `unauthenticated` when it presents no valid credential. */
  authorize(headers: Headers, signal?: AbortSignal): Promise<AdminPrincipal>;
}

/** The caller of the current admin call, set by {@link adminInterceptor}. */
export const adminPrincipalKey: ContextKey<AdminPrincipal | undefined> =
  /* @__PURE__ */ createContextKey<AdminPrincipal | undefined>(undefined, {
    description: "kds-mux admin principal",
  });

/** "who" in the log line of an admin write. */
export function describePrincipal(principal: AdminPrincipal | undefined): string {
  if (principal === undefined) return "an unidentified caller (no admin authorization configured)";
  if (principal.via === "loopback") return "a local client (loopback admin listener)";
  return `"${principal.name}" (${principal.role} token ${principal.tokenId ?? "?"})`;
}

/** True for loopback addresses (127.0.0.0/8, ::1, localhost): where the listener trusts its clients. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  return (
    h === "localhost" ||
    h === "::1" ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h) ||
    h === "::ffff:127.0.0.1"
  );
}

/** Options of {@link TokenAdminAuthorizer}. */
export interface TokenAdminAuthorizerOptions {
  /** Trust callers without a token (the listener is bound to loopback). */
  readonly trustLocal: boolean;
  /** Where the listener is, for messages. */
  readonly listen?: string;
}

/** Authorizes admin calls by admin token, trusting tokenless callers only on a loopback listener. */
export class TokenAdminAuthorizer implements AdminAuthorizer {
  readonly #authority: TokenAuthority;
  readonly #options: TokenAdminAuthorizerOptions;

  /**
   * @param authority - verifies admin tokens
   * @param options - whether tokenless local callers are trusted
   */
  constructor(authority: TokenAuthority, options: TokenAdminAuthorizerOptions) {
    this.#authority = authority;
    this.#options = options;
  }

  async authorize(headers: Headers, signal?: AbortSignal): Promise<AdminPrincipal> {
    const token = bearerToken(headers);
    if (token === undefined) {
      if (this.#options.trustLocal) return { name: "local", role: "admin", via: "loopback" };
      throw new KdsError(
        "unauthenticated",
        `this admin API${this.#options.listen === undefined ? "" : ` (${this.#options.listen})`} is not bound to a loopback address, so every call needs an admin token: ` +
          "send one as `authorization: Bearer TOKEN` (create one with: kds-mux generate admin-token --name NAME --role read-only|admin --server URL --token ADMIN_TOKEN)",
      );
    }
    const claims = await this.#authority.verifyAdminToken(token, signal);
    return { name: claims.name, role: claims.role, via: "token", tokenId: claims.tokenId };
  }
}

/**
 * A Connect interceptor for an admin listener: authorizes every call,
 * refuses writes (every method not in `readMethods`, as
 * "package.Service/Method") to callers without the admin role, and puts
 * the caller in the context ({@link adminPrincipalKey}).
 */
export function adminInterceptor(
  authorizer: AdminAuthorizer,
  readMethods: ReadonlySet<string>,
): Interceptor {
  return (next) => async (request) => {
    let principal: AdminPrincipal;
    try {
      principal = await authorizer.authorize(request.header, request.signal);
      const method = `${request.service.typeName}/${request.method.name}`;
      if (principal.role !== "admin" && !readMethods.has(method)) {
        throw new KdsError(
          "permission_denied",
          `${describePrincipal(principal)} may only read; ${request.method.name} writes and needs an admin token with role "admin"`,
        );
      }
    } catch (error) {
      throw toConnectError(error);
    }
    request.contextValues.set(adminPrincipalKey, principal);
    return next(request);
  };
}
