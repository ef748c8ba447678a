/**
 * A zone control plane in one object: the dialer ({@link ZoneClient}) with
 * reconnects, and resource sync ({@link ZoneSync}) over every session.
 *
 * @module
 */
import type { AdminBackend } from "../admin/admin-service.ts";
import { consoleLogger, type Logger } from "../log.ts";
import type { SessionOptions } from "../mux/options.ts";
import type { Session } from "../mux/views.ts";
import type { DiscoveryOptions } from "../discovery/types.ts";
import { createTypeRegistry } from "../sync/builtin-types.ts";
import { InMemoryStore } from "../sync/memory-store.ts";
import type { TypeRegistry } from "../sync/resource-types.ts";
import type { ResourceStore } from "../sync/store.ts";
import { ZoneSync } from "../sync/zone-sync.ts";
import type { MuxTransport } from "../transport/transport.ts";
import type { BackoffOptions } from "./backoff.ts";
import { ZoneClient, type RetryInfo } from "./zone-client.ts";

/** Options of {@link ZoneControlPlane}. */
export interface ZoneControlPlaneOptions {
  /** The zone's name. */
  readonly name: string;
  /** How to reach the global. */
  readonly transport: MuxTransport;
  /** Registered types. Default: Zone plus the example kinds. */
  readonly types?: TypeRegistry;
  /** The store. Default: an {@link InMemoryStore}. */
  readonly store?: ResourceStore;
  /** How the zone subscribes to global resources. Default "delta". */
  readonly mode?: "delta" | "sotw";
  /** Session tunables. */
  readonly session?: SessionOptions;
  /** Discovery tunables. */
  readonly discovery?: DiscoveryOptions;
  /** Reconnect backoff. */
  readonly backoff?: BackoffOptions;
  /** Called with every new session. */
  readonly onSession?: (session: Session) => void;
  /** Called before every retry. */
  readonly onRetry?: (info: RetryInfo) => void;
  /** Where to log. */
  readonly logger?: Logger;
  /** Random source for the backoff jitter. */
  readonly random?: () => number;
}

/** A zone control plane: dialing, reconnects and sync. */
export class ZoneControlPlane {
  /** Registered types. */
  readonly types: TypeRegistry;
  /** The zone's store. */
  readonly store: ResourceStore;
  /** The dialer. */
  readonly client: ZoneClient;
  /** Resource sync and connection status. */
  readonly sync: ZoneSync;

  /** @param options - name, transport, types, store */
  constructor(options: ZoneControlPlaneOptions) {
    const logger = options.logger ?? consoleLogger();
    this.types = options.types ?? createTypeRegistry();
    this.store = options.store ?? new InMemoryStore(this.types);
    this.sync = new ZoneSync({ zone: options.name, store: this.store, types: this.types, mode: options.mode, discovery: options.discovery, logger });
    this.client = new ZoneClient({
      name: options.name,
      transport: options.transport,
      session: options.session,
      backoff: options.backoff,
      logger,
      random: options.random,
      onRetry: options.onRetry,
      onSession: (session) => {
        options.onSession?.(session);
        void this.sync.attach(session);
      },
    });
  }

  /** The admin API backend of this zone (see `registerAdmin`). */
  admin(): AdminBackend {
    return { role: "zone", types: this.types, store: this.store, zoneStatuses: () => Promise.resolve([this.sync.status()]) };
  }

  /** Syncs with the global, reconnecting after every end, until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    this.sync.start(signal);
    await this.client.run(signal);
  }
}
