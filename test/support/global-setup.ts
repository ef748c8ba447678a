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
import { startEmbeddedPostgres, type EmbeddedPostgres } from "../../src/adapters/node/embedded-postgres.ts";
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
  // concurrent run finds it locked and uses a throwaway one.
  let server: EmbeddedPostgres;
  let throwaway: string | undefined;
  try {
    server = await startEmbeddedPostgres({ dataDir: join("node_modules", ".cache", "kds-mux", "test-postgres"), createSystemUser: true, settings: TEST_SERVER_SETTINGS });
  } catch (error) {
    if (!KdsError.is(error, "invalid_argument")) throw error;
    throwaway = await mkdtemp(join(tmpdir(), "kds-test-postgres-"));
    server = await startEmbeddedPostgres({ dataDir: throwaway, createSystemUser: true, settings: TEST_SERVER_SETTINGS });
  }
  project.provide("kdsTestServerUrl", server.url);
  return async () => {
    await server.stop();
    if (throwaway !== undefined) await rm(throwaway, { recursive: true, force: true });
  };
}
