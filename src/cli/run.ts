/**
 * Entry point of the `kds-mux` executable.
 *
 * @module
 */
import { tolerateIdleGoaway } from "../adapters/node/idle-goaway.ts";
import { main } from "./main.ts";

// A zone's idle pooled connection may hit a connect-node race when the global goes away (see idle-goaway.ts).
tolerateIdleGoaway((message) => console.warn(`[kds-mux] warn: ${message}`));

process.exitCode = await main(process.argv);
// Long-running commands have closed everything; end even if a library left a timer.
setTimeout(() => process.exit(process.exitCode ?? 0), 100).unref();
