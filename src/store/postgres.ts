/**
 * The PostgreSQL {@link ResourceStore} on postgres.js (which runs on Node,
 * Deno and Bun). Several processes may share one database (and schema).
 *
 * - **Revisions in commit order.** Every write transaction first locks the
 *   one row of `kds_state` and takes its revisions from the counter there,
 *   so a transaction cannot get a revision until every transaction holding
 *   a lower one has committed: a reader of `revision > cursor` never skips a
 *   change that commits late. Revisions have no gaps.
 * - **Change log.** Every write also appends the resource (or a tombstone)
 *   to `kds_changes`; `watch` reads it by revision. Compaction keeps the last
 *   `historyLimit` changes; watching from before them fails with
 *   `store_compacted`.
 * - **Other instances** learn of commits through LISTEN/NOTIFY (payload: the
 *   revision and the kinds written, and only the watches of those kinds wake;
 *   see postgres/change-notice.ts) and always catch up by revision after
 *   listening (again), so a
 *   notification lost during a reconnect loses nothing; a slow poll is the
 *   safety net.
 * - **A lost connection** is ridden out inside `watch`: it keeps its cursor,
 *   reconnects and catches up. Only when the database stays unreachable for
 *   `watchOutageMs` does the watch fail with `store_unavailable`; the
 *   consumer then watches again from the last revision it saw.
 *
 * @module
 */
import postgres, { type Sql, type TransactionSql } from "postgres";
import { KdsError, abortError } from "../errors.ts";
import { consoleLogger, type Logger } from "../log.ts";
import {
  LABELS,
  resourceKey,
  type StoredResource,
  type TypeRegistry,
} from "../kinds/resource-types.ts";
import { sleep } from "../util/abort.ts";
import { backoffDelay, resolveBackoff } from "../util/backoff.ts";
import { Waker, timer } from "../util/wake.ts";
import type {
  ApplyOptions,
  ApplyResult,
  ListOptions,
  ListResult,
  ResourceInput,
  ResourceName,
  ResourceStore,
  StoreChange,
  WatchOptions,
  WriteOp,
  WriteOptions,
} from "./contract.ts";
import {
  describeTarget,
  isConnectTimeout,
  isConnectionError,
  storeError,
} from "./postgres/errors.ts";
import { markRolledBack } from "./rolled-back.ts";
import { guarded, type Runner } from "./postgres/guard.ts";
import { CancelRequests } from "./postgres/cancels.ts";
import { migrate, quoteIdent, type MigrationReport } from "./postgres/migrations.ts";
import {
  CHANGE_COLUMNS,
  RESOURCE_COLUMNS,
  decodeChange,
  decodeResource,
  encodeSpec,
  toHex,
  type ChangeRow,
  type ResourceRow,
} from "./postgres/rows.ts";
import { transaction } from "./postgres/transaction.ts";
import { WriteQueue, type QueuedWrite } from "./postgres/write-queue.ts";
import { ZoneLists, type ZonesRead } from "./postgres/zone-lists.ts";
import { keptLabels, keptSpec } from "./kept.ts";
import {
  fencedOut,
  type Lease,
  type LeaseAttempt,
  type LeaseCallOptions,
  type LeaseClaim,
  type LeaseRecord,
  type LeaseStore,
  type WriteFence,
  checkClaim,
} from "./lease.ts";
import * as leases from "./postgres/leases.ts";
import { noticePayload, noticedKinds, wakes } from "./postgres/change-notice.ts";
import { validateInput, versionConflict } from "./validate.ts";

export type { MigrationReport } from "./postgres/migrations.ts";

/**
 * Names one `getMany` statement reads at most; a longer list is read in
 * statements of this many, inside one read-only transaction (one snapshot).
 */
const GET_MANY_CHUNK = 10_000;

/** Delays between a watch's reconnect attempts while the database is unreachable. */
const WATCH_RETRY = resolveBackoff({ baseMs: 200, capMs: 2_000 });
/** Attempts of one store call whose new connection did not become ready in time (see `#call`). */
const CONNECT_ATTEMPTS = 3;
/** The wait before such a call's next attempt. */
const CONNECT_RETRY = resolveBackoff({ baseMs: 250, capMs: 1_000 });

/** Options of {@link PostgresStore.open}. */
export interface PostgresStoreOptions {
  /** `postgres://user:password@host:port/database` (postgres.js syntax; `?sslmode=require` and friends work). */
  readonly url: string;
  /** The PostgreSQL schema holding the store's tables (created when missing). Default "public". */
  readonly schema?: string;
  /** Changes kept in the change log for watchers that fall behind. Default 100,000. */
  readonly historyLimit?: number;
  /** Pool size for queries (the LISTEN connection is one more). Default 10. */
  readonly maxConnections?: number;
  /** How long a new connection may take to become ready, rounded up to whole seconds. A call whose connection misses it runs again, failing with `store_unavailable` after 3 attempts. Default 5,000 ms. */
  readonly connectTimeoutMs?: number;
  /** The safety-net poll of every watch, in case a notification was lost. Default 5,000 ms. */
  readonly pollIntervalMs?: number;
  /** How long a watch rides out an unreachable database before failing with `store_unavailable`. Default 30,000 ms. */
  readonly watchOutageMs?: number;
  /** Changes read per catch-up query. Default 1,000. */
  readonly watchPageSize?: number;
  /** Where retries are reported. Default: warnings to the console. */
  readonly logger?: Logger;
  /** Cancels opening (connecting and migrating). */
  readonly signal?: AbortSignal;
}

