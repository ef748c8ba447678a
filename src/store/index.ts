/**
 * The store contract and the in-memory store; the PostgreSQL store is `kds-mux/postgres`.
 *
 * @module
 */
export type {
  ApplyOptions,
  ApplyResult,
  ListOptions,
  ListResult,
  ResourceInput,
  ResourceRef,
  ResourceStore,
  StoreChange,
  WatchOptions,
  WriteOp,
  WriteOptions,
} from "./contract.ts";
export {
  InMemoryStore,
  type InMemoryStoreOptions,
} from "./memory.ts";
export { validateInput } from "./validate.ts";
export {
  followStore,
  type FollowOptions,
} from "./follow.ts";
export type { ResourceName } from "./contract.ts";
export {
  isLeaseStore,
  type Lease,
  type LeaseAttempt,
  type LeaseCallOptions,
  type LeaseClaim,
  type LeaseRecord,
  type LeaseStore,
  type WriteFence,
} from "./lease.ts";
