/**
 * Store latency: a wrapper that times every promise-returning call of a
 * store and reports it to {@link Metrics}. It wraps whatever methods the
 * store has (by name), so it follows the store contract as it grows without
 * knowing it; `watch` and other synchronous calls pass through untimed.
 *
 * @module
 */
import type { Metrics } from "../metrics.ts";

/**
 * Returns a view of `store` whose asynchronous calls report their duration
 * and outcome as `storeOperation(methodName, ms, ok)`. Calls run on `store`
 * itself (private fields keep working); results and errors are unchanged.
 */
export function instrumentStore<T extends object>(
  store: T,
  metrics: Metrics,
  now: () => number = () => performance.now(),
): T {
  const wrapped = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== "function" || typeof property !== "string") return value;
      let fn = wrapped.get(property);
      if (fn === undefined) {
        const method = value as (...args: unknown[]) => unknown;
        fn = (...args: unknown[]): unknown => {
          const started = now();
          const result = method.apply(target, args);
          if (!(result instanceof Promise)) return result;
          return result.then(
            (v: unknown) => {
              metrics.storeOperation(property, now() - started, true);
              return v;
            },
            (error: unknown) => {
              metrics.storeOperation(property, now() - started, false);
              throw error;
            },
          );
        };
        wrapped.set(property, fn);
      }
      return fn;
    },
  });
}
