// One change traced end to end across a global PROCESS and a zone PROCESS, both run with
// --otlp-endpoint pointed at a small OTLP/HTTP receiver in this test, which decodes what the
// exporters send (OTLP JSON, what @opentelemetry/exporter-trace-otlp-http sends by default): the
// global's kds.change, kds.queue, kds.send and kds.encode and the zone's kds.receive and kds.apply
// share one trace id, the zone's spans children of the global's kds.send. And an --otlp-endpoint
// that is not a URL is refused naming the flag.
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import { KdsProcess, run, until, startDevGlobal } from "./process.ts";

const processes: KdsProcess[] = [];
let receiver: Server | undefined;
afterAll(async () => {
  for (const p of processes) await p.stop();
  await new Promise<void>((resolve) =>
    receiver === undefined ? resolve() : receiver.close(() => resolve()),
  );
});

/** A span as the receiver decoded it, with the export request that brought it. */
interface ReceivedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  readonly attributes: Record<string, string | number | boolean>;
  /** Which process exported it: each is given its own URL, /<process>/v1/traces. */
  readonly from: string;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
}
interface OtlpJson {
  resourceSpans?: {
    scopeSpans?: {
      scope?: { name?: string };
      spans?: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        attributes?: { key: string; value: OtlpValue }[];
      }[];
    }[];
  }[];
}

function decodeValue(v: OtlpValue): string | number | boolean {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.boolValue !== undefined) return v.boolValue;
  return v.doubleValue ?? "";
}

/** Starts the receiver: every POST body is decoded as OTLP/HTTP JSON into `spans`. */
async function startReceiver(spans: ReceivedSpan[], problems: string[]): Promise<string> {
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const type = req.headers["content-type"] ?? "";
      const from = /^\/(global|zone)\/v1\/traces$/.exec(req.url ?? "")?.[1];
      if (req.method !== "POST" || from === undefined || !type.startsWith("application/json")) {
        problems.push(`${req.method} ${req.url} ${type}`);
        res.writeHead(400).end();
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as OtlpJson;
      for (const rs of body.resourceSpans ?? [])
        for (const ss of rs.scopeSpans ?? [])
          for (const s of ss.spans ?? []) {
            if (ss.scope?.name !== "kds-mux") problems.push(`scope ${ss.scope?.name}`);
            spans.push({
              traceId: s.traceId,
              spanId: s.spanId,
              parentSpanId: s.parentSpanId ?? "",
              name: s.name,
              attributes: Object.fromEntries(
                (s.attributes ?? []).map((a) => [a.key, decodeValue(a.value)]),
              ),
              from,
            });
          }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  receiver = server;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("kds-mux global and zone with --otlp-endpoint", { timeout: 180_000 }, () => {
  it("export one change's spans from both processes in one trace", async () => {
    const spans: ReceivedSpan[] = [];
    const problems: string[] = [];
    const receiverUrl = await startReceiver(spans, problems);
    const {
      process: global,
      zonesUrl: muxUrl,
      adminUrl,
    } = await startDevGlobal(processes, ["--otlp-endpoint", `${receiverUrl}/global/v1/traces`]);
    expect(global.output).toContain(
      `exporting trace spans over OTLP/HTTP to ${receiverUrl}/global/v1/traces`,
    );
    const registered = await run(
      ["apply", "-f", "-", "--server", adminUrl],
      "type: Zone\nname: zone-t\nspec:\n  enabled: true\n",
    );
    expect(registered.code, registered.stderr).toBe(0);
    const zone = new KdsProcess([
      "zone",
      "--name",
      "zone-t",
      "--global",
      muxUrl,
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--otlp-endpoint",
      `${receiverUrl}/zone/v1/traces`,
    ]);
    processes.push(zone);
    const zoneAdmin = (
      await zone.waitFor(/admin API listening on (http:\/\/127\.0\.0\.1:\d+)/, 90_000)
    )[1] as string;
    // Once the zone is synced (its first exchange done), the change to follow.
    await until(
      () => run(["get", "Mesh", "--server", zoneAdmin, "-o", "json"]),
      (r) => r.code === 0,
      "the zone answers",
      60_000,
    );
    const applied = await run(
      ["apply", "-f", "-", "--server", adminUrl],
      "type: Mesh\nname: traced\nspec:\n  description: followed from the global's store to the zone's ACK\n",
    );
    expect(applied.code, applied.stderr).toBe(0);
    await until(
      () => run(["get", "Mesh", "traced", "--server", zoneAdmin, "-o", "json"]),
      (r) => r.code === 0,
      "the mesh reaches the zone",
      60_000,
    );
    const names = ["kds.change", "kds.queue", "kds.send", "kds.encode", "kds.receive", "kds.apply"];
    const traced = await until(
      async () => {
        const change = spans.find(
          (s) => s.name === "kds.change" && s.attributes["kds.key"] === "traced",
        );
        return change === undefined ? [] : spans.filter((s) => s.traceId === change.traceId);
      },
      (inTrace) => names.every((n) => inTrace.some((s) => s.name === n)),
      "every span of the change at the receiver",
      60_000,
    );
    expect(problems).toEqual([]);
    const one = (name: string): ReceivedSpan => {
      const found = traced.filter((s) => s.name === name);
      expect(found, name).toHaveLength(1);
      return found[0] as ReceivedSpan;
    };
    const change = one("kds.change");
    const send = one("kds.send");
    const receive = one("kds.receive");
    const apply = one("kds.apply");
    expect(traced.every((s) => /^[0-9a-f]{32}$/.test(s.traceId))).toBe(true);
    expect(change.parentSpanId).toBe("");
    expect(one("kds.queue").parentSpanId).toBe(change.spanId);
    expect(send.parentSpanId).toBe(change.spanId);
    expect(one("kds.encode").parentSpanId).toBe(send.spanId);
    expect(receive.parentSpanId).toBe(send.spanId);
    expect(apply.parentSpanId).toBe(send.spanId);
    // Recorded by two processes, each exporting to its own URL.
    for (const s of traced)
      expect(s.from, s.name).toBe(
        s.name === "kds.receive" || s.name === "kds.apply" ? "zone" : "global",
      );
    expect(change.attributes["kds.role"]).toBe("global");
    expect(send.attributes["kds.zone"]).toBe("zone-t");
    expect(receive.attributes["kds.role"]).toBe("zone");
    expect(apply.attributes["kds.role"]).toBe("zone");
  });

  it("refuses an --otlp-endpoint that is not a URL, naming the flag (or the variable)", async () => {
    for (const command of ["global", "zone"]) {
      const r = await run([command, "--otlp-endpoint", "no url", "--store", "memory"]);
      expect(r.code).not.toBe(0);
      expect(r.stderr).toContain("option '--otlp-endpoint <url>' argument 'no url' is invalid");
      expect(r.stderr).toContain('"no url" is not a URL');
    }
    const ftp = await run([
      "global",
      "--store",
      "memory",
      "--otlp-endpoint",
      "ftp://collector/v1/traces",
    ]);
    expect(ftp.code).not.toBe(0);
    expect(ftp.stderr).toContain("--otlp-endpoint");
    expect(ftp.stderr).toContain("OTLP/HTTP needs http: or https:");
    const env = await run(["global", "--store", "memory"], undefined, {
      KDS_MUX_OTLP_ENDPOINT: "no url",
    });
    expect(env.code).not.toBe(0);
    expect(env.stderr).toContain("KDS_MUX_OTLP_ENDPOINT");
    expect(env.stderr).toContain("--otlp-endpoint");
  });
});
