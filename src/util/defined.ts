/**
 * Options objects whose properties may be present but `undefined`.
 *
 * @module
 */

/**
 * `options` without its properties that are `undefined`, so that spreading
 * it over defaults (`{ ...defaults, ...definedOnly(options) }`) keeps the
 * default of an option passed as `undefined` instead of replacing it: an
 * optional option given as `undefined` means "the default", as if absent.
 */
export function definedOnly<T extends object>(options: T): Partial<T> {
  return Object.fromEntries(
    Object.entries(options).filter(([, value]) => value !== undefined),
  ) as Partial<T>;
}
