import { defineConfig } from "vitest/config";
import { isIdleGoawayRace } from "./src/adapters/node/idle-goaway.ts";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // One PostgreSQL server for the run (KDS_TEST_DATABASE_URL, or an embedded one).
    globalSetup: ["test/support/global-setup.ts"],
    testTimeout: 30_000,
    // Most files wait on child processes (globals, zones, PostgreSQL) rather than compute, and vitest's
    // default on 2 cores is one file at a time (cores - 1): three overlap those waits (620 s -> 350 s here, 333 tests).
    maxWorkers: 3,
    hookTimeout: 60_000,
    // Only the connect-node 2.2.0 race on an idle HTTP/2 connection (no stream open, nothing lost; see
    // src/adapters/node/idle-goaway.ts, which the CLI installs too). Every other unhandled error fails the run.
    onUnhandledError: (error) => (isIdleGoawayRace(error) ? false : undefined),
  },
});