/** One call's batch as the write queue holds it: its ops and the rows they name. */
interface QueuedBatch {
  readonly ops: readonly WriteOp[];
  readonly refs: ReadonlyArray<{ kind: string; mesh: string; name: string }>;
  /** Written only while this lease term is current. */
  readonly fence?: WriteFence;
}

/** A batch's outcome in its group: its result, or why it was refused. */
type Outcome = { readonly result: ApplyResult } | { readonly error: unknown };

/** What a write sees of a row: its version and creation time, or undefined when it does not exist. */
type Seen = { version: string; created: Date } | undefined;

/** One batch staged: what it saw and wrote, by row key, its changes and results, and the revision after it. */
interface Staged {
  readonly seen: ReadonlyMap<string, Seen>;
  readonly final: ReadonlyMap<
    string,
    StoredResource | { deleted: { kind: string; mesh: string; name: string } }
  >;
  readonly changes: readonly StoreChange[];
  readonly results: Array<StoredResource | boolean>;
  readonly passedBytes: ReadonlyMap<StoredResource, Uint8Array>;
  readonly revision: number;
}

/** A resource's row as a list of several zones reads it: with the zone it was listed for. */
type ZoneRow = ResourceRow & { readonly listed_zone: string };

/** A row's identity within one transaction. */
function rowKey(r: { kind: string; mesh: string; name: string }): string {
  return `${r.kind}\u0000${r.mesh}\u0000${r.name}`;
}

/** Resources (and leases) kept in PostgreSQL. Open one with {@link PostgresStore.open}. */
export class PostgresStore implements ResourceStore, LeaseStore {
  readonly #types: TypeRegistry;
  readonly #sql: Sql;
  readonly #listenSql: Sql;
  readonly #target: string;
  readonly #schema: string;
  readonly #channel: string;
  readonly #historyLimit: number;
  readonly #pollIntervalMs: number;
  readonly #watchOutageMs: number;
  readonly #pageSize: number;
  readonly #logger: Logger;
  /** Each watch's waker, with the kinds it follows (a notification wakes only the watches of a kind it names). */
  readonly #watchers = new Map<Waker, ReadonlySet<string>>();
  readonly #closed = new AbortController();
  readonly #cancels: CancelRequests;
  /** Writes waiting for the one writer, written in groups (postgres/write-queue.ts). */
  readonly #writes = new WriteQueue<QueuedBatch, ApplyResult>((group) => this.#writeGroup(group));
  /** Lists naming one zone, read several zones to a statement (postgres/zone-lists.ts). */
  readonly #zoneLists = new ZoneLists<ZoneRow>();
  #listening: Promise<void> | undefined;
  /** What the start-up migration did. */
  readonly migration: MigrationReport;

  /**
   * Connects, brings the schema up to date (see `migrations.ts`) and returns
   * the store. Fails fast with `store_unavailable` naming the server when it
   * cannot be reached, refuses the login, or holds a newer schema.
   *
   * @param types - the registered types; writes of other kinds are refused
   * @param options - where the database is, and tuning
   */
  static async open(types: TypeRegistry, options: PostgresStoreOptions): Promise<PostgresStore> {
    const schema = options.schema ?? "public";
    quoteIdent(schema); // validates
    const historyLimit = options.historyLimit ?? 100_000;
    if (!Number.isInteger(historyLimit) || historyLimit < 1)
      throw new KdsError(
        "invalid_argument",
        `historyLimit must be a positive integer, got ${historyLimit}`,
      );
    const target = describeTarget(options.url);
    if (!/^postgres(ql)?:\/\//.test(options.url)) {
      throw new KdsError(
        "invalid_argument",
        `a PostgreSQL store URL starts with postgres:// or postgresql://, got ${target}`,
      );
    }
    const common = {
      connect_timeout: Math.max(1, Math.ceil((options.connectTimeoutMs ?? 5_000) / 1000)),
      onnotice: () => undefined, // NOTICEs ("schema already exists, skipping") are not errors.
      connection: { search_path: schema, application_name: "kds-mux" },
    };
    const sql = postgres(options.url, { ...common, max: options.maxConnections ?? 10 });
    // `onnotify` is a postgres.js option its typings omit: it sees every notification of the connection.
    const listenOptions: postgres.Options<Record<string, never>> & {
      onnotify: (channel: string, payload: string) => void;
    } = {
      ...common,
      max: 1,
      idle_timeout: 0,
      max_lifetime: null,
      fetch_types: false,
      onnotify: (_channel, payload) => store.#wake(noticedKinds(payload)),
      onclose: () => {
        // The LISTEN died with its connection: the next watch loop listens again, then catches up.
        store.#listening = undefined;
        store.#wake(undefined);
      },
    };
    const listenSql = postgres(options.url, listenOptions);
    const cancels = new CancelRequests(options.logger ?? consoleLogger(), target);
    let migration: MigrationReport;
    try {
      migration = await guarded(options.signal, "opening the PostgreSQL store", cancels, (run) =>
        transaction(sql, "", (tx) => migrate(tx, schema, target, undefined, run)),
      );
    } catch (error) {
      await Promise.allSettled([
        sql.end({ timeout: 1 }),
        listenSql.end({ timeout: 1 }),
        cancels.settled(AbortSignal.timeout(1_000)),
      ]);
      if (options.signal?.aborted) throw abortError(options.signal, "opening the PostgreSQL store");
      throw storeError(error, target, "opening the PostgreSQL store");
    }
    const store: PostgresStore = new PostgresStore(types, sql, listenSql, {
      ...options,
      schema,
      historyLimit,
      target,
      migration,
      cancels,
    });
    return store;
  }

