// A real global (and, when asked, a zone connected to it) as child processes
// of the kds-mux executable, on loopback with OS-chosen ports, for the tests
// that check the shipped files (dashboard, alert rules, deployment examples)
// against what a running instance serves.
import { KdsProcess, run, startDevGlobal } from "../cli/process.ts";

/** A running global, and a zone if one was started. */
export interface LiveFleet {
  /** The global's admin URL (its /metrics, /livez, /readyz). */
  readonly globalAdmin: string;
  /** The zone's admin URL, when a zone was started. */
  readonly zoneAdmin?: string;
  /** Stops every process. */
  stop(): Promise<void>;
}

/** Starts a global on a memory store, and with `zone` a zone named "zone-1" that connects to it. */
export async function startFleet(options: { zone: boolean }): Promise<LiveFleet> {
  const processes: KdsProcess[] = [];
  const stop = async (): Promise<void> => {
    for (const p of processes.reverse()) await p.stop();
  };
  try {
    const devGlobal = await startDevGlobal(processes);
    const [muxUrl, globalAdmin] = [devGlobal.zonesUrl, devGlobal.adminUrl];
    if (!options.zone) return { globalAdmin, stop };
    const registered = await run(
      ["apply", "-f", "-", "--server", globalAdmin],
      "type: Zone\nname: zone-1\nspec:\n  enabled: true\n",
    );
    if (registered.code !== 0) throw new Error(`apply Zone failed: ${registered.stderr}`);
    const zone = new KdsProcess([
      "zone",
      "--name",
      "zone-1",
      "--global",
      muxUrl,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
    ]);
    processes.push(zone);
    const zoneAdmin = (
      await zone.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/, 90_000)
    )[1] as string;
    return { globalAdmin, zoneAdmin, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
