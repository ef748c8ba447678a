/**
 * A fresh, isolated PostgreSQL database for a test file: created on the test
 * server (`KDS_TEST_DATABASE_URL`, or the embedded one the vitest globalSetup
 * started) under a unique name, dropped afterwards.
 *
 * @module
 */
import postgres from "postgres";
import { inject } from "vitest";

/** A database of its own. */
export interface TestDatabase {
  /** Its URL. */
  readonly url: string;
  /** Its name. */
  readonly name: string;
  /** Drops it (closing whatever is still connected). */
  drop(): Promise<void>;
}

let counter = 0;

/** The URL of the server tests create databases on. */
export function testServerUrl(): string {
  const fromEnv = process.env.KDS_TEST_DATABASE_URL;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  return inject("kdsTestServerUrl");
}

/** Creates a uniquely named database on the test server. */
export async function freshDatabase(serverUrl: string = testServerUrl()): Promise<TestDatabase> {
  const name = `kds_test_${process.pid}_${++counter}_${Math.random().toString(36).slice(2, 8)}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => undefined, connect_timeout: 10 });
  try {
    await admin.unsafe(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end({ timeout: 5 });
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: async () => {
      const sql = postgres(serverUrl, { max: 1, onnotice: () => undefined, connect_timeout: 10 });
      try {
        await sql.unsafe(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await sql.end({ timeout: 5 });
      }
    },
  };
}