  private constructor(
    types: TypeRegistry,
    sql: Sql,
    listenSql: Sql,
    options: PostgresStoreOptions & {
      schema: string;
      historyLimit: number;
      target: string;
      migration: MigrationReport;
      cancels: CancelRequests;
    },
  ) {
    this.#types = types;
    this.#sql = sql;
    this.#listenSql = listenSql;
    this.#target = options.target;
    this.#schema = options.schema;
    this.#channel = `kds.${options.schema}`;
    this.#historyLimit = options.historyLimit;
    this.#pollIntervalMs = options.pollIntervalMs ?? 5_000;
    this.#watchOutageMs = options.watchOutageMs ?? 30_000;
    this.#pageSize = options.watchPageSize ?? 1_000;
    this.#logger = options.logger ?? consoleLogger();
    this.migration = options.migration;
    this.#cancels = options.cancels;
  }

  /** The schema this store keeps its tables in. */
  get schema(): string {
    return this.#schema;
  }

  async get(
    kind: string,
    mesh: string,
    name: string,
    options: { signal?: AbortSignal } = {},
  ): Promise<StoredResource | undefined> {
    const k = this.#kindName(kind);
    const rows = await this.#call("get", options.signal, (run) =>
      run(
        this.#sql<
          ResourceRow[]
        >`SELECT ${this.#sql.unsafe(RESOURCE_COLUMNS)} FROM kds_resources WHERE kind = ${k} AND mesh = ${mesh} AND name = ${name}`,
      ),
    );
    const row = rows[0];
    return row === undefined ? undefined : decodeResource(this.#types, row);
  }

  /** One statement per 10,000 names (`GET_MANY_CHUNK`) (a join against the names passed as arrays), all in one snapshot. */
  async getMany(
    kind: string,
    refs: readonly ResourceName[],
    options: { signal?: AbortSignal } = {},
  ): Promise<Array<StoredResource | undefined>> {
    const k = this.#kindName(kind);
    if (refs.length === 0) {
      if (options.signal?.aborted) throw abortError(options.signal, "getMany");
      return [];
    }
    const read = (
      q: Sql | TransactionSql,
      run: Runner,
      part: readonly ResourceName[],
    ): Promise<ResourceRow[]> =>
      run(q<ResourceRow[]>`
        SELECT ${q.unsafe(RESOURCE_COLUMNS)} FROM kds_resources
        WHERE kind = ${k} AND (mesh, name) IN (SELECT * FROM unnest(${part.map((r) => r.mesh)}::text[], ${part.map((r) => r.name)}::text[]))`);
    const rows = await this.#call("getMany", options.signal, (run) =>
      refs.length <= GET_MANY_CHUNK
        ? read(this.#sql, run, refs)
        : transaction(this.#sql, "isolation level repeatable read read only", async (tx) => {
            const all: ResourceRow[] = [];
            for (const part of chunks(refs, GET_MANY_CHUNK))
              for (const row of await read(tx, run, part)) all.push(row);
            return all;
          }),
    );
    const id = (mesh: string, name: string): string => `${mesh}\u0000${name}`;
    const found = new Map<string, ResourceRow>();
    for (const row of rows) found.set(id(row.mesh, row.name), row);
    // Decode each found row once, even when a name is asked for twice.
    const decoded = new Map<string, StoredResource>();
    return refs.map((r) => {
      const key = id(r.mesh, r.name);
      const row = found.get(key);
      if (row === undefined) return undefined;
      let resource = decoded.get(key);
      if (resource === undefined) {
        resource = decodeResource(this.#types, row);
        decoded.set(key, resource);
      }
      return resource;
    });
  }

