/**
 * Graceful stop for long-running commands: the first SIGINT or SIGTERM
 * aborts the returned signal (the command winds down and exits 0); a second
 * one exits at once.
 *
 * @module
 */
import { setMaxListeners } from "node:events";

/** A signal aborted by the first SIGINT/SIGTERM (or after `durationMs`, when given). */
export function stopSignal(durationMs?: number): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  // Every component of a control plane ties itself to this one signal.
  setMaxListeners(0, controller.signal);
  let count = 0;
  const onSignal = (name: NodeJS.Signals): void => {
    count++;
    if (count > 1) process.exit(130);
    controller.abort(new Error(`received ${name}`));
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  const timer =
    durationMs !== undefined && durationMs > 0
      ? setTimeout(() => controller.abort(new Error("duration elapsed")), durationMs)
      : undefined;
  return {
    signal: controller.signal,
    dispose: () => {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      if (timer !== undefined) clearTimeout(timer);
    },
  };
}

/** Resolves when `signal` aborts. */
export function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener("abort", () => resolve(), { once: true });
  });
}
