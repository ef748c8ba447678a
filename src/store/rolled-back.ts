/**
 * Whether a failed write is known to have written nothing: a store that saw
 * its database refuse the transaction (the server answered with an error, so
 * it rolled the transaction back) marks the error, and the admin API's apply
 * then says "none was applied" instead of "either all or none". Errors from
 * a lost connection are never marked: the commit may have happened.
 *
 * @module
 */

const marked = new WeakSet<object>();

/** Marks `error` as a write the store knows was rolled back (nothing written); returns it. */
export function markRolledBack<T>(error: T): T {
  if (typeof error === "object" && error !== null) marked.add(error);
  return error;
}

/** True when a store marked `error` with {@link markRolledBack}. */
export function wasRolledBack(error: unknown): boolean {
  return typeof error === "object" && error !== null && marked.has(error);
}