  /**
   * One statement, so one snapshot: the revision and the rows agree (a
   * transaction of two statements cost four round trips, and a global
   * resuming thousands of zones lists for each). Lists whose label filter
   * names a zone go through the zone label's own index and are read several
   * zones to a statement under load (postgres/zone-lists.ts).
   */
  async list(kind: string, options: ListOptions = {}): Promise<ListResult> {
    const k = this.#kindName(kind);
    const zone = options.labels?.[LABELS.zone];
    // A zone with a NUL the server refuses goes alone: in a group it would fail every list of its statement.
    if (zone !== undefined && !zone.includes("\u0000")) {
      const { [LABELS.zone]: _, ...others } = options.labels ?? {};
      // The group's reader outlives this call: it keeps the filter as called, not the caller's options object.
      const mesh = options.mesh;
      const key = JSON.stringify([k, mesh ?? null, Object.entries(others).sort()]);
      return this.#zoneLists.list(key, zone, options.signal, {
        read: (zones, signal) => this.#listZones(k, mesh, others, zones, signal),
        decode: (row) => decodeResource(this.#types, row),
      });
    }
    const rows = await this.#call("list", options.signal, (run) =>
      run(this.#sql<Array<Partial<ResourceRow> & { state_revision: string }>>`
        SELECT s.revision::text AS state_revision, r.* FROM kds_state s LEFT JOIN LATERAL (
          SELECT ${this.#sql.unsafe(RESOURCE_COLUMNS)} FROM kds_resources
          WHERE kind = ${k}
            ${options.mesh !== undefined ? this.#sql`AND mesh = ${options.mesh}` : this.#sql``}
            ${options.labels !== undefined ? this.#sql`AND labels @> ${this.#sql.json({ ...options.labels })}` : this.#sql``}
        ) r ON true
        WHERE s.id
        ORDER BY r.mesh, r.name`),
    );
    // No resource matched: one row, the state's, with the resource's columns null.
    const found = rows.filter(
      (r): r is ResourceRow & { state_revision: string } => r.kind !== null,
    );
    return {
      revision: Number(rows[0]?.state_revision ?? 0),
      resources: found.map((r) => decodeResource(this.#types, r)),
    };
  }

  /** The resources of `kind` (and `mesh`) carrying `labels` of each of `zones`, in one statement: one snapshot for all. */
  async #listZones(
    kind: string,
    mesh: string | undefined,
    labels: Readonly<Record<string, string>>,
    zones: readonly string[],
    signal: AbortSignal,
  ): Promise<ZonesRead<ZoneRow>> {
    const rows = await this.#call("list", signal, (run) =>
      // The zone condition is spelled as migration 2's index on the zone label, so the statement goes through it.
      run(this.#sql<Array<Partial<ZoneRow> & { state_revision: string }>>`
        SELECT s.revision::text AS state_revision, r.* FROM kds_state s LEFT JOIN LATERAL (
          SELECT ${this.#sql.unsafe(RESOURCE_COLUMNS)}, (labels ->> 'kds.io/zone') AS listed_zone FROM kds_resources
          WHERE kind = ${kind}
            AND (labels ->> 'kds.io/zone') = ANY(${zones as string[]}::text[])
            ${mesh !== undefined ? this.#sql`AND mesh = ${mesh}` : this.#sql``}
            ${Object.keys(labels).length > 0 ? this.#sql`AND labels @> ${this.#sql.json({ ...labels })}` : this.#sql``}
        ) r ON true
        WHERE s.id
        ORDER BY r.mesh, r.name`),
    );
    const byZone = new Map<string, ZoneRow[]>();
    for (const row of rows) {
      if (row.kind === null) continue; // no resource matched: the state's row alone
      const r = row as ZoneRow;
      const held = byZone.get(r.listed_zone);
      if (held === undefined) byZone.set(r.listed_zone, [r]);
      else held.push(r);
    }
    return { revision: Number(rows[0]?.state_revision ?? 0), rows: byZone };
  }

  async put(input: ResourceInput, options: WriteOptions = {}): Promise<StoredResource> {
    const { results } = await this.apply(
      [{ op: "put", input, expectedVersion: options.expectedVersion }],
      options,
    );
    return results[0] as StoredResource;
  }

  async delete(
    kind: string,
    mesh: string,
    name: string,
    options: WriteOptions = {},
  ): Promise<boolean> {
    const { results } = await this.apply(
      [{ op: "delete", kind, mesh, name, expectedVersion: options.expectedVersion }],
      options,
    );
    return results[0] as boolean;
  }

  async apply(ops: readonly WriteOp[], options: ApplyOptions = {}): Promise<ApplyResult> {
    const signal = options.signal;
    if (signal?.aborted) throw abortError(signal, "apply");
    // Refuse bad input before touching the database.
    const refs = ops.map((op) => {
      if (op.op === "put") {
        validateInput(this.#types, op.input);
        return {
          kind: this.#types.get(op.input.kind).kind,
          mesh: op.input.mesh ?? "",
          name: op.input.name,
        };
      }
      return { kind: this.#types.get(op.kind).kind, mesh: op.mesh, name: op.name };
    });
    if (this.#closed.signal.aborted) throw this.#closed.signal.reason;
    return this.#writes.submit({ ops, refs, fence: options.fence }, ops.length, signal, "apply");
  }

  acquireLease(claim: LeaseClaim, options: LeaseCallOptions = {}): Promise<LeaseAttempt> {
    checkClaim(claim);
    return this.#call("acquireLease", options.signal, (run) =>
      leases.acquireLease(this.#sql, run, claim),
    );
  }

  renewLease(lease: Lease, options: LeaseCallOptions = {}): Promise<boolean> {
    return this.#call("renewLease", options.signal, (run) =>
      leases.renewLease(this.#sql, run, lease),
    );
  }

  releaseLease(lease: Lease, options: LeaseCallOptions = {}): Promise<void> {
    return this.#call("releaseLease", options.signal, (run) =>
      leases.releaseLease(this.#sql, run, lease),
    );
  }

  readLease(name: string, options: LeaseCallOptions = {}): Promise<LeaseRecord | undefined> {
    return this.#call("readLease", options.signal, (run) => leases.readLease(this.#sql, run, name));
  }

  /**
   * Writes a group of queued batches in one transaction, each batch decided
   * on its own (a conflict rejects that batch and writes nothing of it). A
   * batch alone keeps its signal on the statements, so an abort cancels them
   * and writes nothing. When the server refuses a group of several (not a
   * lost connection), each batch is written again alone, so only the batch at
   * fault fails.
   */
  async #writeGroup(group: readonly QueuedWrite<QueuedBatch, ApplyResult>[]): Promise<void> {
    const alone = group.length === 1 ? group[0] : undefined;
    let written: { kinds: ReadonlySet<string> | undefined; outcomes: Outcome[] };
    try {
      written = await this.#call("apply", alone?.signal, (run) =>
        transaction(this.#sql, "", async (tx) => {
          const [state] = await run(tx<Array<{ revision: string; compacted: string }>>`
            SELECT revision::text AS revision, compacted_through::text AS compacted FROM kds_state WHERE id FOR UPDATE`);
          if (state === undefined)
            throw new KdsError(
              "store_unavailable",
              `the store's state row is missing in ${this.#target} (schema "${this.#schema}"); the schema was damaged by hand`,
            );
          const staged = await this.#stageAndWrite(
            tx,
            run,
            group,
            Number(state.revision),
            Number(state.compacted),
          );
          // Last chance to cancel a batch alone: past this point the transaction commits.
          if (alone?.signal?.aborted) throw abortError(alone.signal, "apply");
          return staged;
        }),
      );
    } catch (error) {
      const lost =
        isConnectionError(error) || isConnectionError((error as { cause?: unknown }).cause);
      if (group.length > 1 && !lost) {
        for (const batch of group) if (!batch.settled) await this.#writeGroup([batch]);
        return;
      }
      // The server answered with an error, so it rolled the transaction back: nothing of it was written (a lost connection
      // may have committed; a connection that never became ready sent nothing).
      const unknown = lost && !isConnectTimeout(error);
      for (const batch of group) batch.reject(unknown ? error : markRolledBack(error));
      return;
    }
    if (written.kinds !== undefined) this.#wake(written.kinds);
    group.forEach((batch, i) => {
      const outcome = written.outcomes[i] as Outcome;
      if ("error" in outcome) batch.reject(outcome.error);
      else batch.resolve(outcome.result);
    });
  }

