/**
 * A global control plane in one object: the mux endpoint ({@link GlobalServer})
 * admitting zones registered as Zone resources, and resource sync
 * ({@link GlobalSync}) over every admitted session.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import type { AdminBackend } from "../admin/admin-service.ts";
import { ZoneSpecSchema } from "../gen/kds/v1/resource_pb.ts";
import { consoleLogger, type Logger } from "../log.ts";
import type { SessionOptions } from "../mux/options.ts";
import type { SessionEnd } from "../mux/state.ts";
import type { Session } from "../mux/views.ts";
import { ZONE_KIND, createTypeRegistry } from "../sync/builtin-types.ts";
import type { DiscoveryOptions } from "../discovery/types.ts";
import { GlobalSync } from "../sync/global-sync.ts";
import { InMemoryStore } from "../sync/memory-store.ts";
import type { StoredResource, TypeRegistry } from "../sync/resource-types.ts";
import type { ResourceStore } from "../sync/store.ts";
import { GlobalServer } from "./global-server.ts";
import { StoreZoneRegistry } from "./store-zone-registry.ts";

/** Options of {@link GlobalControlPlane}. */
export interface GlobalControlPlaneOptions {
  /** Registered types. Default: Zone plus the example kinds. */
  readonly types?: TypeRegistry;
  /** The store. Default: an {@link InMemoryStore}. */
  readonly store?: ResourceStore;
  /** This global's name. Default "global". */
  readonly id?: string;
  /** The admin API address shown to refused zones (a function when known only once listening). */
  readonly adminUrl?: string | (() => string);
  /** Which global resources a zone receives. Default: all. */
  readonly filter?: (zone: string, resource: StoredResource) => boolean;
  /** How the global subscribes to zone resources. Default "delta". */
  readonly mode?: "delta" | "sotw";
  /** Session tunables. */
  readonly session?: SessionOptions;
  /** Discovery tunables. */
  readonly discovery?: DiscoveryOptions;
  /** Called when a zone's session is ready. */
  readonly onSession?: (session: Session) => void;
  /** Called when a zone's session ends. */
  readonly onSessionEnded?: (session: Session, end: SessionEnd) => void;
  /** Where to log. */
  readonly logger?: Logger;
}

/** A global control plane: admission, mux and sync. */
export class GlobalControlPlane {
  /** Registered types. */
  readonly types: TypeRegistry;
  /** The global's store. */
  readonly store: ResourceStore;
  /** The mux endpoint; mount it with `registerGlobal` or `serveGlobal`. */
  readonly server: GlobalServer;
  /** Resource sync and zone status. */
  readonly sync: GlobalSync;

  /** @param options - types, store, names, callbacks */
  constructor(options: GlobalControlPlaneOptions = {}) {
    const logger = options.logger ?? consoleLogger();
    this.types = options.types ?? createTypeRegistry();
    this.store = options.store ?? new InMemoryStore(this.types);
    this.sync = new GlobalSync({
      store: this.store,
      types: this.types,
      filter: options.filter,
      mode: options.mode,
      discovery: options.discovery,
      logger,
      onZoneRevoked: async (zone, reason) => {
        await this.server.revoke(zone, `zone "${zone}" was ${reason} on global "${this.server.id}"`);
      },
    });
    this.server = new GlobalServer({
      registry: new StoreZoneRegistry(this.store),
      id: options.id,
      adminUrl: options.adminUrl,
      session: options.session,
      logger,
      onSession: (session) => {
        options.onSession?.(session);
        void this.sync.attach(session);
      },
      onSessionEnded: options.onSessionEnded,
    });
  }

  /** Starts following the store until `signal` aborts. */
  start(signal: AbortSignal): void {
    this.sync.start(signal);
  }

  /** Registers (or re-enables) zone `name`: writes its Zone resource. */
  registerZone(name: string, options: { enabled?: boolean } = {}): Promise<StoredResource> {
    return this.store.put({ kind: ZONE_KIND, name, spec: create(ZoneSpecSchema, { enabled: options.enabled ?? true }) });
  }

  /** The admin API backend of this global (see `registerAdmin`). */
  admin(): AdminBackend {
    return { role: "global", types: this.types, store: this.store, zoneStatuses: () => this.sync.zoneStatuses() };
  }

  /** Ends every session; resolves when their transports are released. */
  close(signal?: AbortSignal): Promise<void> {
    return this.server.close(signal);
  }
}
