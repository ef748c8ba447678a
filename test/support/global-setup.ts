/**
 * vitest globalSetup: gives every test file a PostgreSQL server to create its
 * databases on. With `KDS_TEST_DATABASE_URL` set, that server; otherwise ONE
 * embedded PostgreSQL for the whole run (from the npm-shipped binaries, in a
 * data dir under node_modules/.cache, on a port the OS picks), stopped at the
 * end. Nothing is skipped for lack of a server.
 *
 * @module
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import {
  startEmbeddedPostgres,
  type EmbeddedPostgres,
} from "../../src/adapters/node/embedded-postgres.ts";
import { KdsError } from "../../src/errors.ts";
import { TEST_SERVER_SETTINGS } from "./postgres-settings.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** The server tests create their databases on (see test/support/postgres.ts). */
    kdsTestServerUrl: string;
  }
}

/** Starts (or names) the test server; returns the teardown. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const fromEnv = process.env.KDS_TEST_DATABASE_URL;
  if (fromEnv !== undefined && fromEnv !== "") {
    project.provide("kdsTestServerUrl", fromEnv);
    return async () => undefined;
  }
  // A kept data dir makes later runs start in about a second (no initdb); a second
  // concurrent run finds it locked and uses a throwaway one. The kept dir is a
  // cache: one that cannot start (a cluster damaged by a crash or by two copies
  // of node_modules sharing its files) is removed, and this run uses a throwaway one.
  const kept = join("node_modules", ".cache", "kds-mux", "test-postgres");
  let server: EmbeddedPostgres;
  let throwaway: string | undefined;
  try {
    server = await startEmbeddedPostgres({
      dataDir: kept,
      createSystemUser: true,
      settings: TEST_SERVER_SETTINGS,
    });
  } catch (error) {
    if (!KdsError.is(error, "invalid_argument")) {
      console.warn(
        `the kept test PostgreSQL in ${kept} did not start; removing it and using a fresh one: ${error instanceof Error ? error.message.split("\n")[0] : String(error)}`,
      );
      await rm(kept, { recursive: true, force: true });
    }
    throwaway = await mkdtemp(join(tmpdir(), "kds-test-postgres-"));
    server = await startEmbeddedPostgres({
      dataDir: throwaway,
      createSystemUser: true,
      settings: TEST_SERVER_SETTINGS,
    });
  }
  project.provide("kdsTestServerUrl", server.url);
  return async () => {
    await server.stop();
    if (throwaway !== undefined) await rm(throwaway, { recursive: true, force: true });
  };
}
