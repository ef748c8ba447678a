/**
 * The admin API and token service: their handlers, routes, interceptors, and the admin backend of each role.
 *
 * @module
 */
export {
  adminServiceImpl,
  adminType,
  registerAdmin,
  toAdminResource,
  fromAdminResource,
  assertWritable,
  logWrite,
  type AdminBackend,
} from "./admin-service.ts";
export {
  globalAdminBackend,
  zoneAdminBackend,
} from "./role-backends.ts";
export {
  registerTokenService,
  tokenServiceImpl,
  type TokenBackend,
} from "./token-service.ts";
export {
  ADMIN_READ_METHODS,
  adminListenerInterceptor,
  registerAdminRoutes,
} from "./admin-routes.ts";
