// The one percentile helper of the bench scenarios.

/** The `p`th percentile (0-100) of `sorted` (ascending), nearest rank; NaN when empty. */
export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}