  async revision(options: { signal?: AbortSignal } = {}): Promise<number> {
    const [row] = await this.#call("revision", options.signal, (run) =>
      run(this.#sql<Array<{ revision: string }>>`SELECT revision::text AS revision FROM kds_state`),
    );
    return Number(row?.revision ?? 0);
  }

  watch(fromRevision: number, options: WatchOptions): AsyncIterable<StoreChange> {
    return { [Symbol.asyncIterator]: () => this.#follow(fromRevision, options) };
  }

  /** Ends every watch (with `store_unavailable`) and closes the connections; later calls fail. */
  async close(): Promise<void> {
    if (this.#closed.signal.aborted) return;
    this.#closed.abort(
      new KdsError("store_unavailable", `the PostgreSQL store (${this.#target}) was closed`),
    );
    this.#wake(undefined);
    if (this.#cancels.pending > 0)
      this.#logger.debug(
        `PostgreSQL store: closing waits for ${this.#cancels.pending} cancel requests to end`,
        { target: this.#target },
      );
    await Promise.all([
      this.#sql.end({ timeout: 5 }),
      this.#listenSql.end({ timeout: 5 }),
      // Cancel requests go on connections of their own, which end() does not wait for: wait for them here, so a
      // caller that stops the server next (the embedded engine) stops it under none (see postgres/cancels.ts).
      this.#cancels.settled(AbortSignal.timeout(5_000)),
    ]);
  }

  /**
   * Stages each batch of `group` in order against the rows they touch (and
   * the batches before it), then writes rows, change log, counter and
   * notification for all of them. A batch that conflicts, or was settled
   * (its signal aborted) before it was staged, adds nothing.
   */
  async #stageAndWrite(
    tx: TransactionSql,
    run: Runner,
    group: readonly QueuedWrite<QueuedBatch, ApplyResult>[],
    startRevision: number,
    compactedThrough: number,
  ): Promise<{ kinds: ReadonlySet<string> | undefined; outcomes: Outcome[] }> {
    // What the group sees: the stored version and creation time of each touched key, updated as batches stage.
    const current = new Map<string, Seen>();
    const refs = group.flatMap((batch) => (batch.settled ? [] : batch.work.refs));
    if (refs.length > 0) {
      const existing = await run(tx<
        Array<{ kind: string; mesh: string; name: string; version: string; created_at: Date }>
      >`
        SELECT kind, mesh, name, version::text AS version, created_at FROM kds_resources
        WHERE (kind, mesh, name) IN (SELECT * FROM unnest(${refs.map((r) => r.kind)}::text[], ${refs.map((r) => r.mesh)}::text[], ${refs.map((r) => r.name)}::text[]))`);
      for (const row of existing)
        current.set(rowKey(row), { version: row.version, created: row.created_at });
    }
    const final = new Map<
      string,
      StoredResource | { deleted: { kind: string; mesh: string; name: string } }
    >();
    const changes: StoreChange[] = [];
    // The bytes of specs the caller passed (WriteOp.specBytes): written as they came, not encoded again.
    const passedBytes = new Map<StoredResource, Uint8Array>();
    const outcomes: Outcome[] = [];
    let revision = startRevision;
    const now = new Date();
    // Fenced batches: their lease terms, locked until this transaction ends (postgres/leases.ts).
    const fences = group.flatMap((b) =>
      b.settled || b.work.fence === undefined ? [] : [b.work.fence],
    );
    const terms = fences.length === 0 ? undefined : await leases.lockFences(tx, run, fences);
    for (const batch of group) {
      if (batch.signal?.aborted) {
        outcomes.push({ error: abortError(batch.signal, "apply") });
        continue;
      }
      const fence = batch.work.fence;
      const term = fence === undefined ? undefined : terms?.get(fence.lease);
      if (fence !== undefined && term?.revision !== fence.revision) {
        outcomes.push({
          error: fencedOut(
            fence,
            term === undefined
              ? "it expired"
              : `term ${term.revision} of holder "${term.holder}" is current`,
          ),
        });
        continue;
      }
      const staged = this.#stage(batch.work, current, revision, now);
      if ("error" in staged) {
        outcomes.push(staged);
        continue;
      }
      for (const [key, seen] of staged.seen) current.set(key, seen);
      for (const [key, value] of staged.final) final.set(key, value);
      for (const [resource, bytes] of staged.passedBytes) passedBytes.set(resource, bytes);
      changes.push(...staged.changes);
      revision = staged.revision;
      outcomes.push({ result: { revision, results: staged.results } });
    }
    if (changes.length === 0) return { kinds: undefined, outcomes };
    const kinds = new Set<string>();
    for (const c of changes) kinds.add(c.op === "put" ? c.resource.kind : c.ref.kind);

    const puts: StoredResource[] = [];
    const deletes: Array<{ kind: string; mesh: string; name: string }> = [];
    for (const v of final.values()) {
      if ("deleted" in v) deletes.push(v.deleted);
      else puts.push(v);
    }
    // Encode once; the same bytes go to the resource row and the change row.
    const specHex = new Map<StoredResource, string>();
    for (const c of changes)
      if (c.op === "put")
        specHex.set(
          c.resource,
          toHex(passedBytes.get(c.resource) ?? encodeSpec(this.#types, c.resource)),
        );
    for (const chunk of chunks(puts, 5_000)) {
      await run(tx`
        INSERT INTO kds_resources (kind, mesh, name, labels, spec, version, created_at, modified_at)
        SELECT k, m, n, l::jsonb, decode(s, 'hex'), v::int8, c, u FROM unnest(
          ${chunk.map((r) => r.kind)}::text[], ${chunk.map((r) => r.meta.mesh)}::text[], ${chunk.map((r) => r.meta.name)}::text[],
          ${chunk.map((r) => JSON.stringify(r.meta.labels))}::text[], ${chunk.map((r) => specHex.get(r) as string)}::text[],
          ${chunk.map((r) => r.meta.version)}::text[], ${chunk.map((r) => r.meta.creationTime.toISOString())}::timestamptz[],
          ${chunk.map((r) => r.meta.modificationTime.toISOString())}::timestamptz[]
        ) AS t(k, m, n, l, s, v, c, u)
        ON CONFLICT (kind, mesh, name) DO UPDATE SET
          labels = excluded.labels, spec = excluded.spec, version = excluded.version, modified_at = excluded.modified_at`);
    }
    for (const chunk of chunks(deletes, 5_000)) {
      await run(tx`
        DELETE FROM kds_resources WHERE (kind, mesh, name) IN (
          SELECT * FROM unnest(${chunk.map((r) => r.kind)}::text[], ${chunk.map((r) => r.mesh)}::text[], ${chunk.map((r) => r.name)}::text[]))`);
    }
    const putChanges = changes.filter(
      (c): c is Extract<StoreChange, { op: "put" }> => c.op === "put",
    );
    for (const chunk of chunks(putChanges, 5_000)) {
      await run(tx`
        INSERT INTO kds_changes (revision, op, kind, mesh, name, labels, spec, created_at, modified_at)
        SELECT r::int8, 'put', k, m, n, l::jsonb, decode(s, 'hex'), c, u FROM unnest(
          ${chunk.map((c) => String(c.revision))}::text[], ${chunk.map((c) => c.resource.kind)}::text[],
          ${chunk.map((c) => c.resource.meta.mesh)}::text[], ${chunk.map((c) => c.resource.meta.name)}::text[],
          ${chunk.map((c) => JSON.stringify(c.resource.meta.labels))}::text[], ${chunk.map((c) => specHex.get(c.resource) as string)}::text[],
          ${chunk.map((c) => c.resource.meta.creationTime.toISOString())}::timestamptz[],
          ${chunk.map((c) => c.resource.meta.modificationTime.toISOString())}::timestamptz[]
        ) AS t(r, k, m, n, l, s, c, u)`);
    }
    const deleteChanges = changes.filter(
      (c): c is Extract<StoreChange, { op: "delete" }> => c.op === "delete",
    );
    for (const chunk of chunks(deleteChanges, 5_000)) {
      await run(tx`
        INSERT INTO kds_changes (revision, op, kind, mesh, name)
        SELECT r::int8, 'delete', k, m, n FROM unnest(
          ${chunk.map((c) => String(c.revision))}::text[], ${chunk.map((c) => c.ref.kind)}::text[],
          ${chunk.map((c) => c.ref.mesh)}::text[], ${chunk.map((c) => c.ref.name)}::text[]
        ) AS t(r, k, m, n)`);
    }
    // Compact in chunks of a quarter of the history, so the cost per write stays constant.
    let compacted = compactedThrough;
    if (
      revision - compactedThrough >
      this.#historyLimit + Math.max(1, Math.floor(this.#historyLimit / 4))
    ) {
      compacted = revision - this.#historyLimit;
      await run(tx`DELETE FROM kds_changes WHERE revision <= ${String(compacted)}::int8`);
    }
    await run(
      tx`UPDATE kds_state SET revision = ${String(revision)}::int8, compacted_through = ${String(compacted)}::int8 WHERE id`,
    );
    // Delivered to every listener when (and only if) the transaction commits.
    await run(tx`SELECT pg_notify(${this.#channel}, ${noticePayload(revision, kinds)})`);
    return { kinds, outcomes };
  }

  /** Stages one batch over what the group has seen so far (`current`, not changed here); its changes take the revisions after `startRevision`. */
  #stage(
    batch: QueuedBatch,
    current: ReadonlyMap<string, Seen>,
    startRevision: number,
    now: Date,
  ): Staged | { error: KdsError } {
    const seen = new Map<string, Seen>();
    const final = new Map<
      string,
      StoredResource | { deleted: { kind: string; mesh: string; name: string } }
    >();
    const changes: StoreChange[] = [];
    const results: Array<StoredResource | boolean> = [];
    const passedBytes = new Map<StoredResource, Uint8Array>();
    let revision = startRevision;
    for (const [i, op] of batch.ops.entries()) {
      const ref = batch.refs[i] as { kind: string; mesh: string; name: string };
      const key = rowKey(ref);
      const before = seen.has(key) ? seen.get(key) : current.get(key);
      const conflict = versionConflict(
        ref.kind,
        resourceKey(ref.mesh, ref.name),
        before?.version ?? "",
        op.expectedVersion,
      );
      if (conflict !== undefined) return { error: conflict };
      if (op.op === "put") {
        revision += 1;
        const resource: StoredResource = Object.freeze({
          kind: ref.kind,
          meta: Object.freeze({
            name: ref.name,
            mesh: ref.mesh,
            labels: keptLabels(op),
            version: String(revision),
            creationTime: before?.created ?? now,
            modificationTime: now,
          }),
          spec: keptSpec(this.#types.get(ref.kind).schema, op),
        });
        if (op.specBytes !== undefined) passedBytes.set(resource, op.specBytes);
        seen.set(key, { version: resource.meta.version, created: resource.meta.creationTime });
        final.set(key, resource);
        changes.push({ op: "put", revision, resource });
        results.push(resource);
      } else if (before === undefined) {
        results.push(false);
      } else {
        revision += 1;
        seen.set(key, undefined);
        final.set(key, { deleted: ref });
        changes.push({ op: "delete", revision, ref });
        results.push(true);
      }
    }
    return { seen, final, changes, results, passedBytes, revision };
  }

  async *#follow(fromRevision: number, options: WatchOptions): AsyncGenerator<StoreChange> {
    const { signal } = options;
    const kinds = (options.kinds ?? this.#types.list().map((t) => t.kind)).map(
      (k) => this.#types.find(k)?.kind ?? k,
    );
    const waker = new Waker();
    const onAbort = (): void => waker.wake();
    this.#watchers.set(waker, new Set(kinds));
    signal.addEventListener("abort", onAbort, { once: true });
    let cursor = fromRevision;
    let outageSince: number | undefined;
    let attempt = 0;
    try {
      while (!signal.aborted) {
        if (this.#closed.signal.aborted) throw this.#closed.signal.reason;
        let page: { head: number; compacted: number; changes: StoreChange[] };
        try {
          // Listen first, then read: a commit after the read is always notified.
          await this.#listen();
          page = await this.#page(cursor, kinds, signal);
          outageSince = undefined;
          attempt = 0;
        } catch (error) {
          if (signal.aborted) return;
          if (this.#closed.signal.aborted) throw this.#closed.signal.reason;
          if (!isConnectionError(error))
            throw storeError(error, this.#target, `watching changes after revision ${cursor}`);
          const now = Date.now();
          outageSince ??= now;
          if (now - outageSince >= this.#watchOutageMs) {
            throw new KdsError(
              "store_unavailable",
              `watching changes after revision ${cursor}: PostgreSQL at ${this.#target} has been unreachable for ${Math.round((now - outageSince) / 1000)} s; watch again from revision ${cursor} once it is back`,
              { cause: error },
            );
          }
          attempt += 1;
          const delay = backoffDelay(attempt - 1, WATCH_RETRY);
          this.#logger.warn(
            "PostgreSQL store: watch lost its connection; reconnecting and catching up",
            {
              target: this.#target,
              revision: cursor,
              attempt,
              retryInMs: Math.round(delay),
              error: error instanceof Error ? error.message : String(error),
            },
          );
          try {
            await sleep(delay, signal);
          } catch {
            // Only an abort rejects sleep, and an aborted watch ends without an error.
            return;
          }
          continue;
        }
        if (cursor > page.head) {
          throw new KdsError(
            "store_compacted",
            `the store is at revision ${page.head}, behind the revision ${cursor} asked for (it was reset); list again`,
          );
        }
        if (cursor < page.compacted) {
          throw new KdsError(
            "store_compacted",
            `changes after revision ${cursor} are no longer kept (the oldest kept is ${page.compacted + 1}); list again`,
          );
        }
        for (const change of page.changes) {
          if (signal.aborted) return;
          yield change;
          cursor = change.revision;
        }
        if (page.changes.length >= this.#pageSize) continue;
        // Every matching change up to the head was read: skip past the others.
        cursor = Math.max(cursor, page.head);
        if (signal.aborted) return;
        const poll = timer(this.#pollIntervalMs);
        try {
          await Promise.race([waker.wait(), poll.promise]);
        } finally {
          poll.cancel();
        }
      }
    } finally {
      this.#watchers.delete(waker);
      signal.removeEventListener("abort", onAbort);
    }
  }

  /** Changes after `cursor` of `kinds` (up to a page), with the head revision and compaction point of the same snapshot. */
  async #page(
    cursor: number,
    kinds: readonly string[],
    signal: AbortSignal,
  ): Promise<{ head: number; compacted: number; changes: StoreChange[] }> {
    const rows = await guarded(signal, "watch", this.#cancels, (run) =>
      run(this.#sql<
        Array<{ head: string; compacted: string } & { [K in keyof ChangeRow]: ChangeRow[K] | null }>
      >`
        SELECT s.revision::text AS head, s.compacted_through::text AS compacted, c.*
        FROM kds_state s LEFT JOIN LATERAL (
          SELECT ${this.#sql.unsafe(CHANGE_COLUMNS)} FROM kds_changes
          WHERE revision > ${String(cursor)}::int8 AND kind = ANY(${kinds as string[]}::text[])
          ORDER BY kds_changes.revision LIMIT ${this.#pageSize}
        ) c ON true
        ORDER BY c.revision::int8`),
    );
    const first = rows[0];
    if (first === undefined)
      throw new KdsError(
        "store_unavailable",
        `the store's state row is missing in ${this.#target} (schema "${this.#schema}")`,
      );
    const changes: StoreChange[] = [];
    for (const row of rows)
      if (row.revision !== null) changes.push(decodeChange(this.#types, row as ChangeRow));
    return { head: Number(first.head), compacted: Number(first.compacted), changes };
  }

  /** Wakes the watches of any of `kinds` (every watch when undefined). */
  #wake(kinds: ReadonlySet<string> | undefined): void {
    for (const [waker, watched] of this.#watchers) if (wakes(watched, kinds)) waker.wake();
  }

  /** Makes sure the LISTEN connection is up (again); wakes every watcher to catch up when it had to listen anew. */
  #listen(): Promise<void> {
    if (this.#listening === undefined) {
      const listening = this
        .#listenSql`LISTEN ${this.#listenSql.unsafe(`"${this.#channel}"`)}`.then(() =>
        this.#wake(undefined),
      );
      this.#listening = listening;
      listening.catch(() => {
        // The watcher awaiting this promise handles the failure; forget it so the next attempt listens again.
        if (this.#listening === listening) this.#listening = undefined;
      });
    }
    return this.#listening;
  }

  /**
   * Runs one store call: cancellable through `signal`, failures turned into
   * KdsErrors. A call whose new connection did not become ready within the
   * connect timeout runs again, up to {@link CONNECT_ATTEMPTS} times in all:
   * its statement was never sent (postgres.js sends it only once the server
   * is ready), and a pool connection is replaced at the end of its lifetime
   * even while this process is too busy to finish the handshake in time.
   * A body of several statements outside a transaction is safe to run again:
   * the only one here (a lease claim) runs its later read only when its
   * write changed nothing.
   */
  async #call<T>(
    what: string,
    signal: AbortSignal | undefined,
    body: (run: Runner) => Promise<T>,
  ): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      if (this.#closed.signal.aborted) throw this.#closed.signal.reason;
      try {
        return await guarded(signal, what, this.#cancels, body);
      } catch (error) {
        if (signal?.aborted) throw abortError(signal, what);
        if (attempt >= CONNECT_ATTEMPTS || !isConnectTimeout(error))
          throw storeError(error, this.#target, what);
        const delay = backoffDelay(attempt - 1, CONNECT_RETRY);
        this.#logger.warn("PostgreSQL store: a new connection timed out; trying the call again", {
          target: this.#target,
          call: what,
          attempt,
          retryInMs: Math.round(delay),
        });
        await sleep(delay, signal).catch(() => {
          // Only an abort rejects sleep; the next turn of the loop reports it (or the store closing) with its reason.
        });
        if (signal?.aborted) throw abortError(signal, what);
      }
    }
  }

  #kindName(kind: string): string {
    return this.#types.find(kind)?.kind ?? kind;
  }
}

function* chunks<T>(items: readonly T[], size: number): Generator<T[]> {
  for (let i = 0; i < items.length; i += size) yield items.slice(i, i + size);
}
