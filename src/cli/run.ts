/**
 * Entry point of the `kds-mux` executable.
 *
 * @module
 */
import { main } from "./main.ts";

process.exitCode = await main(process.argv);
// Long-running commands have closed everything; end even if a library left a timer.
setTimeout(() => process.exit(process.exitCode ?? 0), 100).unref();
