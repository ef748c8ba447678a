/**
 * The admin API (`kds.admin.v1.AdminService`) over a side's store: list
 * types, apply (a call's resources in one atomic store write: all or none),
 * get and delete resources, inspect zone status. The global
 * manages global-to-zone kinds and Zone; a zone manages its zone-to-global
 * kinds; both can read everything they hold except the internal identity
 * kinds (signing keys, revocations), which it neither shows nor writes.
 * Every write is logged with who made it (the caller the admin listener's
 * interceptor authorized, see src/auth/admin-authorizer.ts).
 *
 * @module
 */
import {
  create,
  fromJsonString,
  toJsonString,
  type Message,
  type MessageInitShape,
} from "@bufbuild/protobuf";
import { timestampFromDate, timestampFromMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  createClient,
  type Client,
  type ConnectRouter,
  type HandlerContext,
  type ServiceImpl,
  type Transport,
} from "@connectrpc/connect";
import { adminPrincipalKey, describePrincipal } from "../auth/admin-authorizer.ts";
import type { TokenAuthority } from "../auth/token-authority.ts";
import type { Logger } from "../log.ts";
import { assertZoneName } from "../names.ts";
import { KdsError } from "../errors.ts";
import {
  AdminResourceSchema,
  AdminService,
  TypeInfoSchema,
  type SyncCountersSchema,
  ZoneInsightSchema,
  DirectionTimesSchema,
  type ZoneInsight,
  type AdminResource,
} from "../gen/kds/admin/v1/admin_pb.ts";
import { ZONE_KIND } from "../kinds/builtin-types.ts";
import { validateInput } from "../store/validate.ts";
import { wasRolledBack } from "../store/rolled-back.ts";
import { ZONES_LABEL, parseZoneSelector } from "../kinds/zone-selector.ts";
import {
  LABELS,
  resourceKey,
  type ResourceType,
  type StoredResource,
  type TypeRegistry,
} from "../kinds/resource-types.ts";
import { sideOf, type SyncCounters, type ZoneStatus } from "../observe/zone-status.ts";
import { directionTimes, zoneVerdict } from "../observe/zone-health.ts";
import type { ResourceInput, ResourceStore } from "../store/contract.ts";
import { toConnectError } from "../connect-errors.ts";

/** What the admin API serves from. */
export interface AdminBackend {
  /** Which side this is; decides which kinds may be written here. */
  readonly role: "global" | "zone";
  /** Registered types. */
  readonly types: TypeRegistry;
  /** The side's store. */
  readonly store: ResourceStore;
  /** Zone status: every zone on the global, the zone itself on a zone. */
  zoneStatuses(): Promise<ZoneStatus[]>;
  /** On a global: a transport to zone `zone`'s own services (reverse calls), for requests that name a zone. */
  zoneTransport?(zone: string): Transport;
  /** Applies the deletions the reset guard holds for `zone` (on a zone: its own name); resolves with how many were deleted. */
  acceptReset?(zone: string, signal: AbortSignal): Promise<number>;
  /** The side's token authority (serves `TokenService`). */
  readonly tokens?: TokenAuthority;
  /** Where admin writes are logged, with who made them. */
  readonly logger?: Logger;
}

/** The type of `kind` as the admin API sees it: internal kinds are unknown here. */
export function adminType(types: TypeRegistry, kind: string): ResourceType {
  const type = types.find(kind);
  if (type === undefined || type.internal) {
    throw new KdsError(
      "unknown_type",
      `unknown resource type "${kind}"; known types: ${types
        .visible()
        .map((t) => t.kind)
        .join(", ")}`,
    );
  }
  return type;
}

/** Logs an admin write with the caller the admin listener authorized. */
export function logWrite(
  backend: { readonly logger?: Logger },
  context: HandlerContext,
  what: string,
): void {
  const principal = context.values.get(adminPrincipalKey);
  backend.logger?.info(`admin write by ${describePrincipal(principal)}: ${what}`, {
    who: principal?.name ?? "unknown",
    via: principal?.via ?? "none",
  });
}

/** Longest a request forwarded to a zone may take. */
const ZONE_CALL_TIMEOUT_MS = 30_000;

