// A watch on the PostgreSQL store when the database goes away for longer than
// it rides out: it fails with store_unavailable naming the revision to resume
// from, and a watch from that revision, once the database is back, loses nothing.
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { startEmbeddedPostgres } from "../../src/adapters/node/embedded-postgres.ts";
import { KdsError } from "../../src/errors.ts";
import { silentLogger } from "../../src/log.ts";
import type { StoreChange } from "../../src/store/contract.ts";
import { PostgresStore } from "../../src/store/postgres.ts";
import { collect, describeChange, mesh, types } from "./fixtures.ts";

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

it("fails a watch with store_unavailable after watchOutageMs without the database, and resumes from the revision it names", async () => {
  const dir = await mkdtemp(join(tmpdir(), "kds-outage-"));
  dirs.push(dir);
  await chmod(dir, 0o755);
  const first = await startEmbeddedPostgres({ dataDir: dir, createSystemUser: true });
  const store = await PostgresStore.open(types, {
    url: first.url,
    logger: silentLogger,
    watchOutageMs: 1_000,
    pollIntervalMs: 3_600_000,
  });
  const seen: StoreChange[] = [];
  let failure: unknown;
  try {
    await store.apply([
      { op: "put", input: mesh("a") },
      { op: "put", input: mesh("b") },
    ]);
    const controller = new AbortController();
    let caughtUp: () => void = () => undefined;
    const twoSeen = new Promise<void>((r) => (caughtUp = r));
    const watching = (async () => {
      for await (const change of store.watch(0, { signal: controller.signal })) {
        seen.push(change);
        if (seen.length === 2) caughtUp();
      }
    })().catch((error: unknown) => {
      failure = error;
    });
    await twoSeen;
    await first.stop(); // the database goes away while the watch waits
    await watching;
  } finally {
    await store.close();
  }
  expect(KdsError.is(failure, "store_unavailable")).toBe(true);
  expect((failure as Error).message).toMatch(
    /has been unreachable for \d+ s; watch again from revision 2 once it is back/,
  );
  // Back (on another port): a new watch from the revision named loses nothing.
  const second = await startEmbeddedPostgres({ dataDir: dir, createSystemUser: true });
  try {
    const again = await PostgresStore.open(types, { url: second.url, logger: silentLogger });
    try {
      await again.put(mesh("c"));
      const resumed = await collect(again, 2, (c) => c.length >= 1);
      expect([...seen, ...resumed].map(describeChange)).toEqual([
        "put Mesh /a@1",
        "put Mesh /b@2",
        "put Mesh /c@3",
      ]);
    } finally {
      await again.close();
    }
  } finally {
    await second.stop();
  }
}, 120_000);
