/**
 * A zone replica's view of its shared store: reads go through as they are;
 * every write carries the fence of the replica's current term (store/lease.ts),
 * and is refused here, without reaching the store, while the replica does not
 * lead (a standby, or a leader past its renew deadline): the error names the
 * leader's admin API.
 *
 * @module
 */
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
} from "../store/contract.ts";
import type { StoredResource } from "../kinds/resource-types.ts";
import type { WriteFence } from "../store/lease.ts";
import type { KdsError } from "../errors.ts";

/** What a fenced view asks of the replica's leadership. */
export interface FenceSource {
  /** The current term's fence; undefined while this replica does not lead. */
  fence(): WriteFence | undefined;
  /** The error of a write refused now, saying where to send it. */
  refusal(what: string): KdsError;
}

/** A view of `store` whose writes are fenced by `leadership`'s term (see the module description). */
export function fencedStore(store: ResourceStore, leadership: FenceSource): ResourceStore {
  const fenceOr = (what: string): WriteFence => {
    const fence = leadership.fence();
    if (fence === undefined) throw leadership.refusal(what);
    return fence;
  };
  const view: ResourceStore = {
    get: (kind, mesh, name, options) => store.get(kind, mesh, name, options),
    getMany: (kind: string, refs: readonly ResourceName[], options?: { signal?: AbortSignal }) =>
      store.getMany(kind, refs, options),
    list: (kind: string, options?: ListOptions): Promise<ListResult> => store.list(kind, options),
    put: async (input: ResourceInput, options?: WriteOptions): Promise<StoredResource> =>
      store.put(input, {
        ...options,
        fence: fenceOr(`the write of ${input.kind} "${input.name}"`),
      }),
    delete: async (kind, mesh, name, options?: WriteOptions): Promise<boolean> =>
      store.delete(kind, mesh, name, {
        ...options,
        fence: fenceOr(`the deletion of ${kind} "${name}"`),
      }),
    apply: async (ops: readonly WriteOp[], options?: ApplyOptions): Promise<ApplyResult> =>
      store.apply(ops, {
        ...options,
        fence: fenceOr(
          `the write of ${ops.length === 1 ? "one resource" : `${ops.length} resources`}`,
        ),
      }),
    revision: (options) => store.revision(options),
    watch: (fromRevision: number, options: WatchOptions): AsyncIterable<StoreChange> =>
      store.watch(fromRevision, options),
  };
  if (store.close !== undefined)
    view.close = () => (store.close as () => Promise<void>).call(store);
  return view;
}
