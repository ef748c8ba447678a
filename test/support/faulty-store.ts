// A ResourceStore wrapper that fails on purpose: the next N calls of a
// method, a random share of them, or a watch that breaks after N changes.
import { KdsError } from "../../src/errors.ts";
import type {
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
} from "../../src/store/contract.ts";
import type { StoredResource } from "../../src/kinds/resource-types.ts";

export type StoreMethod =
  | "get"
  | "getMany"
  | "list"
  | "put"
  | "delete"
  | "apply"
  | "revision"
  | "watch";

interface Plan {
  /** Fail the next `once` calls (optionally only for this kind). */
  once: number;
  kind?: string;
  /** Fail this share of calls. */
  rate: number;
}

export class FaultyStore implements ResourceStore {
  readonly inner: ResourceStore;
  readonly #plans = new Map<StoreMethod, Plan>();
  readonly #random: () => number;
  /** Failures injected so far, per method. */
  readonly failures = new Map<StoreMethod, number>();
  /** Calls made, per method. */
  readonly calls = new Map<StoreMethod, number>();
  /** Calls made, per "method:kind". */
  readonly callsByKind = new Map<string, number>();
  /** A watch breaks after yielding this many changes (once), when set. */
  #breakWatchAfter: number | undefined;
  /** Extra latency of every call, in ms. */
  delayMs = 0;

  constructor(inner: ResourceStore, random: () => number = Math.random) {
    this.inner = inner;
    this.#random = random;
  }

  /** The next `count` calls of `method` (of `kind` only, when given) fail. */
  failNext(method: StoreMethod, count = 1, kind?: string): this {
    this.#plans.set(method, { once: count, kind, rate: this.#plans.get(method)?.rate ?? 0 });
    return this;
  }

  /** A share `rate` of the calls of `method` fail from now on. */
  failRate(method: StoreMethod, rate: number): this {
    const plan = this.#plans.get(method) ?? { once: 0, rate: 0 };
    plan.rate = rate;
    this.#plans.set(method, plan);
    return this;
  }

  /** A live or next watch breaks (store_unavailable) after `count` more changes. */
  breakWatchAfter(count: number): this {
    this.#breakWatchAfter = count;
    return this;
  }

  /** Stops every injected failure. */
  heal(): void {
    this.#plans.clear();
    this.#breakWatchAfter = undefined;
    this.delayMs = 0;
  }

  async #enter(method: StoreMethod, kind?: string): Promise<void> {
    this.calls.set(method, (this.calls.get(method) ?? 0) + 1);
    if (kind !== undefined)
      this.callsByKind.set(
        `${method}:${kind}`,
        (this.callsByKind.get(`${method}:${kind}`) ?? 0) + 1,
      );
    if (this.delayMs > 0) await new Promise((r) => setTimeout(r, this.delayMs));
    const plan = this.#plans.get(method);
    if (plan === undefined) return;
    const matches = plan.kind === undefined || plan.kind === kind;
    if ((plan.once > 0 && matches) || (plan.rate > 0 && this.#random() < plan.rate)) {
      if (plan.once > 0 && matches) plan.once--;
      this.failures.set(method, (this.failures.get(method) ?? 0) + 1);
      throw new KdsError(
        "store_unavailable",
        `injected ${method} failure${kind === undefined ? "" : ` (${kind})`}`,
      );
    }
  }

  async get(
    kind: string,
    mesh: string,
    name: string,
    options?: { signal?: AbortSignal },
  ): Promise<StoredResource | undefined> {
    await this.#enter("get", kind);
    return this.inner.get(kind, mesh, name, options);
  }
  async getMany(
    kind: string,
    refs: readonly ResourceName[],
    options?: { signal?: AbortSignal },
  ): Promise<Array<StoredResource | undefined>> {
    await this.#enter("getMany", kind);
    return this.inner.getMany(kind, refs, options);
  }
  async list(kind: string, options?: ListOptions): Promise<ListResult> {
    await this.#enter("list", kind);
    return this.inner.list(kind, options);
  }
  async put(input: ResourceInput, options?: WriteOptions): Promise<StoredResource> {
    await this.#enter("put", input.kind);
    return this.inner.put(input, options);
  }
  async delete(kind: string, mesh: string, name: string, options?: WriteOptions): Promise<boolean> {
    await this.#enter("delete", kind);
    return this.inner.delete(kind, mesh, name, options);
  }
  async apply(ops: readonly WriteOp[], options?: { signal?: AbortSignal }): Promise<ApplyResult> {
    const first = ops[0];
    await this.#enter(
      "apply",
      first === undefined ? undefined : first.op === "put" ? first.input.kind : first.kind,
    );
    return this.inner.apply(ops, options);
  }
  async revision(options?: { signal?: AbortSignal }): Promise<number> {
    await this.#enter("revision");
    return this.inner.revision(options);
  }
  watch(fromRevision: number, options: WatchOptions): AsyncIterable<StoreChange> {
    return { [Symbol.asyncIterator]: () => this.#watch(fromRevision, options) };
  }
  async *#watch(fromRevision: number, options: WatchOptions): AsyncGenerator<StoreChange> {
    await this.#enter("watch");
    for await (const change of this.inner.watch(fromRevision, options)) {
      if (this.#breakWatchAfter !== undefined && this.#breakWatchAfter-- <= 0) {
        this.#breakWatchAfter = undefined;
        this.failures.set("watch", (this.failures.get("watch") ?? 0) + 1);
        throw new KdsError("store_unavailable", "injected watch break");
      }
      yield change;
    }
  }
}

/** Follows `store` from revision 0 and counts deletions per "kind/key" until `signal` aborts. */
export function countDeletes(store: ResourceStore, signal: AbortSignal): Map<string, number> {
  const deletes = new Map<string, number>();
  void (async () => {
    for await (const change of store.watch(0, { signal })) {
      if (change.op !== "delete") continue;
      const key = `${change.ref.kind}/${change.ref.mesh}/${change.ref.name}`;
      deletes.set(key, (deletes.get(key) ?? 0) + 1);
    }
  })().catch((error: unknown) => {
    throw error; // surfaces as an unhandled rejection: vitest fails the run
  });
  return deletes;
}