/** The AdminService of zone `zone`, reached through the global; throws when this side cannot forward. */
function zoneClient(backend: AdminBackend, zone: string): Client<typeof AdminService> {
  if (backend.zoneTransport === undefined) {
    throw new KdsError(
      "invalid_argument",
      `this is a zone's admin API; \`zone\` "${zone}" asks a global to forward to a zone, so send the request to the global's admin API`,
    );
  }
  return createClient(AdminService, backend.zoneTransport(zone));
}

/** Converts a stored resource to its admin form. */
export function toAdminResource(types: TypeRegistry, r: StoredResource): AdminResource {
  return create(AdminResourceSchema, {
    type: r.kind,
    name: r.meta.name,
    mesh: r.meta.mesh,
    labels: { ...r.meta.labels },
    specJson: toJsonString(types.get(r.kind).schema, r.spec),
    version: r.meta.version,
    creationTime: timestampFromDate(r.meta.creationTime),
    modificationTime: timestampFromDate(r.meta.modificationTime),
  });
}

/** Checks that `role` may write `type`; throws `invalid_argument` saying where to write it instead. */
export function assertWritable(role: "global" | "zone", type: ResourceType): void {
  if (role === "zone" && (type.direction === "global-to-zone" || type.kind === ZONE_KIND)) {
    throw new KdsError(
      "invalid_argument",
      `${type.kind} resources are managed on the global and synced to zones; apply them through the global's admin API`,
    );
  }
  if (
    role === "global" &&
    (type.direction === "zone-to-global" || type.direction === "zone-to-zones")
  ) {
    throw new KdsError(
      "invalid_argument",
      `${type.kind} resources are created in zones and synced to the global; apply them through a zone's admin API`,
    );
  }
}

/**
 * In a zone, refuses to write or delete `found` when it is a copy of another
 * zone's zone-to-zones resource (`kds.io/origin: global`): copies are
 * read-only, changed only in their origin zone.
 */
export function assertNotCopy(role: "global" | "zone", found: StoredResource | undefined): void {
  if (role !== "zone" || found?.meta.labels[LABELS.origin] !== "global") return;
  const origin = found.meta.labels[LABELS.zone] ?? "another zone";
  throw new KdsError(
    "invalid_argument",
    `${found.kind} "${resourceKey(found.meta.mesh, found.meta.name)}" is a read-only copy of a resource of zone "${origin}"; change or delete it there (through that zone's admin API), or pick another name`,
  );
}

/** In a zone, refuses a batch that would overwrite a read-only copy of another zone's zone-to-zones resource (see {@link assertNotCopy}). */
async function refuseCopies(
  backend: AdminBackend,
  inputs: readonly ResourceInput[],
  signal: AbortSignal,
): Promise<void> {
  if (backend.role !== "zone") return;
  for (const input of inputs) {
    if (backend.types.get(input.kind).direction !== "zone-to-zones") continue;
    assertNotCopy(
      backend.role,
      await backend.store.get(input.kind, input.mesh ?? "", input.name, { signal }),
    );
  }
}

