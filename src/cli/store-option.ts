/**
 * `--store` and `--data-dir` of `kds-mux global` and `kds-mux zone`: where a
 * control plane keeps its state. Durable by default: an embedded PostgreSQL
 * in `./kds-data/<name>`; `--store memory` keeps it in the process only;
 * `--store postgres://...` uses a PostgreSQL server (shared by several
 * global instances).
 *
 * @module
 */
import { InvalidArgumentError, Option } from "commander";
import { parseDuration } from "./address.ts";
import { KdsError } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { ResourceStore } from "../store/contract.ts";
import { InMemoryStore } from "../store/memory.ts";
import { describeTarget } from "../store/postgres/errors.ts";
import type { TypeRegistry } from "../kinds/resource-types.ts";

/** `--store`: embedded (default), memory, or a PostgreSQL URL. */
export const storeOption = (): Option =>
  new Option(
    "--store <store>",
    "where state lives: embedded (a PostgreSQL in --data-dir, the default), memory (lost at exit), or a postgres://user:pass@host:port/db URL",
  );

/** `--data-dir`: the embedded store's directory. */
export const dataDirOption = (): Option =>
  new Option("--data-dir <dir>", "the embedded store's directory (default ./kds-data/<name>)");

/** The shortest `--lease-duration` taken: a term shorter than a few store round trips would flap. */
export const MIN_LEASE_DURATION_MS = 300;

/** `--lease-duration` of `kds-mux zone`: the lease replicas on one PostgreSQL server elect their leader with. */
export const leaseDurationOption = (): Option =>
  new Option(
    "--lease-duration <duration>",
    "with --store postgres://...: the leader lease of this zone's replicas (processes of one zone name on one database elect one leader, which alone dials the global); a standby takes over about this long after the leader stops, and a leader that cannot renew stops at two thirds of it (default 10s)",
  ).argParser((text: string): number => {
    let ms: number;
    try {
      ms = parseDuration(text);
    } catch {
      throw new InvalidArgumentError(
        `--lease-duration "${text}" is not a duration; use for example 10s, 30s or 1500ms`,
      );
    }
    if (ms < MIN_LEASE_DURATION_MS || ms > 3_600_000)
      throw new InvalidArgumentError(
        `--lease-duration must be from ${MIN_LEASE_DURATION_MS}ms to 1h, got "${text}"`,
      );
    return ms;
  });

/** What the two options said. */
export interface StoreChoice {
  /** `--store`, if given. */
  readonly store?: string;
  /** `--data-dir`, if given. */
  readonly dataDir?: string;
}

/** An open store and how to release it. */
export interface CliStore {
  /** The store to hand to the control plane. */
  readonly store: ResourceStore;
  /** Where it lives, for the log ("memory", "PostgreSQL at host:port/db", "embedded PostgreSQL in DIR"). */
  readonly description: string;
  /** Closes the store (and stops the embedded server). */
  close(): Promise<void>;
}

/**
 * Whether the store chosen can be shared by several global instances: only a
 * PostgreSQL server can (memory and the embedded engine belong to one process).
 */
export function isSharedStore(choice: StoreChoice): boolean {
  return /^postgres(ql)?:\/\//.test(choice.store ?? "embedded");
}

/** Data dir names: one path segment made of name characters. */
const NAME_SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/**
 * Opens the store the options choose for the control plane `name`. Refuses
 * with a clear `invalid_argument` or `store_unavailable` (an unwritable data
 * dir, a data dir in use, a database that does not answer, a newer schema).
 */
export async function openCliStore(
  choice: StoreChoice,
  context: {
    name: string;
    types: TypeRegistry;
    logger: Logger;
    signal: AbortSignal;
    /** Who uses an embedded data dir, named to a second process refused it (see `startEmbeddedPostgres`'s `owner`). */
    owner?: string;
  },
): Promise<CliStore> {
  const kind = choice.store ?? "embedded";
  const { types, logger, signal } = context;
  if (kind !== "embedded" && choice.dataDir !== undefined) {
    throw new KdsError(
      "invalid_argument",
      `--data-dir is for the embedded store; drop it, or drop --store ${kind.startsWith("postgres") ? "<url>" : kind}`,
    );
  }
  if (kind === "memory") {
    return {
      store: new InMemoryStore(types),
      description: "memory (state is lost when the process ends)",
      close: async () => undefined,
    };
  }
  // The database client and the launcher load only when used: every other command starts faster.
  const { PostgresStore } = await import("../store/postgres.ts");
  if (/^postgres(ql)?:\/\//.test(kind)) {
    const store = await PostgresStore.open(types, { url: kind, logger, signal });
    return {
      store,
      description: `PostgreSQL at ${describeTarget(kind)}`,
      close: () => store.close(),
    };
  }
  if (kind !== "embedded") {
    throw new KdsError(
      "invalid_argument",
      `--store must be embedded, memory or a postgres:// URL, got "${kind.startsWith("postgres") ? describeTarget(kind) : kind}"`,
    );
  }
  if (choice.dataDir === undefined && !NAME_SEGMENT.test(context.name)) {
    throw new KdsError(
      "invalid_argument",
      `--name "${context.name}" cannot name a data directory; give --data-dir`,
    );
  }
  const dataDir = choice.dataDir ?? `./kds-data/${context.name}`;
  const { startEmbeddedPostgres } = await import("../adapters/node/embedded-postgres.ts");
  const server = await startEmbeddedPostgres({
    dataDir,
    logger,
    signal,
    createSystemUser: true,
    owner: context.owner,
  });
  try {
    const store = await PostgresStore.open(types, { url: server.url, logger, signal });
    return {
      store,
      description: `embedded PostgreSQL in ${server.dataDir}`,
      close: async () => {
        try {
          await store.close();
        } finally {
          await server.stop();
        }
      },
    };
  } catch (error) {
    await server.stop();
    throw error;
  }
}
