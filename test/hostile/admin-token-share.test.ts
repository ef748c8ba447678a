// Issue 24 review finding 4, with a real `kds-mux global`: on a token-protected admin listener (bound to
// 0.0.0.0, reached through 127.0.0.1), one admin token (read-only, as Prometheus's would be) opening
// more connections than the whole listener holds, each with a status event stream open, keeps only its
// share of 16; another token's `get` still succeeds. Small: 24 slots, 24 streams.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminClient, type AdminTarget } from "../../src/cli/admin-client.ts";
import { parseMetrics } from "../observe/scrape.ts";
import { KdsProcess, run, until } from "../cli/process.ts";

const ADMIN_MAX_CONNECTIONS = 24;
const SHARE = 16;

describe(`one admin token cannot fill the admin listener (--admin-max-connections ${ADMIN_MAX_CONNECTIONS}, ${SHARE} per token)`, {
  timeout: 120_000,
}, () => {
  let global: KdsProcess;
  let admin: AdminTarget;

  beforeAll(async () => {
    const tokenFile = join(mkdtempSync(join(tmpdir(), "kds-mux-token-share-")), "admin.token");
    global = new KdsProcess([
      "global",
      ...[
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "0.0.0.0:0",
        "--admin-token-file",
        tokenFile,
        "--store",
        "memory",
      ],
      ...["--admin-max-connections", String(ADMIN_MAX_CONNECTIONS)],
    ]);
    const port = Number(
      (await global.waitFor(/admin API on http:\/\/0\.0\.0\.0:(\d+)/, 60_000))[1],
    );
    admin = { url: `http://127.0.0.1:${port}`, token: readFileSync(tokenFile, "utf8").trim() };
  }, 90_000);

  afterAll(async () => {
    await global?.stop();
  });

  it(`a read-only token holding ${ADMIN_MAX_CONNECTIONS} event streams keeps ${SHARE} connections, and the operator's get succeeds`, async () => {
    const generated = await run([
      "generate",
      "admin-token",
      "--name",
      "scraper",
      "--role",
      "read-only",
      "--server",
      admin.url,
      "--token",
      admin.token as string,
    ]);
    expect(generated.code, generated.stderr).toBe(0);
    const readOnly = generated.stdout.trim();
    const stop = new AbortController();
    // Each stream is its own HTTP/1.1 connection (fetch opens a new one while the others are busy).
    const statuses: number[] = [];
    const open = async (): Promise<ReadableStreamDefaultReader<Uint8Array> | undefined> => {
      try {
        const response = await fetch(`${admin.url}/status/events`, {
          headers: { authorization: `Bearer ${readOnly}` },
          signal: stop.signal,
        });
        statuses.push(response.status);
        const reader = response.body?.getReader();
        await reader?.read(); // the first event: this stream is served
        return reader;
      } catch {
        // Closed by the global to keep the token to its share (counted through the metrics below), or by stop.
        return undefined;
      }
    };
    const streams = Array.from({ length: ADMIN_MAX_CONNECTIONS }, open);
    try {
      await Promise.all(streams);
      const scrape = async (): Promise<Awaited<ReturnType<typeof parseMetrics>>> =>
        parseMetrics(
          await (
            await fetch(`${admin.url}/metrics`, {
              headers: { authorization: `Bearer ${admin.token as string}` },
            })
          ).text(),
        );
      const started = performance.now();
      const got = await adminClient(admin).get({ type: "Mesh" });
      const getMs = Math.round(performance.now() - started);
      expect(got.resources).toEqual([]);
      const metrics = await until(
        scrape,
        (m) =>
          m.value("kds_connections_evicted_total", { listener: "admin" }) >=
          ADMIN_MAX_CONNECTIONS - SHARE,
        "the token's connections beyond its share closed",
      );
      const evicted = metrics.value("kds_connections_evicted_total", { listener: "admin" });
      const refused = metrics.value("kds_connections_refused_total", { listener: "admin" });
      console.log(
        `admin token share: one read-only token opened ${ADMIN_MAX_CONNECTIONS} event streams against ${ADMIN_MAX_CONNECTIONS} slots; the global closed ${evicted} (share ${SHARE}), refused ${refused}; the operator's get took ${getMs} ms`,
      );
      expect(refused).toBe(0);
      expect(
        statuses.every((status) => status === 200),
        String(statuses),
      ).toBe(true);
      expect(global.output).toMatch(
        /an identity on the admin listener opened more than 16 authenticated connections: its oldest was closed/,
      );
    } finally {
      stop.abort();
      // A stream the global already closed cannot be cancelled; nothing is lost there.
      await Promise.all(
        streams.map((s) => s.then((reader) => reader?.cancel().catch(() => undefined))),
      );
    }
  });
});
