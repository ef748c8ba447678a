/**
 * An admin listener's routes in one place: `AdminService` and, when the side
 * has a token authority, `TokenService`, plus the interceptor that decides
 * who may call them ({@link adminListenerInterceptor}) and the same rule for
 * the plain HTTP pages served beside them ({@link authorizedReads}).
 *
 * @module
 */
import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import {
  adminInterceptor,
  isLoopback,
  TokenAdminAuthorizer,
  type AdminAuthorizer,
} from "../auth/admin-authorizer.ts";
import { KdsError } from "../errors.ts";
import { AdminService } from "../gen/kds/admin/v1/admin_pb.ts";
import { registerAdmin, type AdminBackend } from "./admin-service.ts";
import { registerTokenService } from "./token-service.ts";

function readMethods(): ReadonlySet<string> {
  return new Set(
    [AdminService.method.listTypes, AdminService.method.get, AdminService.method.inspectZones].map(
      (m) => `${AdminService.typeName}/${m.name}`,
    ),
  );
}

/** The admin methods a read-only caller may use, as "package.Service/Method"; every other one writes. */
export const ADMIN_READ_METHODS: ReadonlySet<string> = /* @__PURE__ */ readMethods();

/** Registers the admin API of `backend` (and its token service) on `router`. */
export function registerAdminRoutes(router: ConnectRouter, backend: AdminBackend): ConnectRouter {
  registerAdmin(router, backend);
  if (backend.tokens !== undefined)
    registerTokenService(router, {
      role: backend.role,
      tokens: backend.tokens,
      logger: backend.logger,
    });
  return router;
}

/**
 * The interceptor of an admin listener bound to `host`: loopback listeners
 * trust tokenless local callers; any other address needs an admin token on
 * every call, and a read-only one may not write.
 */
export function adminListenerInterceptor(backend: AdminBackend, host: string): Interceptor {
  return adminInterceptor(adminListenerAuthorizer(backend, host), ADMIN_READ_METHODS);
}

/**
 * Who may use an admin listener bound to `host`: loopback listeners trust
 * tokenless local callers; any other address needs an admin token (for a
 * server adapter's check of request headers before the body is read).
 */
export function adminListenerAuthorizer(backend: AdminBackend, host: string): AdminAuthorizer {
  if (backend.tokens === undefined)
    throw new KdsError(
      "invalid_argument",
      "an admin listener needs the side's token authority (AdminBackend.tokens)",
    );
  return new TokenAdminAuthorizer(backend.tokens, { trustLocal: isLoopback(host), listen: host });
}

/**
 * Wraps a fetch-style handler of read-only pages (the status page, metrics)
 * so that it follows the admin listener's rules: on a listener bound beyond
 * loopback, a request without a valid admin token (any role) gets 401, with
 * the reason; one the handler does not own still falls through (undefined).
 */
export function authorizedReads(
  handler: (request: Request) => Promise<Response | undefined>,
  backend: AdminBackend,
  host: string,
): (request: Request) => Promise<Response | undefined> {
  const authorizer = adminListenerAuthorizer(backend, host);
  return async (request) => {
    try {
      await authorizer.authorize(request.headers, request.signal);
    } catch (error) {
      if (!KdsError.is(error, "unauthenticated")) throw error;
      return new Response(`${error.message}\n`, {
        status: 401,
        headers: { "content-type": "text/plain", "www-authenticate": "Bearer" },
      });
    }
    return handler(request);
  };
}