/** Parses an admin resource into a store input, validated against its type. */
export function fromAdminResource(
  types: TypeRegistry,
  role: "global" | "zone",
  r: AdminResource,
): ResourceInput {
  const type = adminType(types, r.type);
  assertWritable(role, type);
  const what = `${type.kind} "${resourceKey(r.mesh, r.name)}"`;
  if (type.kind === ZONE_KIND) {
    try {
      assertZoneName(r.name);
    } catch (error) {
      throw new KdsError(
        "invalid_resource",
        `${what} could never connect: ${error instanceof Error ? error.message : String(error)} (a zone sends its name in client-id)`,
        { cause: error },
      );
    }
  }
  // The one kds.io/ label users set: the zones a global resource goes to (a zone selector).
  const selector = r.labels[ZONES_LABEL];
  const reserved = Object.keys(r.labels).filter(
    (k) =>
      k.startsWith("kds.io/") &&
      !(k === ZONES_LABEL && role === "global" && type.direction === "global-to-zone"),
  );
  if (reserved.length > 0) {
    const hint =
      selector === undefined
        ? ""
        : ` (${ZONES_LABEL} names the zones of a global-to-zone resource applied on the global)`;
    throw new KdsError(
      "invalid_resource",
      `${what}: labels under kds.io/ are set by kds-mux and cannot be applied (${reserved.join(", ")}); remove them${hint}`,
    );
  }
  if (selector !== undefined) {
    try {
      parseZoneSelector(selector, `${what}: label ${ZONES_LABEL}`);
    } catch (error) {
      throw new KdsError(
        "invalid_resource",
        error instanceof Error ? error.message : String(error),
        { cause: error },
      );
    }
  }
  let spec: Message;
  try {
    spec = fromJsonString(type.schema, r.specJson === "" ? "{}" : r.specJson);
  } catch (error) {
    throw new KdsError(
      "invalid_resource",
      `${what}: the spec is not a valid ${type.schema.typeName}: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
  const input: ResourceInput = {
    kind: type.kind,
    mesh: r.mesh,
    name: r.name,
    labels: { ...r.labels },
    spec,
  };
  validateInput(types, input);
  return input;
}

/**
 * Writes every input with ONE atomic `store.apply`: all of them or none.
 * Resolves with every stored resource; a failure says which of the two
 * happened: nothing was written when the store refused the batch (a
 * conflict, an invalid resource) or when the store knows its database
 * rolled the transaction back, and, when the store failed otherwise (a lost
 * connection), either all or none were (the commit's outcome is unknown to
 * this side), never a part.
 */
export async function applyAll(
  store: ResourceStore,
  inputs: readonly ResourceInput[],
  signal: AbortSignal | undefined,
): Promise<{ revision: number; results: StoredResource[] }> {
  try {
    const { revision, results } = await store.apply(
      inputs.map((input) => ({ op: "put", input })),
      { signal },
    );
    return { revision, results: results as StoredResource[] };
  } catch (error) {
    // A store that failed (store_unavailable) may have failed at the commit, whose outcome this side cannot know,
    // unless the store knows its database rolled the transaction back.
    throw withOutcome(
      error,
      inputs.length,
      wasRolledBack(error)
        ? "rolled-back"
        : KdsError.is(error, "store_unavailable")
          ? "unknown"
          : "none",
    );
  }
}

/** `error` (a KdsError) with what an apply of `count` resources left in the store appended; any other error as it is. */
function withOutcome(
  error: unknown,
  count: number,
  outcome: "none" | "rolled-back" | "unknown",
): unknown {
  if (!(error instanceof KdsError)) return error;
  const what = count === 1 ? "the resource" : `the ${count} resources`;
  const said =
    outcome === "none"
      ? `none of ${what} was applied (an apply is all or nothing); ${error.code === "not_leader" ? "apply it through the leader" : "fix it and apply again"}`
      : outcome === "rolled-back"
        ? `the store rolled the transaction back, so none of ${what} was applied; apply again once the store's error is fixed`
        : `either all or none of ${what} were applied, never a part (an apply is one transaction); run \`kds-mux get\` to see which, then apply again`;
  return new KdsError(error.code, `${error.message}; ${said}`, { cause: error });
}

/** Session counters in their admin form. */
function countersOf(c: SyncCounters): MessageInitShape<typeof SyncCountersSchema> {
  return {
    sent: BigInt(c.sent),
    acked: BigInt(c.acked),
    nacked: BigInt(c.nacked),
    resourcesSent: BigInt(c.resourcesSent),
    accepted: BigInt(c.accepted),
    rejected: BigInt(c.rejected),
    resourcesReceived: BigInt(c.resourcesReceived),
  };
}

/** A zone status's replica and replacement fields in their admin form. */
function leadershipFields(z: ZoneStatus): {
  leadership: string;
  leaderTerm: bigint;
  leaderAddress: string;
  replacedRecently: number;
  replacedWindowMs: number;
} {
  return {
    leadership: z.leadership?.role ?? "",
    leaderTerm: BigInt(z.leadership?.term ?? 0),
    leaderAddress: z.leadership?.leader?.address ?? "",
    replacedRecently: z.replacements?.count ?? 0,
    replacedWindowMs: z.replacements?.windowMs ?? 0,
  };
}

/** The AdminService implementation over `backend`. */
export function adminServiceImpl(backend: AdminBackend): ServiceImpl<typeof AdminService> {
  const { types, store, role } = backend;
  const guard = async <T>(work: () => Promise<T>): Promise<T> => {
    try {
      return await work();
    } catch (error) {
      throw toConnectError(error);
    }
  };
  return {
    listTypes: () =>
      guard(async () => ({
        types: types.visible().map((t) =>
          create(TypeInfoSchema, {
            kind: t.kind,
            typeUrl: t.typeUrl,
            direction: t.direction,
            scope: t.scope,
          }),
        ),
      })),
    apply: (request, context) =>
      guard(async () => {
        let inputs: ResourceInput[];
        try {
          inputs = request.resources.map((r) => fromAdminResource(types, role, r));
        } catch (error) {
          throw withOutcome(error, request.resources.length, "none");
        }
        if (inputs.length === 0) return { resources: [] };
        try {
          await refuseCopies(backend, inputs, context.signal);
        } catch (error) {
          throw withOutcome(error, request.resources.length, "none");
        }
        const { results } = await applyAll(store, inputs, context.signal);
        const stored: AdminResource[] = [];
        for (const r of results) {
          logWrite(
            backend,
            context,
            `applied ${r.kind} ${resourceKey(r.meta.mesh, r.meta.name)} (version ${r.meta.version})`,
          );
          stored.push(toAdminResource(types, r));
        }
        return { resources: stored };
      }),
    get: (request, context) =>
      guard(async () => {
        if (request.zone !== "") {
          return zoneClient(backend, request.zone).get(
            { ...request, zone: "" },
            { signal: context.signal, timeoutMs: ZONE_CALL_TIMEOUT_MS },
          );
        }
        const type = adminType(types, request.type);
        if (request.name !== "") {
          const found = await store.get(type.kind, request.mesh, request.name, {
            signal: context.signal,
          });
          if (found === undefined) {
            const where = request.mesh === "" ? "" : ` in mesh "${request.mesh}"`;
            const hint =
              type.scope === "mesh" && request.mesh === ""
                ? `; ${type.kind} is mesh-scoped: give \`mesh\``
                : "";
            throw new KdsError(
              "not_found",
              `${type.kind} "${request.name}"${where} not found${hint}`,
            );
          }
          return { resources: [toAdminResource(types, found)] };
        }
        const { resources } = await store.list(type.kind, {
          mesh: request.mesh === "" ? undefined : request.mesh,
          signal: context.signal,
        });
        return { resources: resources.map((r) => toAdminResource(types, r)) };
      }),
    delete: (request, context) =>
      guard(async () => {
        const type = adminType(types, request.type);
        assertWritable(role, type);
        const key = resourceKey(request.mesh, request.name);
        if (role === "zone" && type.direction === "zone-to-zones")
          assertNotCopy(
            role,
            await store.get(type.kind, request.mesh, request.name, { signal: context.signal }),
          );
        const deleted = await store.delete(type.kind, request.mesh, request.name, {
          signal: context.signal,
        });
        if (!deleted) throw new KdsError("not_found", `${type.kind} "${key}" not found`);
        logWrite(backend, context, `deleted ${type.kind} ${key}`);
        return {};
      }),
    inspectZones: (request, context) =>
      guard(async () => {
        if (request.zone !== "")
          return zoneClient(backend, request.zone).inspectZones(
            { zone: "" },
            { signal: context.signal, timeoutMs: ZONE_CALL_TIMEOUT_MS },
          );
        return {
          zones: (await backend.zoneStatuses()).map((z) =>
            create(ZoneInsightSchema, {
              ...healthInsight(z),
              zone: z.zone,
              online: z.online,
              connectedAt:
                z.connectedAt === undefined ? undefined : timestampFromDate(z.connectedAt),
              disconnectedAt:
                z.disconnectedAt === undefined ? undefined : timestampFromDate(z.disconnectedAt),
              lastEndCode: z.lastEnd?.code ?? "",
              lastEndMessage: z.lastEnd?.message ?? "",
              lastErrorCode: z.lastError?.code ?? "",
              lastErrorMessage: z.lastError?.message ?? "",
              lastErrorAt:
                z.lastError === undefined ? undefined : timestampFromDate(z.lastError.at),
              heartbeatRttMs: z.heartbeatRttMs ?? -1,
              instance: z.instance ?? "",
              softwareVersion: z.peer?.softwareVersion ?? "",
              protocolVersion: z.peer?.protocolVersion ?? 0,
              features: [...(z.peer?.features ?? [])],
              staleSince: z.stale === undefined ? undefined : timestampFromDate(z.stale.since),
              staleResources: BigInt(z.stale?.resources ?? 0),
              credentialExpiresAt:
                z.credentialExpiry === undefined
                  ? undefined
                  : timestampFromDate(z.credentialExpiry.at),
              credential: z.credentialExpiry?.credential ?? "",
              heldReset:
                z.heldReset === undefined
                  ? undefined
                  : {
                      since: timestampFromDate(z.heldReset.since),
                      releaseAt:
                        z.heldReset.releaseAt === undefined
                          ? undefined
                          : timestampFromDate(z.heldReset.releaseAt),
                      kinds: z.heldReset.kinds.map((k) => ({
                        kind: k.kind,
                        held: BigInt(k.held),
                        of: BigInt(k.of),
                      })),
                    },
              ...leadershipFields(z),
              moves:
                z.moves === undefined
                  ? undefined
                  : {
                      asked: BigInt(z.moves.asked),
                      unlanded: BigInt(z.moves.unlanded),
                      heldUntil:
                        z.moves.heldUntil === undefined
                          ? undefined
                          : timestampFromDate(z.moves.heldUntil),
                    },
              types: z.types.map((t) => ({
                kind: t.kind,
                direction: t.direction,
                sent: BigInt(t.sent),
                acked: BigInt(t.acked),
                nacked: BigInt(t.nacked),
                lastAckedVersion: t.lastAckedVersion ?? "",
                lastNackError: t.lastNackError ?? "",
                stalled: t.stalled,
                accepted: BigInt(t.accepted),
                rejected: BigInt(t.rejected),
                lastRejectError: t.lastRejectError ?? "",
                oversized: [...t.oversized],
                resourcesSent: BigInt(t.resourcesSent),
                resourcesReceived: BigInt(t.resourcesReceived),
                // As receiver, what this side left out; as sender, what the peer reports it rejects (current).
                rejectedResources: [
                  ...t.rejectedResources,
                  ...t.peerRejectedResources.map((r) => ({
                    key: r.key,
                    reason: `rejected by the peer: ${r.reason}`,
                  })),
                ],
                storeLoaded: t.storeLoaded ?? false,
                storeError: t.storeError ?? "",
                side: sideOf(role, t.direction),
                session: countersOf(t.session),
              })),
            }),
          ),
        };
      }),
    acceptReset: (request, context) =>
      guard(async () => {
        if (backend.acceptReset === undefined)
          throw new KdsError(
            "invalid_argument",
            "this admin API has no reset guard (the side runs without one)",
          );
        assertZoneName(request.zone);
        const deleted = await backend.acceptReset(request.zone, context.signal);
        logWrite(
          backend,
          context,
          `accepted the held reset of ${role === "global" ? `zone "${request.zone}"` : "the global"}: ${deleted} resources deleted`,
        );
        return { deleted: BigInt(deleted) };
      }),
  };
}

/** Registers the AdminService on `router`. */
export function registerAdmin(router: ConnectRouter, backend: AdminBackend): ConnectRouter {
  return router.service(AdminService, adminServiceImpl(backend));
}

/** The verdict and per-direction times of `z` as ZoneInsight fields (see observe/zone-health.ts). */
function healthInsight(
  z: ZoneStatus,
): Pick<ZoneInsight, "state" | "stateReason" | "stateSince" | "directions"> {
  const verdict = zoneVerdict(z);
  const at = (ms: number | undefined): Timestamp | undefined =>
    ms === undefined ? undefined : timestampFromMs(Math.floor(ms)); // stamps may carry a fraction (see TypeSyncTimes)
  return {
    state: verdict.state,
    stateReason: verdict.reason,
    stateSince: at(verdict.since),
    directions: directionTimes(z).map((d) =>
      create(DirectionTimesSchema, {
        direction: d.direction,
        lastSentAt: at(d.lastSentAt),
        lastReceivedAt: at(d.lastReceivedAt),
      }),
    ),
  };
}
