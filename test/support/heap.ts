// The heap after forced garbage collection, for memory tests (vitest runs
// without --expose-gc, so the flag is set at runtime and gc() fetched from a
// fresh context).
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

/** Forces three full garbage collections. */
export function collectGarbage(): void {
  for (let i = 0; i < 3; i++) gc();
}

/** Bytes of heap in use after three forced collections. */
export function heapAfterGc(): number {
  collectGarbage();
  return process.memoryUsage().heapUsed;
}
