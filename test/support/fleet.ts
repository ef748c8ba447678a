// Drives test/support/zone-fleet.ts, a child process of zones, from a test:
// start it, wait for its lines, send it commands.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { FleetConfig, FleetZone } from "./zone-fleet.ts";

/** A running zone fleet. */
export interface Fleet {
  /** Waits for the next line of the fleet's that holds `key` (lines without it are passed over). */
  next(key: string): Promise<Record<string, unknown>>;
  /** Sends a command ("mark", "stop-churn", "report"). */
  send(command: string): void;
  /** Every zone's report, now. */
  report(): Promise<Record<string, FleetZone>>;
  /** Ends the fleet (its zones stop when its stdin closes). */
  end(): void;
}

/** The documents a fleet's global starts with, for `kds-mux apply -f -`: Zones zone-0.. and Meshes m-0.. (description v0). */
export function fleetDocuments(zones: number, meshes: number): string {
  return [
    ...Array.from(
      { length: zones },
      (_, i) => `type: Zone\nname: zone-${i}\nspec:\n  enabled: true\n`,
    ),
    ...Array.from(
      { length: meshes },
      (_, i) => `type: Mesh\nname: m-${i}\nspec:\n  description: v0\n`,
    ),
  ].join("---\n");
}

/** Starts the zones of `config` in a child process under tsx. */
export function startFleet(config: FleetConfig): Fleet {
  const child = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      fileURLToPath(new URL("./zone-fleet.ts", import.meta.url)),
      JSON.stringify(config),
    ],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async (key: string): Promise<Record<string, unknown>> => {
    for (;;) {
      const { value, done } = await lines.next();
      if (done === true) throw new Error(`the zone fleet ended before printing ${key}`);
      const parsed = JSON.parse(value as string) as Record<string, unknown>;
      if (key in parsed) return parsed;
    }
  };
  const send = (command: string): void => {
    child.stdin.write(`${command}\n`);
  };
  return {
    next,
    send,
    report: async () => {
      send("report");
      return (await next("report")).report as Record<string, FleetZone>;
    },
    end: () => child.stdin.end(),
  };
}
